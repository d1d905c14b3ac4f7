package oldnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// New returns the contentv2.Coordinator of an older node reached
// through c (whose node ID is the node's; make it with
// lockclient.WithPerRequestStreams for the older node's waits). Closing c
// is the caller's.
func New(c *lockclient.Client) contentv2.Coordinator {
	return &coordinator{Coordinator: remote.New(c), c: c}
}

type coordinator struct {
	contentv2.Coordinator
	c *lockclient.Client
}

// Session sends the node's cluster ID only: what an older node sent.
func (o *coordinator) Session(ctx context.Context, req contentv2.SessionRequest) (contentv2.SessionInfo, error) {
	return o.Coordinator.Session(ctx, contentv2.SessionRequest{ClusterID: req.ClusterID})
}

// EndSession ends nothing: an older node let its session lapse.
func (o *coordinator) EndSession(context.Context, string) (bool, error) { return false, nil }

// SyncRefs sends the whole journal as an older node did: an empty chunk
// announces the sync before the snapshot, then the snapshot goes in
// chunks of api.MaxSyncChunk, the last one done.
func (o *coordinator) SyncRefs(ctx context.Context, req contentv2.SyncRequest) error {
	id := newSyncID()
	if _, err := o.c.SyncRefs(ctx, api.SyncRequest{SyncID: id, ResourceIDs: []string{}}); err != nil {
		return err
	}
	snap, err := req.Snapshot()
	if err != nil {
		return err
	}
	for {
		n := min(len(snap), api.MaxSyncChunk)
		chunk := make([]string, n)
		for i, d := range snap[:n] {
			chunk[i] = d.String()
		}
		snap = snap[n:]
		if _, err := o.c.SyncRefs(ctx, api.SyncRequest{SyncID: id, ResourceIDs: chunk, Done: len(snap) == 0}); err != nil {
			return err
		}
		if len(snap) == 0 {
			return nil
		}
	}
}

// newSyncID returns 128 random bits, hex-encoded.
func newSyncID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
