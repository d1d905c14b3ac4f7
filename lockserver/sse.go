package lockserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// sseHeartbeat is how often an idle stream gets a comment line, so that
// proxies and load balancers do not close it.
const sseHeartbeat = 15 * time.Second

// subscribe serves GET /lock/subscribe as Server-Sent Events: first the
// current state ("state"), then the events of the key or request. A waiter
// whose stream closes leaves its queue.
func (h *Handler) subscribe(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	flusher := http.NewResponseController(w)
	sub, err := h.locker.Subscribe(api.OperationType(q.Get("type")), q.Get("resource_id"), q.Get("request_id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer sub.Close()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if writeEvent(w, api.EventState, sub.First) != nil || !writePending(w, flusher, sub) {
		return
	}

	heartbeat := time.NewTicker(sseHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok || writeSubEvent(w, flusher, sub, ev) != nil || !writePending(w, flusher, sub) {
				return
			}
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			if flusher.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-h.streamsDone:
			return
		}
	}
}

// writePending writes the events already waiting on sub, then flushes. It
// returns false when the stream is over: the client is gone, or the
// subscription ended (a waiter's outcome), in which case the last events
// are left unflushed so that the server sends them and the stream's end in
// one write.
func writePending(w http.ResponseWriter, f *http.ResponseController, sub *Subscription) bool {
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok || writeSubEvent(w, f, sub, ev) != nil {
				return false
			}
		default:
			return f.Flush() == nil
		}
	}
}

// writeSubEvent writes one event of sub. A grant is flushed at once and
// claimed once it has left for its holder.
func writeSubEvent(w http.ResponseWriter, f *http.ResponseController, sub *Subscription, ev api.Event) error {
	if err := writeEvent(w, ev.Name, ev); err != nil {
		return err
	}
	if ev.Lease != nil {
		if err := f.Flush(); err != nil {
			return err
		}
		sub.Claimed(ev.Lease.LeaseID)
	}
	return nil
}

func writeEvent(w http.ResponseWriter, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	return err
}
