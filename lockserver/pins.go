package lockserver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Pins (docs/design.md §8.21) are the references part's: a pin is a
// durable, operator-named holder of references. Its references are
// ordinary ones, held in the reference sets by its holder ID
// (api.PinHolder, "pin/<name>"), so every rule that reads the sets obeys
// them with no rule of its own: the delete rule refuses a node's delete of
// a pinned blob (409 in_use naming the pin), the reaper's plan sees the
// blob referenced and a reap delete of it is refused by the count, GET
// /refs and /refs/list show the pin. What the sets do not say is kept by
// the pin's record (refcount.PinRecord): the image named, who made it,
// when it expires. The record and the references change in one batch,
// the record last (on etcd, a batch may be committed as several
// transactions: an interrupted put leaves extra references, an
// interrupted delete a record with fewer; the same command completes
// either).
//
// A pin is no node: no node's sync replaces its references (a sync
// replaces the node's own), no member expiry or forget drops them (no
// node ID may start with api.PinHolderPrefix, validateID), and the
// members' half of the delete rule does not wait for it. It goes with
// DELETE /pins/{name}, or with the pin sweep once its Expires has passed.
//
// A pin's new references are decided like a node's reference add
// (refs.go addRef): each blob is held still (its shard mutex) while the
// coordinator checks that no delete of it is in flight or retained
// (the blob may be gone: 409 deleting, nothing pinned), and counts as
// being written (refStripe.adding) until the batch is durable, so a delete
// that decides meanwhile sees it. Pin writes are serialised by the pins'
// mutex, held through the write; no other part takes it (lock order: pins,
// then a resource's shard, then a reference stripe).

// pinSet is the pins as the references part keeps them.
type pinSet struct {
	mu     sync.Mutex
	byName map[string]api.Pin
	// pins and blobs are the metrics sharedcontent_pins and
	// sharedcontent_pinned_blobs.
	pins, blobs prometheus.Gauge
}

// newPinSet returns the empty pin set, its metrics registered with reg
// (nil: nowhere).
func newPinSet(reg prometheus.Registerer) (*pinSet, error) {
	ps := &pinSet{byName: map[string]api.Pin{},
		pins: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_pins",
			Help: "Pins the coordinator holds (docs/design.md §8.21).",
		}),
		blobs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_pinned_blobs",
			Help: "Distinct blobs that at least one pin holds.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{ps.pins, ps.blobs} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return ps, nil
}

// counted sets the metrics from byName. Callers hold mu.
func (ps *pinSet) counted() {
	blobs := map[string]struct{}{}
	for _, p := range ps.byName {
		for _, id := range p.ResourceIDs {
			blobs[id] = struct{}{}
		}
	}
	ps.pins.Set(float64(len(ps.byName)))
	ps.blobs.Set(float64(len(blobs)))
}

// loadPins reads the stored pins (a restart, a new leader).
func (rs *references) loadPins(ctx context.Context) error {
	recs, err := rs.store.state.Pins(ctx)
	if err != nil {
		return fmt.Errorf("lockserver: loading the pins: %w", err)
	}
	ps := rs.pins
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, r := range recs {
		ps.byName[r.Name] = pinOf(r)
	}
	ps.counted()
	if len(recs) > 0 {
		log.G(ctx).WithField("pins", len(recs)).Info("loaded the pins")
	}
	return nil
}

// pinOf is the pin of its stored record.
func pinOf(r refcount.PinRecord) api.Pin {
	return api.Pin{Name: r.Name, Image: r.Image, ResourceIDs: r.ResourceIDs, Created: r.Created, Expires: r.Expires, By: r.By}
}

// recordOf is the stored record of p.
func recordOf(p api.Pin) refcount.PinRecord {
	return refcount.PinRecord{Name: p.Name, Image: p.Image, ResourceIDs: p.ResourceIDs, Created: p.Created, Expires: p.Expires, By: p.By}
}

// maxPinImageLen bounds api.Pin.Image.
const maxPinImageLen = 1024

