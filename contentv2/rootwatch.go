package contentv2

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/containerd/log"
)

// Watching the shared root while running (docs/design.md §8.19). The
// store probes the root at every marker refresh (the session interval),
// and right before every delete and every reaper pass: it must still
// exist, be a mount point if it was one at start, carry the identity the
// node started on, and be writable. While a probe fails the root is
// unready: writes, deletes and reaper passes are refused with a
// *RootError (errdefs.ErrUnavailable: containerd retries), reads too
// unless the root is only read-only, and the marker is not refreshed. The
// next probe that passes makes it ready again. A probe is bounded in time:
// one that has not answered within the probe timeout makes the root
// unready (hung), and no second probe starts while it hangs.

// DefaultRootProbeTimeout bounds one probe of the shared root: a
// filesystem that answers a stat, a read of a small file and an access
// check more slowly than this is treated as hung.
const DefaultRootProbeTimeout = 5 * time.Second

// Reasons a root is unready (the label of
// sharedcontent_root_unready_total).
const (
	rootMissing     = "missing"
	rootNotMounted  = "not_mounted"
	rootNoIdentity  = "no_identity"
	rootIdentityBad = "identity"
	rootReadOnly    = "read_only"
	rootHung        = "hung"
	rootErrOther    = "error"
)

// rootReasons are every reason a root is unready.
var rootReasons = []string{rootMissing, rootNotMounted, rootNoIdentity, rootIdentityBad, rootReadOnly, rootHung, rootErrOther}

// rootWatch keeps whether the shared root is ready.
type rootWatch struct {
	root    string
	timeout time.Duration
	metrics *metrics

	mu sync.Mutex
	// expect is the root's identity from start or its claim (zero until
	// known: a new root before its first session). Protected by mu.
	expect rootIdentity
	mount  bool      // protected by mu; the root must be a mount point
	err    error     // protected by mu; why the root is unready, nil while ready
	probe  chan bool // protected by mu; closed when the probe in flight ends (nil: none)
	// refused is the coordinator's refusal of this root (refuseRoot):
	// it stands while the root's identity is refusedID (zero: while it
	// has no cluster file). Protected by mu.
	refused   *RootError
	refusedID rootIdentity
	// probeFn is probeRoot (tests replace it to hang a probe).
	probeFn func(root string, expect rootIdentity, mount bool) error
}

func newRootWatch(root string, timeout time.Duration, m *metrics, expect rootIdentity, mount bool) *rootWatch {
	m.rootReady.Set(1)
	return &rootWatch{root: root, timeout: timeout, metrics: m, expect: expect, mount: mount, probeFn: probeRoot}
}

// setExpect records the identity of the root the node claimed.
func (w *rootWatch) setExpect(id rootIdentity) {
	w.mu.Lock()
	w.expect = id
	if id.known() {
		w.refused = nil
	}
	w.mu.Unlock()
}

// refuseRoot turns the coordinator's refusal of this node's root
// (api.ErrRootClaimed: the cluster has another root) into the root's: the
// root is unready while it shows the refused identity (id; zero for a
// root with no cluster file, unclaimed): until the shared storage is
// mounted there.
func (w *rootWatch) refuseRoot(cause error, id rootIdentity) *RootError {
	unclaimed := !id.known()
	var re *RootError
	if unclaimed {
		re = w.unready(rootNoIdentity, "has no "+MetaDir+"/cluster.json, but the cluster already has a shared root: it is not the cluster's root",
			"is the shared filesystem mounted at "+w.root+"? mount the cluster's shared storage there (this node resumes by itself, or starts, once it is); "+
				"a node never claims an empty directory for a cluster that has a root", cause)
	} else {
		re = w.unready(rootIdentityBad, "is another root of the cluster than the one the coordinator recorded",
			"mount the cluster's shared storage at "+w.root+" (this node resumes by itself, or starts, once it is)", cause)
	}
	w.mu.Lock()
	w.refused, w.refusedID = re, id
	w.mu.Unlock()
	w.set(re)
	return re
}

func (w *rootWatch) expected() (rootIdentity, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.expect, w.mount
}

// ready returns why the root is unready, as last found; nil while ready.
func (w *rootWatch) ready() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// readable returns why blobs cannot be read from the root: a root that is
// only read-only still serves reads.
func (w *rootWatch) readable() error {
	err := w.ready()
	var re *RootError
	if errors.As(err, &re) && re.Reason == rootReadOnly {
		return nil
	}
	return err
}

