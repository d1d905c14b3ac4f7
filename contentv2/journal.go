package contentv2

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	bolt "go.etcd.io/bbolt"
)

// JournalFile is the node journal's bbolt file in the state directory.
const JournalFile = "journal.db"

var (
	journalBucket = []byte("refs")
	// metaBucket holds memberKey: the cluster whose coordinator has
	// accepted a session of this node; generationKey: the journal's
	// random generation ID, created with it; ttlKey: the last session TTL
	// a coordinator announced (nanoseconds, big-endian).
	metaBucket    = []byte("meta")
	memberKey     = []byte("member")
	generationKey = []byte("generation")
	ttlKey        = []byte("session_ttl")
	// seededKey holds the generation once the journal has taken in the
	// references the coordinator had of this node (seed.go).
	seededKey = []byte("seeded")
	// hostKey holds the fingerprint of the host the journal belongs to
	// (hostid.go).
	hostKey = []byte("host")
	// forgottenKey holds the cluster whose coordinator had forgotten this
	// node while the blobs gone since are not yet dropped from the journal
	// (forgotten.go); absent otherwise.
	forgottenKey = []byte("forgotten")
)

// journal is the node's own record of the blobs it uses (docs/design.md §8.2), on
// local disk: an entry is written (and fsync'd) before the coordinator is
// asked, and dropped once the coordinator has dropped this node's
// reference. The coordinator's reference sets are rebuilt from it.
type journal struct {
	db *bolt.DB

	mu     sync.Mutex
	refs   map[digest.Digest]struct{} // protected by mu; mirrors the file
	member string                     // protected by mu; mirrors memberKey
	ttl    time.Duration              // protected by mu; mirrors ttlKey
	seeded bool                       // protected by mu; mirrors seededKey
	// forgotten is protected by mu; mirrors forgottenKey.
	forgotten string
	// generation is set when the journal is opened, then read-only.
	generation string
}

// openJournal opens the journal in stateDir on the host whose
// fingerprint is host ("": unknown). A journal of another host (its state
// dir was copied: a cloned VM) starts a new generation and is no member
// (hostid.go).
func openJournal(stateDir, host string) (*journal, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(stateDir, JournalFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: DefaultCoordinationTimeout})
	if err != nil {
		return nil, fmt.Errorf("node journal %s: %w", path, err)
	}
	j := &journal{db: db, refs: map[digest.Digest]struct{}{}}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		if err := j.checkHost(meta, host, path); err != nil {
			return err
		}
		j.member = string(meta.Get(memberKey))
		j.forgotten = string(meta.Get(forgottenKey))
		if v := meta.Get(ttlKey); len(v) == 8 {
			j.ttl = time.Duration(binary.BigEndian.Uint64(v))
		}
		j.seeded = string(meta.Get(seededKey)) != "" && string(meta.Get(seededKey)) == string(meta.Get(generationKey))
		if j.generation = string(meta.Get(generationKey)); j.generation == "" {
			// A new journal (or one older than generations).
			j.generation = newID()
			if err := meta.Put(generationKey, []byte(j.generation)); err != nil {
				return err
			}
		}
		b, err := tx.CreateBucketIfNotExists(journalBucket)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, _ []byte) error {
			j.refs[digest.Digest(k)] = struct{}{}
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("node journal %s: %w", path, err)
	}
	return j, nil
}

// checkHost records host as the journal's when it has none; when it has
// another one (of the same source), the journal was copied from another
// host: it starts a new generation, and forgets that it is a member and
// was seeded, so that it is taken for a new node's (docs/design.md §8.5).
// Its entries stay: this host's containerd, copied with it, may list
// those blobs. Run in openJournal's transaction.
func (j *journal) checkHost(meta *bolt.Bucket, host, path string) error {
	was := string(meta.Get(hostKey))
	switch {
	case host == "" || was == host:
		return nil
	case was != "" && sameSource(was, host):
		log.L.WithField("journal", path).WithField("host", host).WithField("journal_host", was).
			Warn("this node's state dir was made on another host (a cloned VM or image): its journal starts a new generation and is no member; " +
				"if this host uses the original's node ID, the coordinator refuses it until an operator releases the ID (sharedcontentctl node release); give each host its own node ID and an empty state dir")
		for _, k := range [][]byte{generationKey, memberKey, seededKey} {
			if err := meta.Delete(k); err != nil {
				return err
			}
		}
	case was != "":
		return nil // another source: not comparable; keep the record
	}
	return meta.Put(hostKey, []byte(host))
}

