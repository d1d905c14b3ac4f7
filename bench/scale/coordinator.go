package scale

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// coordinator is the sharedcontent-lockserver process under test, on a
// fixed loopback address and data directory, so that a restart comes back
// where the nodes look for it with the same database.
type coordinator struct {
	bin     string
	addr    string // host:port
	dataDir string
	// etcd, if set, are the endpoints the coordinator runs on as a
	// replica, under prefix; it serves once its /readyz answers 200.
	etcd   []string
	prefix string
	cmd    *exec.Cmd
	exited chan error
	// mem samples the process's RssAnon and RssFile from its start.
	mem *rssParts

	// peakFiles is the most descriptors seen open, sampled by watch.
	mu        sync.Mutex
	peakFiles int
	stopWatch chan struct{}
	watchDone chan struct{}
}

// startTimeout bounds a start until /healthz answers (a restart opens a
// database of millions of references).
const startTimeout = 5 * time.Minute

// newCoordinator picks a free loopback port and a data directory under dir.
func newCoordinator(bin, dir string, etcd []string) (*coordinator, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	c := &coordinator{bin: bin, addr: addr, dataDir: filepath.Join(dir, "db"), etcd: etcd}
	if len(etcd) > 0 {
		c.prefix = "/bench-scale-" + randomHex(8) + "/"
	}
	return c, nil
}

func (c *coordinator) url() string { return "http://" + c.addr }

func (c *coordinator) pid() int { return c.cmd.Process.Pid }

// start runs the binary and returns once /healthz answers (on etcd: once
// /readyz does, the replica leads).
func (c *coordinator) start() error {
	args := []string{"--listen", c.addr, "--data-dir", c.dataDir, "--log-level", "error"}
	probe := "/healthz"
	if len(c.etcd) > 0 {
		args = append(args, "--etcd-endpoints", strings.Join(c.etcd, ","), "--advertise-url", c.url(), "--etcd-prefix", c.prefix)
		probe = "/readyz"
	}
	c.cmd = exec.Command(c.bin, args...)
	c.cmd.Stderr = os.Stderr
	// A process group of its own (a terminal's Ctrl-C reaches the
	// benchmark, not the coordinator in mid-scenario), and SIGTERM when
	// the benchmark ends, however it ends (bench/signals.go).
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := c.cmd.Start(); err != nil {
		return err
	}
	c.exited = make(chan error, 1)
	c.mem = sampleRSS(c.cmd.Process.Pid)
	go func(cmd *exec.Cmd, exited chan error, mem *rssParts) {
		err := cmd.Wait()
		mem.end()
		exited <- err
	}(c.cmd, c.exited, c.mem)
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for deadline := time.Now().Add(startTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-c.exited:
			return fmt.Errorf("the coordinator exited at start: %v", err)
		default:
		}
		if resp, err := hc.Get(c.url() + probe); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.watch()
				return nil
			}
		}
	}
	c.kill()
	return fmt.Errorf("the coordinator did not answer %s in time", probe)
}

// kill ends the process with SIGKILL (a crash) and waits for it.
func (c *coordinator) kill() {
	c.unwatch()
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// stop ends the process with SIGTERM; an error if it had exited already.
func (c *coordinator) stop() error {
	c.unwatch()
	select {
	case err := <-c.exited:
		return fmt.Errorf("the coordinator had exited: %v", err)
	default:
	}
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	return nil
}

// watch samples the open descriptors every 200 ms until unwatch.
func (c *coordinator) watch() {
	c.mu.Lock()
	c.peakFiles = 0
	c.mu.Unlock()
	c.stopWatch, c.watchDone = make(chan struct{}), make(chan struct{})
	go func(pid int, stop, done chan struct{}) {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			n := openFiles(pid)
			c.mu.Lock()
			c.peakFiles = max(c.peakFiles, n)
			c.mu.Unlock()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}(c.pid(), c.stopWatch, c.watchDone)
}

func (c *coordinator) unwatch() {
	if c.stopWatch != nil {
		close(c.stopWatch)
		<-c.watchDone
		c.stopWatch = nil
	}
}

// resetPeakFiles starts a new peak from now.
func (c *coordinator) resetPeakFiles() {
	c.mu.Lock()
	c.peakFiles = 0
	c.mu.Unlock()
}

func (c *coordinator) peakOpenFiles() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peakFiles
}
