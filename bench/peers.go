package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// peerStartTimeout bounds how long a peer server may take to answer its
// first request.
const peerStartTimeout = 20 * time.Second

// peer is a server process the benchmark started on loopback, with its own
// temporary data directory.
type peer struct {
	name string
	addr string // host:port of its client API
	dir  string // data directory and log, removed by stop
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// freePort asks the kernel for an unused loopback port. Another process
// could take it before the peer binds; the readiness check would then fail
// loudly rather than measure the wrong server.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startProcess(name, dir string, bin string, args ...string) (*peer, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (make bench installs it: apt-get install -y %s)", bin, err, name)
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Its own process group, so a Ctrl-C of the benchmark reaches the
	// benchmark first and it stops the peer itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &peer{name: name, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// stop terminates the peer (SIGTERM, then SIGKILL after 5 s) and removes
// its data directory.
func (p *peer) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	os.RemoveAll(p.dir)
}

// failed returns the tail of the peer's log, for an error message.
func (p *peer) failed(err error) error {
	b, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return fmt.Errorf("%s did not become ready: %w\n%s", p.name, err, b)
}

// startEtcd runs a single-member etcd with default durability (fsync of
// its WAL per write) on two loopback ports.
func startEtcd(ctx context.Context) (*peer, *clientv3.Config, error) {
	dir, err := os.MkdirTemp("", "bench-etcd-")
	if err != nil {
		return nil, nil, err
	}
	cport, err1 := freePort()
	pport, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, err
	}
	curl := "http://127.0.0.1:" + strconv.Itoa(cport)
	purl := "http://127.0.0.1:" + strconv.Itoa(pport)
	p, err := startProcess("etcd-server", dir, "etcd",
		"--name", "bench",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "bench="+purl,
		"--logger", "zap", "--log-level", "warn")
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	p.addr = "127.0.0.1:" + strconv.Itoa(cport)
	cfg := &clientv3.Config{Endpoints: []string{p.addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	err = waitReady(ctx, p, func(ctx context.Context) error {
		c, err := clientv3.New(*cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Put(ctx, "/bench/ready", "1")
		return err
	})
	if err != nil {
		p.stop()
		return nil, nil, err
	}
	return p, cfg, nil
}

// startRedis runs redis-server without persistence (no RDB snapshots, no
// AOF), as a lock cache is usually run.
func startRedis(ctx context.Context) (*peer, error) {
	dir, err := os.MkdirTemp("", "bench-redis-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := startProcess("redis-server", dir, "redis-server",
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--maxclients", "1000", "--loglevel", "warning")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.addr = "127.0.0.1:" + strconv.Itoa(port)
	err = waitReady(ctx, p, func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: p.addr})
		defer c.Close()
		return c.Ping(ctx).Err()
	})
	if err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// waitReady calls probe until it succeeds, the process exits or
// peerStartTimeout passes.
func waitReady(ctx context.Context, p *peer, probe func(context.Context) error) error {
	deadline := time.Now().Add(peerStartTimeout)
	var err error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return p.failed(errors.New("process exited"))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err = probe(pctx)
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p.failed(err)
}
