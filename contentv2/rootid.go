package contentv2

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
)

// The shared root's identity (docs/design.md §8.19). A root is the
// cluster's when its .sharedcontent/cluster.json is the one this node saw
// when it joined: the cluster ID and the time the first node claimed the
// root, which no other root shares. The node records that identity, and
// whether the root was a mount point, in <state-dir>/root.json the first
// time a coordinator completes a sync of it; from then on it serves only
// a root that proves both.

// RootRecordFile is the file in the state directory recording the shared
// root this node joined (JSON RootRecord).
const RootRecordFile = "root.json"

// RootRecord is what a node records of the shared root it joined.
type RootRecord struct {
	Path      string    `json:"path"`
	ClusterID string    `json:"cluster_id"`
	CreatedAt time.Time `json:"created_at"`
	// Mount: the root was a mount point when the node joined.
	Mount      bool      `json:"mount"`
	RecordedAt time.Time `json:"recorded_at"`
}

// rootIdentity is what identifies a shared root: its cluster.json's
// cluster and creation time. The zero value is a root with no
// cluster.json (a new root, or one not mounted).
type rootIdentity struct {
	ClusterID string
	CreatedAt time.Time
	// CreatedBy names the node that created the cluster file (messages
	// only: it is not compared).
	CreatedBy string
}

// claim is the identity as a session names it to the coordinator.
func (id rootIdentity) claim() RootClaim {
	return RootClaim{CreatedAt: id.CreatedAt, CreatedBy: id.CreatedBy}
}

func (id rootIdentity) known() bool { return id.ClusterID != "" }

func (id rootIdentity) equal(o rootIdentity) bool {
	return id.ClusterID == o.ClusterID && id.CreatedAt.Equal(o.CreatedAt)
}

func (id rootIdentity) String() string {
	if !id.known() {
		return "none (no " + MetaDir + "/cluster.json)"
	}
	return fmt.Sprintf("cluster %s created %s", id.ClusterID, id.CreatedAt.Format(time.RFC3339Nano))
}

// readRootIdentity reads root's identity; the zero identity when it has
// no cluster.json.
func readRootIdentity(root string) (rootIdentity, error) {
	b, err := os.ReadFile(clusterFilePath(root))
	if errors.Is(err, fs.ErrNotExist) {
		return rootIdentity{}, nil
	}
	if err != nil {
		return rootIdentity{}, err
	}
	var cf ClusterFile
	if err := json.Unmarshal(b, &cf); err != nil || cf.ClusterID == "" {
		return rootIdentity{}, fmt.Errorf("%s is not a cluster file (%v)", clusterFilePath(root), err)
	}
	return rootIdentity{ClusterID: cf.ClusterID, CreatedAt: cf.CreatedAt, CreatedBy: cf.CreatedBy}, nil
}

func rootRecordPath(stateDir string) string { return filepath.Join(stateDir, RootRecordFile) }

// readRootRecord returns the recorded root, or nil when none is.
func readRootRecord(stateDir string) (*RootRecord, error) {
	b, err := os.ReadFile(rootRecordPath(stateDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the record of this node's shared root: %w", err)
	}
	var r RootRecord
	if err := json.Unmarshal(b, &r); err != nil || r.ClusterID == "" {
		return nil, fmt.Errorf("%s is not a root record (%v); restore it, or remove it to record the root again at the next start: %w",
			rootRecordPath(stateDir), err, errdefs.ErrFailedPrecondition)
	}
	return &r, nil
}

// writeRootRecord records r, durably.
func writeRootRecord(stateDir string, r RootRecord) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	p := rootRecordPath(stateDir)
	if err := writeFileSync(p+".tmp", append(b, '\n')); err != nil {
		return fmt.Errorf("recording this node's shared root: %w", err)
	}
	return os.Rename(p+".tmp", p)
}

func (r *RootRecord) identity() rootIdentity {
	return rootIdentity{ClusterID: r.ClusterID, CreatedAt: r.CreatedAt}
}

// ErrRootUnverified: the shared root is not the one this node joined (not
// mounted, empty, replaced, of another cluster).
var ErrRootUnverified = errors.New("contentv2: shared root not verified")

// RootError is a refusal to serve a shared root, at start or while
// running: what is wrong with Root and what the operator does. It matches
// ErrRootUnverified, and errdefs.ErrFailedPrecondition at start or
// errdefs.ErrUnavailable while running (containerd retries).
type RootError struct {
	Root string
	// Reason is a short label (the metric's): missing, not_mounted,
	// no_identity, identity, read_only, hung, error.
	Reason    string
	What, Fix string
	Cause     error
	running   bool
}

