package e2ek8s

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// daemon is a process the test started, its output appended to a log.
type daemon struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed once reaped
	err  error         // Wait's result, after done
}

// startDaemon starts argv with its output appended to logPath. attr, if
// not nil, replaces the process attributes (namespaces); Pdeathsig is
// always set, so a killed test run leaves nothing behind.
func startDaemon(name, logPath string, stdin io.Reader, attr *syscall.SysProcAttr, env []string, argv ...string) (*daemon, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s start: %s\n", time.Now().Format("15:04:05.000"), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = f, f, stdin
	cmd.Env = append(os.Environ(), env...)
	if attr == nil {
		attr = &syscall.SysProcAttr{Setpgid: true}
	}
	attr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		if f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0); err == nil {
			fmt.Fprintf(f, "=== %s exit: %v\n", time.Now().Format("15:04:05.000"), d.err)
			f.Close()
		}
		close(d.done)
	}()
	return d, nil
}

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after grace, and waits.
func (d *daemon) stop(grace time.Duration) {
	if d.exited() {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
		d.kill()
	}
}

// kill sends SIGKILL and waits.
func (d *daemon) kill() {
	if !d.exited() {
		_ = d.cmd.Process.Kill()
	}
	<-d.done
}