// check probes the root now, within the probe timeout, and returns why
// it is unready (nil: ready). A probe already in flight is waited for
// instead of starting another.
func (w *rootWatch) check(ctx context.Context) error {
	w.mu.Lock()
	done := w.probe
	if done == nil {
		done = make(chan bool)
		w.probe = done
		expect, mount, probe, refused, refusedID := w.expect, w.mount, w.probeFn, w.refused, w.refusedID
		go func() {
			err := probe(w.root, expect, mount)
			if err == nil && refused != nil {
				if id, rerr := readRootIdentity(w.root); rerr != nil || id.equal(refusedID) {
					err = refused
				}
			}
			w.mu.Lock()
			w.probe = nil
			w.mu.Unlock()
			w.set(err)
			close(done)
		}()
	}
	w.mu.Unlock()
	t := time.NewTimer(w.timeout)
	defer t.Stop()
	select {
	case <-done:
		return w.ready()
	case <-t.C:
		err := w.unready(rootHung, fmt.Sprintf("not answering within %s (a probe: stat, read of %s, access check)", w.timeout, clusterFilePath(w.root)),
			"check the shared storage (its server, the network, the mount); this node resumes by itself once the root answers", nil)
		w.set(err)
		return err
	case <-ctx.Done():
		return fmt.Errorf("probing the shared root %s: %w", w.root, ctx.Err())
	}
}

// set records a probe's outcome; a change is logged once and counted.
func (w *rootWatch) set(err error) {
	w.mu.Lock()
	was := w.err
	w.err = err
	w.mu.Unlock()
	l := log.L.WithField("root", w.root)
	switch {
	case err == nil && was != nil:
		w.metrics.rootReady.Set(1)
		l.Warn("the shared root is back and verified: this node serves writes, deletes and its reaper again")
	case err != nil && (was == nil || reasonOf(was) != reasonOf(err)):
		w.metrics.rootReady.Set(0)
		w.metrics.rootUnready.WithLabelValues(reasonOf(err)).Inc()
		l.WithError(err).Error("THE SHARED ROOT IS NOT READY: this node refuses writes and deletes and pauses its reaper until it is back")
	}
}

func reasonOf(err error) string {
	var re *RootError
	if errors.As(err, &re) {
		return re.Reason
	}
	return rootErrOther
}

func (w *rootWatch) unready(reason, what, fix string, cause error) *RootError {
	return &RootError{Root: w.root, Reason: reason, What: what, Fix: fix, Cause: cause, running: true}
}

// probeRoot checks root against what the node started on; nil when it
// passes.
func probeRoot(root string, expect rootIdentity, mount bool) error {
	w := &rootWatch{root: root}
	back := "mount the shared storage at " + root + " again; this node resumes by itself once it is back"
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return w.unready(rootMissing, "has vanished", back, nil)
	case err != nil:
		return w.unready(rootErrOther, "cannot be read", back, err)
	case !fi.IsDir():
		return w.unready(rootErrOther, "is no longer a directory", back, nil)
	}
	if mount {
		ok, err := isMountPoint(root)
		if err != nil {
			return w.unready(rootErrOther, "cannot be checked for a mount", back, err)
		}
		if !ok {
			return w.unready(rootNotMounted, "is no longer a mount point (it was one when this node started)", back, nil)
		}
	}
	if expect.known() {
		id, err := readRootIdentity(root)
		switch {
		case err != nil:
			return w.unready(rootIdentityBad, "has an unreadable cluster file", back, err)
		case !id.known():
			return w.unready(rootNoIdentity, "no longer has "+MetaDir+"/cluster.json (unmounted, emptied or replaced)", back, nil)
		case !id.equal(expect):
			return w.unready(rootIdentityBad, "is now another root ("+id.String()+") than the one this node started on ("+expect.String()+")",
				"mount this cluster's shared storage at "+root+"; this node resumes by itself once it is back", nil)
		}
	}
	if err := writable(root); err != nil {
		return w.unready(rootReadOnly, "is not writable", "remount it read-write (and check its permissions); this node resumes by itself once it is", err)
	}
	return nil
}

// rootLoop probes the root every session interval (the marker refresh's)
// until the store closes; after each probe that passes it removes this
// node's half-made ingests (halfmade.go).
func (s *store) rootLoop() {
	defer s.wg.Done()
	for {
		t := time.NewTimer(s.sessionInterval())
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		if s.rootw.check(ctx) == nil {
			s.retryHalfMade(ctx)
		}
		cancel()
	}
}

// Ready returns why the store does not serve now, or nil: its shared root
// is not verified (docs/design.md §8.19), or a call on it is past its
// deadline (§8.20).
func (s *store) Ready() error { return errors.Join(s.rootw.ready(), s.guard.refuse("")) }