func (e *RootError) Error() string {
	s := "shared root " + e.Root + " " + e.What
	if e.Cause != nil {
		s += " (" + e.Cause.Error() + ")"
	}
	return s + "; " + e.Fix
}

func (e *RootError) Is(target error) bool {
	if e.Reason == rootHung && target == ErrRootStalled {
		// A probe past its deadline is a call on the root that did not
		// answer (docs/design.md §8.20).
		return true
	}
	if e.running {
		return target == ErrRootUnverified || target == errdefs.ErrUnavailable
	}
	return target == ErrRootUnverified || target == errdefs.ErrFailedPrecondition
}

func (e *RootError) Unwrap() error { return e.Cause }

// startRoot is what verifyRootAtStart found: what the store expects of
// the root from now on.
type startRoot struct {
	record *RootRecord  // nil until this node joins
	expect rootIdentity // zero until the root has a cluster.json
	mount  bool         // the root must stay a mount point
}

// verifyRootAtStart decides whether the node may serve root, before
// anything is written to it. A node with no record and no membership (its
// first join) may serve any root, also an empty one, which its first
// session claims; a node that joined serves only a root that exists, is
// a mount point if it was one, and has the identity it recorded. A node
// that joined before roots were recorded (member, no record) needs the
// root to belong to its cluster, and records it now.
func verifyRootAtStart(root, stateDir, member string) (startRoot, error) {
	rec, err := readRootRecord(stateDir)
	if err != nil {
		return startRoot{}, err
	}
	refuse := func(reason, what, fix string, cause error) (startRoot, error) {
		return startRoot{}, &RootError{Root: root, Reason: reason, What: what, Fix: fix, Cause: cause}
	}
	joined := rec != nil || member != ""
	recorded := "this node's record of it (" + rootRecordPath(stateDir) + ")"
	if rec == nil {
		recorded = "this node's journal (member of cluster " + member + ")"
	}
	replaced := "; if the cluster's root was deliberately replaced, remove " + rootRecordPath(stateDir) +
		" and the journal " + filepath.Join(stateDir, JournalFile) + " so that this node joins it anew"
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist) && joined:
		return refuse("missing", "does not exist, but "+recorded+" says this node joined it",
			"mount the shared storage at "+root+replaced, nil)
	case errors.Is(err, fs.ErrNotExist):
		return startRoot{}, nil // the first join: CheckRoot creates it
	case err != nil:
		return refuse("error", "cannot be read", "check that it is mounted and readable", err)
	case !fi.IsDir():
		return startRoot{}, nil // CheckRoot says what is wrong
	}
	mount, err := isMountPoint(root)
	if err != nil {
		return refuse("error", "cannot be checked for a mount", "check /proc/self/mountinfo and the root's path", err)
	}
	if rec != nil && rec.Mount && !mount {
		return refuse("not_mounted", "is not a mount point, but it was one when this node joined ("+recorded+")",
			"mount the shared storage at "+root+" (check the mount unit, fstab or the volume); if it is deliberately no longer a mount, remove "+
				rootRecordPath(stateDir)+" and the node records the root again", nil)
	}
	id, err := readRootIdentity(root)
	if err != nil {
		return refuse("identity", "has an unreadable cluster file", "restore "+clusterFilePath(root)+" from a backup", err)
	}
	switch {
	case !id.known() && joined:
		return refuse("no_identity", "has no "+MetaDir+"/cluster.json (empty, or not the shared storage), but "+recorded+" says this node joined it",
			"mount the shared storage at "+root+"; never let this node claim an empty directory"+replaced, nil)
	case rec != nil && !id.equal(rec.identity()):
		return refuse("identity", "is another root ("+id.String()+") than the one this node joined ("+rec.identity().String()+", "+recorded+")",
			"mount this cluster's shared storage at "+root+replaced, nil)
	case rec == nil && member != "" && id.ClusterID != member:
		return refuse("identity", "belongs to cluster "+id.ClusterID+", but "+recorded+" says this node joined cluster "+member,
			"mount cluster "+member+"'s shared storage at "+root+replaced, nil)
	}
	return startRoot{record: rec, expect: id, mount: mount || (rec != nil && rec.Mount)}, nil
}

// VerifyRoot runs the checks NewStore runs on root before it writes
// anything (docs/design.md §8.19, §6): a daemon runs it to refuse to start
// before it opens anything else. The error names the path and the fix.
func VerifyRoot(root, stateDir string) error {
	j, err := openJournal(stateDir, HostID())
	if err != nil {
		return err
	}
	member := j.memberOf()
	if err := j.close(); err != nil {
		return err
	}
	if _, err := verifyRootAtStart(root, stateDir, member); err != nil {
		return err
	}
	return CheckRoot(root)
}
