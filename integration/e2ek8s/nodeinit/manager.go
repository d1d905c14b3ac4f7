package main

import (
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// manager runs the units of one node. Jobs (start, stop, restart) run one
// at a time, as they come from systemctl, the boot and the supervisors.
type manager struct {
	unitDir string // /etc/systemd/system
	logDir  string // each unit's output: <logDir>/<unit>.log
	runDir  string // notify sockets

	job sync.Mutex // serialises jobs

	mu    sync.Mutex
	defs  map[string]*unit // protected by mu; loaded definitions (daemon-reload clears)
	svcs  map[string]*svc  // protected by mu; every unit started once
	order []string         // protected by mu; start order, for shutdown

	reap  sync.Mutex // held while a process is started and registered, and while reaping
	procs map[int]chan syscall.WaitStatus
}

// svc is the state of one unit.
type svc struct {
	u        *unit
	state    string // inactive, activating, active, deactivating, failed
	pid      int
	exited   chan struct{} // closed when the main process has exited
	stopping bool          // stop requested: do not restart
}

func newManager(unitDir, logDir, runDir string) *manager {
	m := &manager{unitDir: unitDir, logDir: logDir, runDir: runDir,
		defs: map[string]*unit{}, svcs: map[string]*svc{}, procs: map[int]chan syscall.WaitStatus{}}
	go m.reaper()
	return m
}

// reaper reaps every child (nodeinit is PID 1: orphans are its children
// too) and hands the status to whoever started it.
func (m *manager) reaper() {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, syscall.SIGCHLD)
	for range ch {
		m.reap.Lock()
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			if c, ok := m.procs[pid]; ok {
				delete(m.procs, pid)
				c <- ws
			}
		}
		m.reap.Unlock()
	}
}

// spawn starts argv in a process group of its own, output appended to
// the unit's log; the channel receives its exit status.
func (m *manager) spawn(name string, argv, env []string) (int, chan syscall.WaitStatus, error) {
	f, err := os.OpenFile(filepath.Join(m.logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s nodeinit: start %s\n", time.Now().Format("15:04:05.000"), strings.Join(argv, " "))
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, nil, err
	}
	defer devnull.Close()
	path := argv[0]
	if !strings.Contains(path, "/") {
		return 0, nil, fmt.Errorf("%s: command %q is not an absolute path", name, path)
	}
	m.reap.Lock()
	defer m.reap.Unlock()
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Dir: "/", Env: env, Files: []*os.File{devnull, f, f},
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", name, err)
	}
	c := make(chan syscall.WaitStatus, 1)
	m.procs[p.Pid] = c
	return p.Pid, c, nil
}

// def returns the unit's definition, loading it on first use.
func (m *manager) def(name string) (*unit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.defs[name]; ok {
		return u, nil
	}
	u, err := loadUnit(m.unitDir, name)
	if err != nil {
		return nil, err
	}
	if len(u.ignored) > 0 {
		log.Printf("%s: ignoring %s", name, strings.Join(u.ignored, ", "))
	}
	m.defs[name] = u
	return u, nil
}

// reload forgets every definition (daemon-reload).
func (m *manager) reload() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.defs)
}

// state returns the unit's state, "inactive" if it never ran.
func (m *manager) state(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.svcs[name]; ok {
		return s.state
	}
	return "inactive"
}