// checkPin validates p, the body of PUT /pins/{name}, and returns it as it
// is recorded: named name, its resource IDs sorted without duplicates,
// created now by by. Every refusal matches api.ErrInvalidArgument and
// names what is wrong.
func checkPin(name string, p api.Pin, by string, now time.Time) (api.Pin, error) {
	if err := api.CheckPinName(name); err != nil {
		return api.Pin{}, err
	}
	if p.Name != "" && p.Name != name {
		return api.Pin{}, fmt.Errorf("pin %s: the body names pin %q: %w", name, p.Name, api.ErrInvalidArgument)
	}
	if p.Image != "" {
		if err := validateString("image", p.Image, maxPinImageLen); err != nil {
			return api.Pin{}, fmt.Errorf("pin %s: %w", name, err)
		}
	}
	if n := len(p.ResourceIDs); n == 0 || n > api.MaxPinBlobs {
		return api.Pin{}, fmt.Errorf("pin %s: %d resource IDs, must be 1 to %d: %w", name, n, api.MaxPinBlobs, api.ErrInvalidArgument)
	}
	for _, id := range p.ResourceIDs {
		if _, err := digest.Parse(id); err != nil {
			return api.Pin{}, fmt.Errorf("pin %s: resource ID %q is not a blob digest: %v: %w", name, id, err, api.ErrInvalidArgument)
		}
	}
	if p.Expires != nil && !p.Expires.After(now) {
		return api.Pin{}, fmt.Errorf("pin %s: expires %s, which has passed: %w", name, p.Expires.UTC().Format(time.RFC3339), api.ErrInvalidArgument)
	}
	ids := slices.Clone(p.ResourceIDs)
	slices.Sort(ids)
	out := api.Pin{Name: name, Image: p.Image, ResourceIDs: slices.Compact(ids), Created: now.UTC(), By: by}
	if p.Expires != nil {
		e := p.Expires.UTC()
		out.Expires = &e
	}
	return out, nil
}

// putPin handles PUT /pins/{name}: it records p, replacing the pin of
// that name, with its references, in one batch. A blob with a delete in
// flight or retained refuses the whole pin (409 deleting, nothing
// changed): it may be gone.
func (rs *references) putPin(ctx context.Context, name string, p api.Pin, by string) (api.Pin, error) {
	p, err := checkPin(name, p, by, rs.now())
	if err != nil {
		return api.Pin{}, err
	}
	ps := rs.pins
	ps.mu.Lock()
	defer ps.mu.Unlock()
	old := ps.byName[name]
	holder := api.PinHolder(name)
	added, removed := diffIDs(old.ResourceIDs, p.ResourceIDs)
	var pending []string
	defer func() {
		for _, id := range pending {
			rs.stripe(id).donePending(id, holder)
		}
	}()
	for _, id := range added {
		if err := rs.admitPinRef(id, name, holder); err != nil {
			return api.Pin{}, err
		}
		pending = append(pending, id)
	}
	// The references first, the record last, in groups etcd can hold.
	b := new(refcount.Batch)
	for _, id := range added {
		b.AddRef(id, holder).Break()
	}
	for _, id := range removed {
		b.RemoveRef(id, holder).Break()
	}
	b.PutPin(recordOf(p))
	rs.noteDropping(removed)
	if err := rs.store.commit(ctx, b); err != nil {
		return api.Pin{}, fmt.Errorf("pin %s: nothing pinned (run the same command again): %w", name, err)
	}
	ps.byName[name] = p
	ps.counted()
	log.G(ctx).WithField("pin", name).WithField("blobs", len(p.ResourceIDs)).WithField("by", by).Info("pin recorded")
	return p, nil
}

// admitPinRef decides the reference of pin name (holder) to id, with id
// held still: refused while a delete of id is in flight or retained;
// admitted, it counts as being written until donePending. Callers hold
// the pins' mutex.
func (rs *references) admitPinRef(id, name, holder string) error {
	h := rs.locks.hold(id)
	defer h.release()
	if node, ok := h.deleting(); ok {
		return fmt.Errorf("pin %s: blob %s: a delete by node %s is in flight, the blob may be gone; nothing pinned (pull the image again, then pin it): %w",
			name, id, node, api.ErrDeleting)
	}
	if c := h.deleted(); c != nil && rs.now().Sub(c.at) < rs.cfg.CompletedTTL {
		return fmt.Errorf("pin %s: blob %s was deleted by node %s %s ago and not pulled since; nothing pinned (pull the image again, then pin it): %w",
			name, id, c.nodeID, rs.now().Sub(c.at).Round(time.Millisecond), api.ErrDeleting)
	}
	rs.stripe(id).addPending(id, holder)
	return nil
}

// noteDropping records, before a pin's references to ids are dropped, a
// reference change of each (reap.go): the reaper waits its grace before it
// reclaims them. Each is noted with its resource held, so a reap check
// (which reads the activity, then the references, under the shard) sees
// either the activity or the pin's reference.
func (rs *references) noteDropping(ids []string) {
	now := rs.now()
	for _, id := range ids {
		h := rs.locks.hold(id)
		rs.noteActivity(id, now)
		h.release()
	}
}

