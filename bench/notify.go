package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/internal/testutil/renew"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

const (
	// pollInterval is the lock client's polling fallback (docs/design.md §4).
	pollInterval = 500 * time.Millisecond
	// backoffStart and backoffCap are containerd's content.OpenWriter
	// retry bounds in milliseconds (core/content/helpers.go, v2.2.9 and
	// v2.4.2 alike): sleep rand.Intn(retry) ms, then double retry while it
	// is below 2048.
	backoffStart = 16
	backoffCap   = 2048
)

// notifyResult is one method with n waiters per key.
type notifyResult struct {
	Method   string
	Waiters  int
	Samples  int // waiter latencies measured
	P50, P99 time.Duration
	// Unlock is the median duration of the holder's Unlock(success) call
	// (push only): a pull's success persists its reference first.
	Unlock time.Duration
}

// notifyServer is a coordinator on loopback whose handler also counts the
// waiters that listen, so the push measurement can start only once every
// waiter does: a request's own stream (/lock/subscribe) once registered,
// or a lock request answered queued from a node whose one event stream
// (/lock/events, docs/design.md §10.1) is open, as lockclient waits now.
type notifyServer struct {
	url      string
	srv      *httpserver.Server
	dir      string
	attached sync.Map // resource_id → *atomic.Int64: subscriptions
	streams  sync.Map // node_id → struct{}: node streams opened
}

func startNotifyServer() (*notifyServer, error) {
	dir, err := os.MkdirTemp("", "bench-notify-")
	if err != nil {
		return nil, err
	}
	srv, err := httpserver.Open(httpserver.Config{Config: lockserver.DefaultConfig(), DataDir: dir})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ns := &notifyServer{url: "http://" + ln.Addr().String(), srv: srv, dir: dir}
	hs := srv.Handler().HTTPServer()
	inner := hs.Handler
	hs.Handler = func(ctx *fasthttp.RequestCtx) {
		inner(ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			return
		}
		switch string(ctx.Path()) {
		case "/lock/subscribe":
			// The subscription is registered; its first event is
			// written as soon as the handler returns.
			v, _ := ns.attached.LoadOrStore(string(ctx.QueryArgs().Peek("resource_id")), new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		case "/lock/events":
			// The node's stream is registered: it carries every outcome
			// of the node's queued requests from now on.
			ns.streams.Store(string(ctx.QueryArgs().Peek("node_id")), struct{}{})
		}
	}
	go srv.Serve(ln)
	return ns, nil
}

// attachedTo counts the waiters on pull key resourceID that will read its
// outcome: those subscribed to it, and, once every one of the waiters'
// nodes has its node stream open, those in its queue (GET /lock/status).
func (ns *notifyServer) attachedTo(resourceID string, waiters []*lockclient.Client) (int64, error) {
	var n int64
	if v, ok := ns.attached.Load(resourceID); ok {
		n = v.(*atomic.Int64).Load()
	}
	resp, err := http.Get(ns.url + "/lock/status?" + url.Values{"type": {"pull"}, "resource_id": {resourceID}}.Encode())
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st api.StatusResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, fmt.Errorf("lock status of %s (%s): %w", resourceID, resp.Status, err)
	}
	for _, w := range waiters {
		if _, ok := ns.streams.Load(w.NodeID()); !ok {
			return n, nil
		}
	}
	return n + int64(st.QueueLength), nil
}

func (ns *notifyServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ns.srv.Shutdown(ctx)
	os.RemoveAll(ns.dir)
}

