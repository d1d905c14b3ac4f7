package etcdstore

import (
	"context"
	"fmt"
	"math/big"
	"strings"

	"github.com/containerd/errdefs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A range read with a limit costs etcd every key from its start to its
// range end, not only the limit's: the server counts them all for the
// response's Count. A walk of the reference keys that read from where it
// stood to the end of refs/ each time cost O(keys²/keys per read)
// (docs/design.md §7.2). So the walks read windows: each read's range
// ends where about one read's worth of keys should end, guessed from the
// keys seen so far, and the next window is narrowed or widened by what
// the last one held (its Count).
//
// A window's end is a resource ID position: the ID's first idWidth bytes
// as a number. Estimates are made between the resource IDs of keys, not
// their node parts, so that the keys of one large set, which differ only
// there, do not make the windows too narrow to cross the gaps between
// sets. Nothing is assumed of the IDs' alphabet: a bad guess costs reads,
// never keys.

// idWidth is how many bytes of a resource ID its position holds.
const idWidth = 256

// maxGrowth is the most a window widens after one that held too few keys:
// a window that then holds too many costs its Count.
const maxGrowth = 32

// windows chooses the range ends of one walk's reads of refs/.
type windows struct {
	dir    string   // the refs directory's prefix
	end    string   // the directory's range end
	target int      // keys one read asks for
	width  *big.Int // ID positions that hold about target keys; nil: not known yet
	// toTheEnd reads to the directory's end each time (Store.toTheEnd).
	toTheEnd bool
}

func newWindows(k keys, target int, width *big.Int) *windows {
	return &windows{dir: k.dir(refsDir), end: clientv3.GetPrefixRangeEnd(k.dir(refsDir)), target: target, width: width}
}

// position returns a resource ID's position.
func position(id string) *big.Int {
	b := make([]byte, idWidth)
	copy(b, id)
	return new(big.Int).SetBytes(b)
}

// keyID returns the resource ID of a reference key (or of a key between
// them): the part between the directory and the first NUL.
func (w *windows) keyID(key string) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(key, w.dir), sep)
	return id
}

// next returns the end of the window that starts at from: from's ID
// position plus the width, at least the end of from's set (so that a
// read moves on), at most the directory's end.
func (w *windows) next(from string) string {
	if w.width == nil || w.toTheEnd {
		return w.end
	}
	p := new(big.Int).Add(position(w.keyID(from)), w.width)
	if p.BitLen() > 8*idWidth {
		return w.end
	}
	hi := w.dir + string(p.FillBytes(make([]byte, idWidth)))
	if setEnd := w.dir + w.keyID(from) + "\x01"; hi <= from {
		hi = setEnd
	}
	return min(hi, w.end)
}

// learn adjusts the width by what the read of [from, hi) returned.
func (w *windows) learn(from, hi string, resp *clientv3.GetResponse) {
	n := len(resp.Kvs)
	if resp.More {
		if n < 2 {
			return
		}
		// n keys lay between the first key's ID and the last's (not
		// from's: the directory's start is far from the first ID): when
		// they are one set's, that tells nothing of the sets' spacing.
		first, last := position(w.keyID(string(resp.Kvs[0].Key))), position(w.keyID(string(resp.Kvs[n-1].Key)))
		if span := last.Sub(last, first); span.Sign() > 0 {
			w.width = span.Div(span.Mul(span, big.NewInt(int64(w.target))), big.NewInt(int64(n-1)))
		}
		return
	}
	if w.width == nil || hi == w.end || hi == w.dir+w.keyID(from)+"\x01" {
		return // not a window of the width's
	}
	// The whole window was read: Count keys filled it.
	grow := new(big.Int).Mul(w.width, big.NewInt(int64(w.target)))
	if c := resp.Count; c > 0 {
		grow.Div(grow, big.NewInt(c))
	}
	if most := new(big.Int).Mul(w.width, big.NewInt(maxGrowth)); grow.Cmp(most) > 0 {
		grow = most
	}
	if grow.Sign() <= 0 {
		grow.SetInt64(1)
	}
	w.width = grow
}

// scanRefs reads the reference keys from from (a key of refs/ or the
// directory itself) on, in order, in windows, at one revision: rev, or
// when 0 the first read's. It calls fn with each key's resource ID and
// node until fn returns false or the keys end, and returns the revision.
// A read of a compacted revision fails with rpctypes.ErrCompacted. Its
// errors are for the caller to wrap.
func scanRefs(ctx context.Context, kv clientv3.KV, w *windows, from string, rev int64, fn func(id, node string) bool) (int64, error) {
	for {
		hi := w.next(from)
		opts := []clientv3.OpOption{clientv3.WithRange(hi), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(w.target))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := kv.Get(ctx, from, opts...)
		if err != nil {
			return rev, err
		}
		rev = resp.Header.Revision
		w.learn(from, hi, resp)
		for _, kv := range resp.Kvs {
			id, node, ok := splitPair(strings.TrimPrefix(string(kv.Key), w.dir))
			if !ok {
				return rev, fmt.Errorf("malformed key %q: %w", kv.Key, errdefs.ErrDataLoss)
			}
			if !fn(id, node) {
				return rev, nil
			}
		}
		switch {
		case resp.More:
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		case hi == w.end:
			return rev, nil
		default:
			from = hi
		}
	}
}