// diffIDs returns the IDs of want not in had, and of had not in want.
func diffIDs(had, want []string) (added, removed []string) {
	h := map[string]bool{}
	for _, id := range had {
		h[id] = true
	}
	w := map[string]bool{}
	for _, id := range want {
		w[id] = true
		if !h[id] {
			added = append(added, id)
		}
	}
	for _, id := range had {
		if !w[id] {
			removed = append(removed, id)
		}
	}
	return added, removed
}

// deletePin handles DELETE /pins/{name}: the pin's references and its
// record go, in one batch (the record last).
func (rs *references) deletePin(ctx context.Context, name, why string) error {
	if err := api.CheckPinName(name); err != nil {
		return err
	}
	ps := rs.pins
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return rs.dropPinLocked(ctx, name, why)
}

// dropPinLocked drops the pin name. Callers hold the pins' mutex.
func (rs *references) dropPinLocked(ctx context.Context, name, why string) error {
	ps := rs.pins
	p, ok := ps.byName[name]
	if !ok {
		return fmt.Errorf("pin %s: no such pin: %w", name, api.ErrNotFound)
	}
	holder := api.PinHolder(name)
	b := new(refcount.Batch)
	for _, id := range p.ResourceIDs {
		b.RemoveRef(id, holder).Break()
	}
	rs.noteDropping(p.ResourceIDs)
	if err := rs.store.commit(ctx, b.DropPin(name)); err != nil {
		return fmt.Errorf("pin %s: the pin is kept (part of its references may have been dropped); run the same command again: %w", name, err)
	}
	delete(ps.byName, name)
	ps.counted()
	log.G(ctx).WithField("pin", name).WithField("blobs", len(p.ResourceIDs)).WithField("reason", why).Info("pin dropped")
	return nil
}

// listPins handles GET /pins: every pin, in name order.
func (rs *references) listPins() []api.Pin {
	ps := rs.pins
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]api.Pin, 0, len(ps.byName))
	for _, name := range slices.Sorted(maps.Keys(ps.byName)) {
		out = append(out, ps.byName[name])
	}
	return out
}

// getPin handles GET /pins/{name}.
func (rs *references) getPin(name string) (api.Pin, error) {
	if err := api.CheckPinName(name); err != nil {
		return api.Pin{}, err
	}
	ps := rs.pins
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.byName[name]
	if !ok {
		return api.Pin{}, fmt.Errorf("pin %s: no such pin: %w", name, api.ErrNotFound)
	}
	return p, nil
}

// expirePins drops every pin whose Expires has passed at now. A drop that
// fails is logged and tried again at the next sweep.
func (rs *references) expirePins(ctx context.Context, now time.Time) {
	ps := rs.pins
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(ps.byName)) {
		p := ps.byName[name]
		if p.Expires == nil || now.Before(*p.Expires) {
			continue
		}
		if err := rs.dropPinLocked(ctx, name, "expired"); err != nil {
			log.G(ctx).WithError(err).WithField("pin", name).Warn("dropping an expired pin; the next sweep tries again")
		}
	}
}

// pinSweepLoop drops the expired pins every sweep interval until the
// Coordinator closes.
func (c *Coordinator) pinSweepLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.sweepInterval())
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.references.expirePins(context.Background(), c.now())
		}
	}
}

// PutPin handles PUT /pins/{name} (admin): it records p as the pin name,
// replacing the pin of that name, and returns it as recorded (by is the
// admin identity that asked).
func (c *Coordinator) PutPin(ctx context.Context, name string, p api.Pin, by string) (api.Pin, error) {
	return c.references.putPin(ctx, name, p, by)
}

// Pins handles GET /pins (admin): every pin, in name order.
func (c *Coordinator) Pins(context.Context) (api.PinsResponse, error) {
	return api.PinsResponse{Pins: c.references.listPins()}, nil
}

// Pin handles GET /pins/{name} (admin).
func (c *Coordinator) Pin(_ context.Context, name string) (api.Pin, error) {
	return c.references.getPin(name)
}

// DeletePin handles DELETE /pins/{name} (admin): the pin's references go
// with it.
func (c *Coordinator) DeletePin(ctx context.Context, name string) error {
	return c.references.deletePin(ctx, name, "deleted by an operator")
}