// notifyBench measures the three ways a waiter learns that the holder's
// download is done.
func notifyBench(counts []int, caseDur, download time.Duration, progress func(string)) ([]notifyResult, error) {
	ns, err := startNotifyServer()
	if err != nil {
		return nil, err
	}
	defer ns.stop()
	maxN := 0
	for _, n := range counts {
		maxN = max(maxN, n)
	}
	// One client per waiter, as on separate nodes, plus the holders'.
	waiters := make([]*lockclient.Client, maxN)
	for i := range waiters {
		if waiters[i], err = lockclient.New(ns.url, lockclient.WithNodeID(fmt.Sprintf("waiter-%d", i))); err != nil {
			return nil, err
		}
		defer waiters[i].Close()
	}
	holder, err := lockclient.New(ns.url, lockclient.WithNodeID("holder"))
	if err != nil {
		return nil, err
	}
	defer holder.Close()
	// The holder records its pulls, so it holds a live session
	// (docs/design.md §8.4), renewed before its locks as its daemon would
	// in the background, outside every measured interval.
	session := renew.New("holder", holder.Session)

	var out []notifyResult
	for _, n := range counts {
		progress(fmt.Sprintf("notify: push, %d waiters", n))
		r, err := notifyPush(ns, holder, session, waiters[:n], caseDur)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	for _, method := range []string{"poll 500ms", "containerd backoff"} {
		for _, n := range counts {
			progress(fmt.Sprintf("notify: %s, %d waiters", method, n))
			r, err := notifySimulated(method, holder, session, waiters, n, download)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

var notifySeq atomic.Int64

func notifyKey(tag string) string {
	return fmt.Sprintf("sha256:bench-notify-%s-%d-%d", tag, os.Getpid(), notifySeq.Add(1))
}

// notifyPush: the holder has the pull lock; n waiters are in its queue,
// each following its event stream (lockclient.Lock). The holder unlocks
// with success; every waiter's Lock returns Skipped. Repeated for caseDur.
func notifyPush(ns *notifyServer, holder *lockclient.Client, session *renew.Session, waiters []*lockclient.Client, caseDur time.Duration) (notifyResult, error) {
	ctx := context.Background()
	res := notifyResult{Method: "push (SSE)", Waiters: len(waiters)}
	var lat, unlocks []time.Duration
	end := time.Now().Add(caseDur)
	for reps := 0; reps < 5 || time.Now().Before(end); reps++ {
		key := notifyKey("push")
		req := api.LockRequest{Type: api.OperationPull, ResourceID: key}
		if err := session.Renew(ctx); err != nil {
			return res, err
		}
		hr, err := holder.Lock(ctx, req)
		if err != nil || !hr.Acquired {
			return res, fmt.Errorf("push holder: %+v %v", hr, err)
		}
		ends := make([]time.Time, len(waiters))
		errs := make([]error, len(waiters))
		var wg sync.WaitGroup
		for j, w := range waiters {
			wg.Go(func() {
				r, err := w.Lock(ctx, req)
				ends[j] = time.Now()
				if err == nil && !r.Skipped {
					err = fmt.Errorf("waiter %d not skipped: %+v", j, r)
				}
				errs[j] = err
			})
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := ns.attachedTo(key, waiters)
			if err != nil {
				return res, err
			}
			if n >= int64(len(waiters)) {
				break
			}
			if time.Now().After(deadline) {
				return res, fmt.Errorf("push: only %d of %d waiters attached", n, len(waiters))
			}
			time.Sleep(time.Millisecond)
		}
		t0 := time.Now()
		if err := holder.Unlock(ctx, hr.Lease, true, nil); err != nil {
			return res, err
		}
		unlocks = append(unlocks, time.Since(t0))
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return res, err
		}
		for _, e := range ends {
			lat = append(lat, e.Sub(t0))
		}
	}
	res.Samples = len(lat)
	res.P50, res.P99 = percentile(lat, 0.5), percentile(lat, 0.99)
	res.Unlock = percentile(unlocks, 0.5)
	return res, nil
}

// notifySimulated runs enough keys at once to collect about 200 waiter
// latencies (n waiters per key; the per-waiter delay of polling and backoff
// does not depend on how many others wait). On each key the holder
// "downloads" for `download`; its waiters arrive at uniformly random times
// during it and then
//   - "poll 500ms": GET /lock/status every 500 ms from their arrival (so a
//     random phase) until it shows the completion;
//   - "containerd backoff": content.OpenWriter's loop, with the attempt
//     being a TryLock of the pull key (what contentv2's Writer does in
//     containerd mode) until it is skipped: attempt, sleep
//     rand.Intn(retry) ms, retry doubles from 16 up to 2048.
//
// Latency is from the start of the holder's Unlock(success) to the
// waiter's attempt that sees it.
func notifySimulated(method string, holder *lockclient.Client, session *renew.Session, pool []*lockclient.Client, n int, download time.Duration) (notifyResult, error) {
	res := notifyResult{Method: method, Waiters: n}
	keys := max(1, (200+n-1)/n)
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), download+30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			// Stagger the keys so their holders do not all unlock at once.
			time.Sleep(rand.N(200 * time.Millisecond))
			key := notifyKey("sim")
			req := api.LockRequest{Type: api.OperationPull, ResourceID: key}
			if err := session.Renew(ctx); err != nil {
				fail(err)
				return
			}
			hr, err := holder.Lock(ctx, req)
			if err != nil || !hr.Acquired {
				fail(fmt.Errorf("%s holder: %+v %v", method, hr, err))
				return
			}
			start := time.Now()
			var t0 atomic.Int64 // unix nanos of the holder's unlock; 0 before
			var kw sync.WaitGroup
			for j := range n {
				w := pool[(k*n+j)%len(pool)]
				arrive := rand.N(download)
				kw.Go(func() {
					time.Sleep(time.Until(start.Add(arrive)))
					var seen time.Time
					var err error
					if method == "poll 500ms" {
						seen, err = pollUntilDone(ctx, w, key)
					} else {
						seen, err = backoffUntilDone(ctx, w, req)
					}
					if err != nil {
						fail(err)
						return
					}
					unlockAt := t0.Load()
					if unlockAt == 0 {
						fail(fmt.Errorf("%s: waiter proceeded before the holder unlocked", method))
						return
					}
					mu.Lock()
					lat = append(lat, seen.Sub(time.Unix(0, unlockAt)))
					mu.Unlock()
				})
			}
			time.Sleep(time.Until(start.Add(download)))
			t0.Store(time.Now().UnixNano())
			if err := holder.Unlock(ctx, hr.Lease, true, nil); err != nil {
				fail(err)
			}
			kw.Wait()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.Samples = len(lat)
	res.P50, res.P99 = percentile(lat, 0.5), percentile(lat, 0.99)
	return res, nil
}

// pollUntilDone polls the key's status every pollInterval, the first time
// at once, until it shows a completion.
func pollUntilDone(ctx context.Context, c *lockclient.Client, key string) (time.Time, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		st, err := c.Status(ctx, api.OperationPull, key)
		if err != nil {
			return time.Time{}, err
		}
		if st.Completed != nil {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-t.C:
		}
	}
}

// backoffUntilDone is containerd's content.OpenWriter retry loop around
// the attempt contentv2's Writer makes in containerd mode.
func backoffUntilDone(ctx context.Context, c *lockclient.Client, req api.LockRequest) (time.Time, error) {
	retry := backoffStart
	for {
		r, err := c.TryLock(ctx, req)
		switch {
		case err == nil && r.Skipped:
			return time.Now(), nil
		case err == nil:
			return time.Time{}, fmt.Errorf("backoff waiter acquired %s while it was held: %+v", req.ResourceID, r)
		case !errors.Is(err, api.ErrLocked):
			return time.Time{}, err
		}
		select {
		case <-time.After(time.Millisecond * time.Duration(rand.IntN(retry))):
			if retry < backoffCap {
				retry <<= 1
			}
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}
