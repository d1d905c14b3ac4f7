package lockclient

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// refsListClient is the short-request client of a Client under test: as
// an older coordinator (old), it takes the form parameter off GET
// /refs/list, which such a coordinator ignores; it records the media
// types of the answers.
type refsListClient struct {
	base ShortClient
	old  bool

	mu    sync.Mutex
	types map[string]int // protected by mu
}

func (c *refsListClient) DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	if string(req.URI().Path()) == "/refs/list" && c.old {
		req.URI().QueryArgs().Del(api.RefsListFormParam)
	}
	err := c.base.DoDeadline(req, resp, deadline)
	if string(req.URI().Path()) == "/refs/list" && err == nil {
		mt, _, _ := mime.ParseMediaType(string(resp.Header.ContentType()))
		c.mu.Lock()
		c.types[mt]++
		c.mu.Unlock()
	}
	return err
}

// TestWalkRefs (docs/design.md §10.3): WalkRefs gives every reference set
// once, in resource ID order, with its nodes, across pages; it reads the
// lines form from this coordinator and JSON from an older one (which
// ignores the form parameter), with the same result; the embedded
// coordinator gives the same.
func TestWalkRefs(t *testing.T) {
	defer func(p int) { walkPage = p }(walkPage)
	walkPage = 3
	ts := lockservertest.Start(t)
	ctx := context.Background()
	members.Open(t, ts.Core(), "node-a", "node-b")
	var want []api.RefsEntry
	for i := range 10 {
		e := api.RefsEntry{ResourceID: fmt.Sprintf("sha256:%064d", i), Nodes: []string{"node-a", "node-b"}[i%2:]}
		for _, n := range e.Nodes {
			_, err := ts.Core().AddRef(ctx, e.ResourceID, n)
			require.NoError(t, err)
		}
		want = append(want, e)
	}
	walk := func(c *Client) []api.RefsEntry {
		var got []api.RefsEntry
		require.NoError(t, c.WalkRefs(ctx, func(e api.RefsEntry) error {
			got = append(got, e)
			return nil
		}))
		return got
	}
	u, err := url.Parse(ts.URL())
	require.NoError(t, err)
	for _, old := range []bool{false, true} {
		hc := newHostClient(u, nil)
		t.Cleanup(hc.CloseIdleConnections)
		rc := &refsListClient{base: hc, old: old, types: map[string]int{}}
		c := newHTTPClient(t, ts.URL(), "ctl", WithShortClient(rc))
		require.Equal(t, want, walk(c), "old coordinator: %v", old)
		wantType := "text/vnd.sharedcontent.refs-lines"
		if old {
			wantType = "application/json"
		}
		require.Equal(t, map[string]int{wantType: 4}, rc.types, "old coordinator: %v: 10 sets in pages of 3", old)

		page, err := c.RefsList(ctx, want[1].ResourceID, 2)
		require.NoError(t, err)
		require.Equal(t, api.RefsListResponse{Entries: want[2:4], Next: want[3].ResourceID}, page, "one page, old coordinator: %v", old)
	}

	embedded, err := NewEmbedded(ts.Core(), testOptions("ctl")...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, embedded.Close()) })
	require.Equal(t, want, walk(embedded))
}

// TestWalkRefsStops: an error of fn ends the walk, with the page read
// ahead given up, and is returned as it is; a coordinator that refuses
// ends it with the refusal.
func TestWalkRefsStops(t *testing.T) {
	defer func(p int) { walkPage = p }(walkPage)
	walkPage = 2
	ts := lockservertest.Start(t)
	ctx := context.Background()
	members.Open(t, ts.Core(), "node-a")
	for i := range 7 {
		_, err := ts.Core().AddRef(ctx, fmt.Sprintf("sha256:%064d", i), "node-a")
		require.NoError(t, err)
	}
	c := newHTTPClient(t, ts.URL(), "ctl")
	stop := errors.New("enough")
	seen := 0
	err := c.WalkRefs(ctx, func(api.RefsEntry) error {
		seen++
		if seen == 3 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 3, seen, "fn is not called after its error")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err = c.WalkRefs(cancelled, func(api.RefsEntry) error { return nil })
	require.ErrorIs(t, err, context.Canceled)
}