// add records dgst, durably, unless it is there already.
func (j *journal) add(dgst digest.Digest) error {
	j.mu.Lock()
	_, ok := j.refs[dgst]
	j.mu.Unlock()
	if ok {
		return nil
	}
	err := j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(journalBucket).Put([]byte(dgst), nil) })
	if err != nil {
		return fmt.Errorf("node journal: add %s: %w", dgst, err)
	}
	j.mu.Lock()
	j.refs[dgst] = struct{}{}
	j.mu.Unlock()
	return nil
}

// seed records every digest of ds, durably, in one transaction, and
// marks the journal seeded.
func (j *journal) seed(ds []digest.Digest) error {
	err := j.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(journalBucket)
		for _, d := range ds {
			if err := b.Put([]byte(d), nil); err != nil {
				return err
			}
		}
		return tx.Bucket(metaBucket).Put(seededKey, []byte(j.generation))
	})
	if err != nil {
		return fmt.Errorf("node journal: seed: %w", err)
	}
	j.mu.Lock()
	for _, d := range ds {
		j.refs[d] = struct{}{}
	}
	j.seeded = true
	j.mu.Unlock()
	return nil
}

func (j *journal) isSeeded() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.seeded
}

// remove drops dgst.
func (j *journal) remove(dgst digest.Digest) error {
	j.mu.Lock()
	_, ok := j.refs[dgst]
	j.mu.Unlock()
	if !ok {
		return nil
	}
	err := j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(journalBucket).Delete([]byte(dgst)) })
	if err != nil {
		return fmt.Errorf("node journal: remove %s: %w", dgst, err)
	}
	j.mu.Lock()
	delete(j.refs, dgst)
	j.mu.Unlock()
	return nil
}

func (j *journal) has(dgst digest.Digest) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.refs[dgst]
	return ok
}

// snapshot returns every entry, sorted.
func (j *journal) snapshot() ([]digest.Digest, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]digest.Digest, 0, len(j.refs))
	for d := range j.refs {
		out = append(out, d)
	}
	slices.Sort(out)
	return out, nil
}

// memberOf returns the cluster whose coordinator has completed a sync of
// this node ("" if none has).
func (j *journal) memberOf() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.member
}

// setMember records, durably, that the coordinator of cluster completed a
// sync of this node (lockserver/bystander.go: not its first session).
func (j *journal) setMember(cluster string) error {
	if j.memberOf() == cluster {
		return nil
	}
	return j.putMeta("membership", memberKey, []byte(cluster), func() { j.member = cluster })
}

// putMeta writes value under key in the meta bucket (nil deletes the
// key), durably, then calls mirror under mu to update the journal's copy.
func (j *journal) putMeta(what string, key, value []byte, mirror func()) error {
	err := j.db.Update(func(tx *bolt.Tx) error {
		if value == nil {
			return tx.Bucket(metaBucket).Delete(key)
		}
		return tx.Bucket(metaBucket).Put(key, value)
	})
	if err != nil {
		return fmt.Errorf("node journal: %s: %w", what, err)
	}
	j.mu.Lock()
	mirror()
	j.mu.Unlock()
	return nil
}

// forgottenBy returns the cluster whose coordinator had forgotten this
// node, while the blobs gone since are not yet dropped ("" otherwise).
func (j *journal) forgottenBy() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.forgotten
}

// setForgotten records, durably, that the coordinator of cluster had
// forgotten this node and the blobs gone since are still to be dropped;
// "" records that they have been.
func (j *journal) setForgotten(cluster string) error {
	if j.forgottenBy() == cluster {
		return nil
	}
	var value []byte
	if cluster != "" {
		value = []byte(cluster)
	}
	return j.putMeta("forgotten", forgottenKey, value, func() { j.forgotten = cluster })
}

// announcedTTL returns the last session TTL a coordinator announced (0 if
// none has).
func (j *journal) announcedTTL() time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ttl
}

// setAnnouncedTTL records, durably, the session TTL the coordinator
// announced: a restarted node counts with it before it hears from the
// coordinator again (docs/design.md §8).
func (j *journal) setAnnouncedTTL(ttl time.Duration) error {
	if j.announcedTTL() == ttl {
		return nil
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(ttl))
	return j.putMeta("session TTL", ttlKey, v[:], func() { j.ttl = ttl })
}

func (j *journal) close() error { return j.db.Close() }
