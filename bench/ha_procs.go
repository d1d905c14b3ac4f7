package main

// The processes of the HA section (docs/design.md §7): a real 3-member etcd
// cluster from the project's etcd binary (`make etcd`), and real
// sharedcontent-lockserver replicas campaigning on it. The bench module is
// no test, so it cannot use internal/testutil/etcdtest (which takes a
// testing.TB); these helpers are the benchmark's small equivalent.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdCluster is a 3-member etcd cluster on loopback.
type etcdCluster struct {
	members   []*peer
	endpoints []string
}

// startEtcdCluster starts n members of bin with default durability and
// waits until a write commits.
func startEtcdCluster(ctx context.Context, bin string, n int) (*etcdCluster, error) {
	type ports struct{ client, peer string }
	ps := make([]ports, n)
	var initial []string
	for i := range ps {
		cp, err1 := freePort()
		pp, err2 := freePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		ps[i] = ports{"http://127.0.0.1:" + strconv.Itoa(cp), "http://127.0.0.1:" + strconv.Itoa(pp)}
		initial = append(initial, fmt.Sprintf("m%d=%s", i, ps[i].peer))
	}
	c := &etcdCluster{}
	for i, p := range ps {
		dir, err := os.MkdirTemp("", "bench-ha-etcd-")
		if err != nil {
			c.stop()
			return nil, err
		}
		m, err := startProcess("etcd", dir, bin,
			"--name", fmt.Sprintf("m%d", i),
			"--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", p.client, "--advertise-client-urls", p.client,
			"--listen-peer-urls", p.peer, "--initial-advertise-peer-urls", p.peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--logger", "zap", "--log-level", "warn")
		if err != nil {
			os.RemoveAll(dir)
			c.stop()
			return nil, err
		}
		m.addr = strings.TrimPrefix(p.client, "http://")
		c.members = append(c.members, m)
		c.endpoints = append(c.endpoints, p.client)
	}
	cli, err := clientv3.New(c.config())
	if err != nil {
		c.stop()
		return nil, err
	}
	defer cli.Close()
	deadline := time.Now().Add(peerStartTimeout)
	for {
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = cli.Put(tctx, "/bench-ha/ready", "1")
		cancel()
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			err = c.members[0].failed(err)
			c.stop()
			return nil, err
		}
		time.Sleep(50 * time.Millisecond) // a poll's pace
	}
}

// config is a client configuration naming every member.
func (c *etcdCluster) config() clientv3.Config {
	return clientv3.Config{Endpoints: c.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
}

// pids lists the members' processes, whose CPU counts with the clients'.
func (c *etcdCluster) pids() []int {
	var out []int
	for _, m := range c.members {
		out = append(out, m.cmd.Process.Pid)
	}
	return out
}

func (c *etcdCluster) stop() {
	for _, m := range c.members {
		m.stop()
	}
}

// replica is one sharedcontent-lockserver replica process; restart
// starts it again on the same address.
type replica struct {
	bin, url, addr string
	args           []string
	p              *peer
}

// startReplica starts a replica of bin on a free loopback port against
// endpoints, under prefix, with session TTL ttl.
func startReplica(bin string, endpoints []string, prefix string, ttl time.Duration) (*replica, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &replica{bin: bin, addr: "127.0.0.1:" + strconv.Itoa(port)}
	r.url = "http://" + r.addr
	r.args = []string{"--listen", r.addr, "--log-level", "error",
		"--etcd-endpoints", strings.Join(endpoints, ","), "--advertise-url", r.url,
		"--etcd-session-ttl", ttl.String(), "--etcd-prefix", prefix}
	return r, r.start()
}

func (r *replica) start() error {
	dir, err := os.MkdirTemp("", "bench-ha-replica-")
	if err != nil {
		return err
	}
	p, err := startProcess("sharedcontent-lockserver", dir, r.bin, append(r.args, "--data-dir", filepath.Join(dir, "unused"))...)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	r.p = p
	deadline := time.Now().Add(peerStartTimeout)
	for probeStatus(r.url+"/healthz") != http.StatusOK {
		select {
		case <-p.done:
			err := p.failed(errors.New("exited"))
			os.RemoveAll(dir)
			return err
		default:
		}
		if time.Now().After(deadline) {
			err := p.failed(errors.New("/healthz did not answer"))
			p.stop()
			return err
		}
		time.Sleep(10 * time.Millisecond) // a poll's pace
	}
	return nil
}

// signal sends sig and waits until the process has exited.
func (r *replica) signal(sig syscall.Signal) {
	_ = r.p.cmd.Process.Signal(sig)
	<-r.p.done
	os.RemoveAll(r.p.dir)
}

func (r *replica) stop() {
	if r != nil && r.p != nil {
		r.p.stop()
	}
}

// alive: the process has not exited.
func (r *replica) alive() bool {
	select {
	case <-r.p.done:
		return false
	default:
		return true
	}
}

var probeClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// probeStatus is the status of a GET of url; 0 when it failed.
func probeStatus(url string) int {
	resp, err := probeClient.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitLeader polls every live replica until exactly one answers /readyz
// 200, and returns it and when it first did.
func waitLeader(ctx context.Context, reps []*replica, timeout time.Duration) (*replica, time.Time, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var ready []*replica
		for _, r := range reps {
			if r.alive() && probeStatus(r.url+"/readyz") == http.StatusOK {
				ready = append(ready, r)
			}
		}
		if len(ready) > 1 {
			return nil, time.Time{}, fmt.Errorf("two replicas ready at once: %s, %s", ready[0].url, ready[1].url)
		}
		if len(ready) == 1 {
			return ready[0], time.Now(), nil
		}
		time.Sleep(10 * time.Millisecond) // a poll's pace
	}
	return nil, time.Time{}, fmt.Errorf("no replica became the leader in %s", timeout)
}
