package contentv2

import (
	"maps"
	"sync"

	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/opencontainers/go-digest"
)

// labelStore keeps blob labels in memory for one node. Behind containerd,
// labels live in the metadata store and the backend's are not consulted;
// they are kept so that direct (library) users get a complete content.Store.
type labelStore struct {
	mu     sync.Mutex
	labels map[digest.Digest]map[string]string // protected by mu
}

var _ local.LabelStore = (*labelStore)(nil)

func newLabelStore() *labelStore {
	return &labelStore{labels: map[digest.Digest]map[string]string{}}
}

func (ls *labelStore) Get(d digest.Digest) (map[string]string, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return maps.Clone(ls.labels[d]), nil
}

func (ls *labelStore) Set(d digest.Digest, labels map[string]string) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.labels[d] = maps.Clone(labels)
	return nil
}

func (ls *labelStore) Update(d digest.Digest, update map[string]string) (map[string]string, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	labels := ls.labels[d]
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range update {
		if v == "" {
			delete(labels, k)
		} else {
			labels[k] = v
		}
	}
	ls.labels[d] = labels
	return maps.Clone(labels), nil
}
