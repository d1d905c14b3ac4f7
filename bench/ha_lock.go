package main

// Lock cycles on one hot key (docs/design.md §7): the coordinator's replicas on a
// real 3-member etcd, the leader serving, against etcd's own
// concurrency.Mutex on the same cluster, and the bbolt coordinator for
// reference, interleaved round by round (lockBench).

import (
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sharedcontent/sharedcontent/lockclient"
)

// replicaSystem: lock clients holding every replica's URL, as nodes
// configured with --coordinator a,b,c.
func replicaSystem(reps []*replica) *lockSystem {
	var urls []string
	for _, r := range reps {
		urls = append(urls, r.url)
	}
	return &lockSystem{
		name: "coordinator on etcd (3 replicas)",
		newClient: func(i int) (lockClient, error) {
			c, err := lockclient.New(strings.Join(urls, ","), lockclient.WithNodeID(fmt.Sprintf("bench-ha-%d", i)))
			if err != nil {
				return nil, err
			}
			return &oursClient{c: c}, nil
		},
		stop: func() {},
	}
}

// etcdMutexSystem: concurrency.NewMutex, one session (lease) per contender,
// on the cluster.
func etcdMutexSystem(cfg clientv3.Config) *lockSystem {
	return &lockSystem{
		name: "etcd concurrency.Mutex",
		newClient: func(int) (lockClient, error) {
			c, err := clientv3.New(cfg)
			if err != nil {
				return nil, err
			}
			s, err := concurrency.NewSession(c, concurrency.WithTTL(int(lockTTL.Seconds())))
			if err != nil {
				c.Close()
				return nil, err
			}
			return &etcdClient{c: c, s: s, mutexes: map[string]*concurrency.Mutex{}}, nil
		},
		stop: func() {},
	}
}