// boot starts every enabled unit: those multi-user.target wants, what
// they want or require, in Before=/After= order.
func (m *manager) boot() error {
	set := map[string]bool{}
	var add func(name string)
	add = func(name string) {
		if set[name] || !strings.HasSuffix(name, ".service") {
			return
		}
		u, err := m.def(name)
		if err != nil {
			log.Printf("boot: %v", err)
			return
		}
		set[name] = true
		for _, d := range append(append(append([]string(nil), u.wants...), u.requires...), m.wantsDir(name)...) {
			add(d)
		}
	}
	for _, n := range m.wantsDir("multi-user.target") {
		add(n)
	}
	names, err := m.ordered(set)
	if err != nil {
		return err
	}
	log.Printf("boot: starting %s", strings.Join(names, ", "))
	var errs []error
	for _, n := range names {
		if err := m.start(n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// wantsDir lists the units linked in <unitDir>/<name>.wants and .requires.
func (m *manager) wantsDir(name string) []string {
	var out []string
	for _, suffix := range []string{".wants", ".requires"} {
		ents, _ := os.ReadDir(filepath.Join(m.unitDir, name+suffix))
		for _, e := range ents {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// ordered sorts set so that every unit comes after the units it is
// ordered After= and before those it is ordered Before=.
func (m *manager) ordered(set map[string]bool) ([]string, error) {
	after := map[string]map[string]bool{} // unit → units that must start first
	for n := range set {
		after[n] = map[string]bool{}
	}
	for n := range set {
		u, err := m.def(n)
		if err != nil {
			continue // reported when it is started
		}
		for _, a := range u.after {
			if set[a] {
				after[n][a] = true
			}
		}
		for _, b := range u.before {
			if set[b] {
				after[b][n] = true
			}
		}
	}
	var out []string
	for len(after) > 0 {
		var ready []string
		for n, deps := range after {
			if len(deps) == 0 {
				ready = append(ready, n)
			}
		}
		if len(ready) == 0 {
			return nil, fmt.Errorf("ordering cycle among %v", after)
		}
		sort.Strings(ready)
		for _, n := range ready {
			delete(after, n)
			for _, deps := range after {
				delete(deps, n)
			}
		}
		out = append(out, ready...)
	}
	return out, nil
}

// start starts name and what it wants or requires, unless active.
func (m *manager) start(name string) error {
	m.job.Lock()
	defer m.job.Unlock()
	return m.startLocked(name, map[string]bool{})
}

func (m *manager) startLocked(name string, seen map[string]bool) error {
	if seen[name] {
		return nil
	}
	seen[name] = true
	if st := m.state(name); st == "active" || st == "activating" {
		return nil
	}
	u, err := m.def(name)
	if err != nil {
		return err
	}
	for _, d := range u.requires {
		if err := m.startLocked(d, seen); err != nil {
			return fmt.Errorf("%s requires %s: %w", name, d, err)
		}
	}
	// Wants= and the unit's .wants directory (an enabled unit's
	// WantedBy=), in Before=/After= order among themselves.
	wanted := map[string]bool{}
	for _, d := range append(append([]string(nil), u.wants...), m.wantsDir(name)...) {
		if strings.HasSuffix(d, ".service") && d != name {
			wanted[d] = true
		}
	}
	names, err := m.ordered(wanted)
	if err != nil {
		return err
	}
	for _, d := range names {
		if err := m.startLocked(d, seen); err != nil {
			log.Printf("%s wants %s: %v", name, d, err)
		}
	}
	return m.run(u)
}

// run starts one unit and waits until it is active: at once (simple,
// exec), at READY=1 (notify), or when it exited 0 (oneshot).
func (m *manager) run(u *unit) error {
	s := &svc{u: u, state: "activating", exited: make(chan struct{})}
	m.mu.Lock()
	if _, ok := m.svcs[u.name]; !ok {
		m.order = append(m.order, u.name)
	}
	m.svcs[u.name] = s
	m.mu.Unlock()
	fail := func(err error) error {
		m.setState(s, "failed")
		log.Printf("%s: failed: %v", u.name, err)
		return fmt.Errorf("%s: %w", u.name, err)
	}
	env, err := u.env(baseEnv())
	if err != nil {
		return fail(err)
	}
	for _, pre := range u.execStartPre {
		ignore := strings.HasPrefix(pre[0], "-")
		argv := expand(append([]string{strings.TrimPrefix(pre[0], "-")}, pre[1:]...), env)
		_, c, err := m.spawn(u.name, argv, env)
		if err == nil {
			if ws := <-c; ws.ExitStatus() != 0 {
				err = fmt.Errorf("ExecStartPre %s: %v", argv[0], describe(ws))
			}
		}
		if err != nil && !ignore {
			return fail(err)
		}
	}
	var ready chan struct{}
	if u.typ == "notify" {
		sock := filepath.Join(m.runDir, "notify-"+u.name)
		_ = os.Remove(sock)
		conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
		if err != nil {
			return fail(err)
		}
		ready = make(chan struct{})
		go readNotify(conn, ready, s.exited)
		env = append(env, "NOTIFY_SOCKET="+sock)
	}
	argv := expand(u.execStart, env)
	argv[0] = strings.TrimLeft(argv[0], "-@+!")
	pid, c, err := m.spawn(u.name, argv, env)
	if err != nil {
		return fail(err)
	}
	m.mu.Lock()
	s.pid = pid
	m.mu.Unlock()
	status := make(chan syscall.WaitStatus, 1)
	go func() {
		ws := <-c
		status <- ws
		close(s.exited)
		m.supervise(s, ws)
	}()
	switch u.typ {
	case "notify":
		select {
		case <-ready:
		case <-s.exited:
			return fail(errors.New("exited before READY=1"))
		case <-time.After(u.timeoutStartSec):
			m.signal(s, syscall.SIGKILL)
			return fail(fmt.Errorf("not ready within %v (TimeoutStartSec)", u.timeoutStartSec))
		}
	case "oneshot":
		<-s.exited
		ws := <-status
		if ws.ExitStatus() != 0 {
			return fmt.Errorf("%s: %v", u.name, describe(ws))
		}
		m.setState(s, "inactive")
		return nil
	}
	m.setState(s, "active")
	log.Printf("%s: active (pid %d)", u.name, pid)
	return nil
}

// supervise handles the exit of a unit's main process: restart it when
// its Restart= says so and no stop was asked for.
func (m *manager) supervise(s *svc, ws syscall.WaitStatus) {
	m.mu.Lock()
	stopping := s.stopping
	current := m.svcs[s.u.name] == s
	m.mu.Unlock()
	log.Printf("%s: main process %d %v", s.u.name, s.pid, describe(ws))
	if stopping || !current || s.u.typ == "oneshot" {
		return
	}
	failed := ws.ExitStatus() != 0 || ws.Signaled()
	m.setState(s, map[bool]string{true: "failed", false: "inactive"}[failed])
	if s.u.restart == "always" || (s.u.restart == "on-failure" && failed) {
		time.Sleep(s.u.restartSec)
		m.job.Lock()
		defer m.job.Unlock()
		m.mu.Lock()
		again := m.svcs[s.u.name] == s && !s.stopping
		m.mu.Unlock()
		if again {
			log.Printf("%s: restarting (Restart=%s)", s.u.name, s.u.restart)
			if err := m.run(s.u); err != nil {
				log.Printf("%s: restart: %v", s.u.name, err)
			}
		}
	}
}

func (m *manager) setState(s *svc, st string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s.state = st
}

// signal signals the unit's processes as its KillMode says.
func (m *manager) signal(s *svc, sig syscall.Signal) {
	if s.pid <= 0 {
		return
	}
	if s.u.killMode == "process" {
		_ = syscall.Kill(s.pid, sig)
		return
	}
	_ = syscall.Kill(-s.pid, sig)
}

// stop stops the unit: KillSignal, then SIGKILL after TimeoutStopSec.
func (m *manager) stop(name string) error {
	m.job.Lock()
	defer m.job.Unlock()
	return m.stopLocked(name)
}

func (m *manager) stopLocked(name string) error {
	m.mu.Lock()
	s, ok := m.svcs[name]
	if ok {
		s.stopping = true
	}
	m.mu.Unlock()
	if !ok || s.pid == 0 {
		return nil
	}
	select {
	case <-s.exited:
	default:
		m.setState(s, "deactivating")
		m.signal(s, s.u.killSignal)
		select {
		case <-s.exited:
		case <-time.After(s.u.timeoutStopSec):
			log.Printf("%s: not stopped within %v: SIGKILL", name, s.u.timeoutStopSec)
			m.signal(s, syscall.SIGKILL)
			<-s.exited
		}
	}
	m.setState(s, "inactive")
	log.Printf("%s: stopped", name)
	return nil
}

// restart stops then starts the unit, with its current definition.
func (m *manager) restart(name string) error {
	m.job.Lock()
	defer m.job.Unlock()
	if err := m.stopLocked(name); err != nil {
		return err
	}
	return m.startLocked(name, map[string]bool{})
}

// shutdown stops every unit, last started first.
func (m *manager) shutdown() {
	m.mu.Lock()
	order := append([]string(nil), m.order...)
	m.mu.Unlock()
	for i := len(order) - 1; i >= 0; i-- {
		_ = m.stop(order[i])
	}
}

// enable links the unit into the .wants (.requires) directory of each
// unit its [Install] section names.
func (m *manager) enable(name string) error {
	u, err := loadUnit(m.unitDir, name)
	if err != nil {
		return err
	}
	link := func(target, suffix string) error {
		dir := filepath.Join(m.unitDir, target+suffix)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		l := filepath.Join(dir, name)
		_ = os.Remove(l)
		return os.Symlink(filepath.Join(m.unitDir, name), l)
	}
	if len(u.wantedBy)+len(u.requiredBy) == 0 {
		return fmt.Errorf("%s has no [Install] section", name)
	}
	for _, t := range u.wantedBy {
		if err := link(t, ".wants"); err != nil {
			return err
		}
	}
	for _, t := range u.requiredBy {
		if err := link(t, ".requires"); err != nil {
			return err
		}
	}
	return nil
}

// disable removes every link to the unit from .wants and .requires
// directories.
func (m *manager) disable(name string) error {
	dirs, err := filepath.Glob(filepath.Join(m.unitDir, "*.wants"))
	if err != nil {
		return err
	}
	req, _ := filepath.Glob(filepath.Join(m.unitDir, "*.requires"))
	for _, d := range append(dirs, req...) {
		if err := os.Remove(filepath.Join(d, name)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// readNotify closes ready at the first READY=1 on conn; conn is closed
// when the process exits.
func readNotify(conn *net.UnixConn, ready chan struct{}, exited chan struct{}) {
	go func() { <-exited; conn.Close() }()
	buf := make([]byte, 4096)
	once := false
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return
		}
		for _, l := range strings.Split(string(buf[:n]), "\n") {
			if l == "READY=1" && !once {
				once = true
				close(ready)
			}
		}
	}
}

func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("exited with status %d", ws.ExitStatus())
}

// baseEnv is what every unit starts with, as systemd gives services.
func baseEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
}
