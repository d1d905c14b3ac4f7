package contentv2

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The shared root records the cluster it belongs to, and its members, next
// to the blobs (docs/design.md §8): they share the blobs' fate, not the
// coordinator's.
const (
	// MetaDir is the shared root's directory of sharedcontent's own files.
	MetaDir = ".sharedcontent"
	// TrashDir holds blobs being deleted (renamed there, then unlinked).
	TrashDir = ".trash"
)

// ClusterFile is the JSON content of <root>/.sharedcontent/cluster.json.
type ClusterFile struct {
	ClusterID string    `json:"cluster_id"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
}

// NodeMarker is the JSON content of <root>/.sharedcontent/nodes/<id>.
type NodeMarker struct {
	NodeID    string    `json:"node_id"`
	StartedAt time.Time `json:"started_at"`
	// Seq and WrittenAt change at every refresh (every session interval,
	// marker.go): a marker that stops changing is evidence that its node
	// is gone.
	Seq       uint64    `json:"seq,omitempty"`
	WrittenAt time.Time `json:"written_at,omitzero"`
}

func clusterFilePath(root string) string { return filepath.Join(root, MetaDir, "cluster.json") }
func nodesDir(root string) string        { return filepath.Join(root, MetaDir, "nodes") }

// ReadClusterID returns the cluster the shared root belongs to, or "" when
// no node has recorded one yet.
func ReadClusterID(root string) (string, error) {
	b, err := os.ReadFile(clusterFilePath(root))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the root's cluster: %w", err)
	}
	var cf ClusterFile
	if err := json.Unmarshal(b, &cf); err != nil || cf.ClusterID == "" {
		return "", fmt.Errorf("%s is not a cluster file (%v); restore it, or remove it only if no coordinator serves this root", clusterFilePath(root), err)
	}
	return cf.ClusterID, nil
}

// claimRoot records id as the root's cluster unless one is recorded
// already, and returns the root's identity, and whether this call created
// it. The file appears atomically (written aside, then hard-linked), so
// two first nodes on one root cannot both win.
func claimRoot(root, id, nodeID string) (rootIdentity, bool, error) {
	if err := os.MkdirAll(filepath.Join(root, MetaDir), 0o755); err != nil {
		return rootIdentity{}, false, err
	}
	b, err := json.MarshalIndent(ClusterFile{ClusterID: id, CreatedAt: time.Now().UTC(), CreatedBy: nodeID}, "", "  ")
	if err != nil {
		return rootIdentity{}, false, err
	}
	tmp := clusterFilePath(root) + "." + nodeID + ".tmp"
	if err := writeFileSync(tmp, append(b, '\n')); err != nil {
		return rootIdentity{}, false, err
	}
	defer os.Remove(tmp)
	created := true
	if err := os.Link(tmp, clusterFilePath(root)); errors.Is(err, fs.ErrExist) {
		created = false
	} else if err != nil {
		return rootIdentity{}, false, fmt.Errorf("recording the root's cluster: %w", err)
	}
	got, err := readRootIdentity(root)
	return got, created, err
}

// unclaimRoot removes the cluster file claimRoot created, if it is still
// the one with identity id, and the directory it made, if empty: the
// coordinator refused the claim (another root of the cluster was named
// first, docs/design.md §8.19), and a stray root must not look claimed.
func unclaimRoot(root string, id rootIdentity) error {
	cur, err := readRootIdentity(root)
	if err != nil || !cur.equal(id) {
		return err
	}
	if err := os.Remove(clusterFilePath(root)); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(root, MetaDir)); err != nil && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		return err
	}
	return nil
}

// WriteNodeMarker records nodeID as a member in the shared root.
func WriteNodeMarker(root, nodeID string) error {
	now := time.Now().UTC()
	return writeMarker(root, NodeMarker{NodeID: nodeID, StartedAt: now, WrittenAt: now}, true)
}

// NodeMarkers returns the IDs of the nodes recorded in the shared root.
func NodeMarkers(root string) ([]string, error) {
	ents, err := os.ReadDir(nodesDir(root))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && filepath.Ext(e.Name()) != ".tmp" {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WrongClusterError is NewStore's refusal to serve a root that belongs to
// another cluster than its coordinator's.
type WrongClusterError struct {
	Root, RootCluster string
	// CoordinatorCluster is the coordinator's cluster when known; else
	// Cause is the coordinator's refusal, which names it.
	CoordinatorCluster string
	Cause              error
}

func (e *WrongClusterError) Error() string {
	coord := "cluster " + e.CoordinatorCluster
	if e.CoordinatorCluster == "" {
		coord = fmt.Sprintf("of another cluster (%v)", e.Cause)
	}
	return fmt.Sprintf("shared root %s belongs to cluster %s, but the coordinator is %s. "+
		"If another node serves this root's coordinator, point this node at it (--coordinator). "+
		"If this coordinator lost its database, adopt the root: sharedcontentctl --coordinator URL cluster adopt --root %s "+
		"(an embedded coordinator: start once with --adopt). Never delete %s while another coordinator serves the root",
		e.Root, e.RootCluster, coord, e.Root, clusterFilePath(e.Root))
}

func (e *WrongClusterError) Is(target error) bool { return target == api.ErrWrongCluster }

// newID returns 128 random bits, hex-encoded: a store's instance ID, a
// journal's generation, a trashed blob's unique suffix.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
