package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a daemon the harness started, in its own process group, with its
// output appended to a log file.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has been reaped
	err     error         // Wait's result; read only after done is closed
}

// startProc starts argv in a new process group. The child is killed if the
// test binary dies (Pdeathsig), so a crashed run leaves no daemons behind.
func startProc(name, logPath string, env []string, argv ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child holds its own descriptor
	fmt.Fprintf(f, "=== %s start: %s\n", time.Now().Format("15:04:05.000"), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(hermeticEnv(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0); err == nil {
			fmt.Fprintf(f, "=== %s exit: %v\n", time.Now().Format("15:04:05.000"), p.err)
			f.Close()
		}
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal signals the whole process group while the leader is alive (after
// it is reaped the group id could be reused).
func (p *proc) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// kill sends SIGKILL to the process group and waits for the leader.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM, waits up to grace, then kills. It reports whether the
// process had to be killed.
func (p *proc) stop(grace time.Duration) (killed bool) {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return false
	case <-time.After(grace):
		p.kill()
		return true
	}
}

// clockTicks is Linux's USER_HZ, the unit of /proc/PID/stat's times.
const clockTicks = 100

// cpu is the CPU time (user and system) the process and its reaped
// children have used so far, from /proc/PID/stat; zero once it has exited.
func (p *proc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The command (field 2) may hold spaces: the fields after it follow
	// its closing parenthesis. f[0] is field 3; utime, stime, cutime and
	// cstime are fields 14 to 17.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, s := range f[11:15] {
		n, _ := strconv.ParseInt(s, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// exitErr describes how the process ended, for messages.
func (p *proc) exitErr() error {
	if !p.exited() {
		return nil
	}
	if p.err == nil {
		return errors.New("exited with status 0")
	}
	return p.err
}

// hermeticEnv is the test's environment without the variables that would
// configure our daemons or ctr behind the harness's back (SHAREDCONTENT_*,
// CONTAINERD_*).
func hermeticEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SHAREDCONTENT_") || strings.HasPrefix(kv, "CONTAINERD_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
