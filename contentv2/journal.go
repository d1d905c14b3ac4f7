package contentv2

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/opencontainers/go-digest"
	bolt "go.etcd.io/bbolt"
)

// JournalFile is the node journal's bbolt file in the state directory.
const JournalFile = "journal.db"

var (
	journalBucket = []byte("refs")
	// metaBucket holds memberKey: the cluster whose coordinator has
	// accepted a session of this node.
	metaBucket = []byte("meta")
	memberKey  = []byte("member")
)

// journal is the node's own record of the blobs it uses (SPEC §8), on
// local disk: an entry is written (and fsync'd) before the coordinator is
// asked, and dropped once the coordinator has dropped this node's
// reference. The coordinator's reference sets are rebuilt from it.
type journal struct {
	db *bolt.DB

	mu     sync.Mutex
	refs   map[digest.Digest]struct{} // protected by mu; mirrors the file
	member string                     // protected by mu; mirrors memberKey
}

func openJournal(stateDir string) (*journal, error) {
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
		j.member = string(meta.Get(memberKey))
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

// memberOf returns the cluster whose coordinator has accepted a session of
// this node ("" if none has).
func (j *journal) memberOf() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.member
}

// setMember records, durably, that the coordinator of cluster accepted a
// session of this node.
func (j *journal) setMember(cluster string) error {
	if j.memberOf() == cluster {
		return nil
	}
	err := j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(metaBucket).Put(memberKey, []byte(cluster)) })
	if err != nil {
		return fmt.Errorf("node journal: membership: %w", err)
	}
	j.mu.Lock()
	j.member = cluster
	j.mu.Unlock()
	return nil
}

func (j *journal) close() error { return j.db.Close() }
