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
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, r, fmt.Errorf("streaming unsupported by this connection: %w", api.ErrUnavailable))
		return
	}
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
	if writeEvent(w, api.EventState, sub.First) != nil {
		return
	}
	flusher.Flush()

	heartbeat := time.NewTicker(sseHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				return
			}
			if writeEvent(w, ev.Name, ev) != nil {
				return
			}
			flusher.Flush()
			if ev.Lease != nil {
				sub.Claimed(ev.Lease.LeaseID)
			}
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-r.Context().Done():
			return
		case <-h.streamsDone:
			return
		}
	}
}

func writeEvent(w http.ResponseWriter, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	return err
}
