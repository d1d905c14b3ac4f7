package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// controlSocket is where systemctl finds the init, inside the node.
const controlSocket = "/run/nodeinit/control.sock"

// config is the node's description, written by the test.
type config struct {
	Hostname string `json:"hostname"`
	// Binds are mounted in order: Source (a host directory of the node)
	// over Target (the host path it stands for).
	Binds []struct{ Source, Target string } `json:"binds"`
	// Tmpfs are mounted empty at each boot, after the binds.
	Tmpfs []string `json:"tmpfs"`
	// LogDir receives nodeinit.log's units' logs (<unit>.log).
	LogDir string `json:"logDir"`
}

func main() {
	if filepath.Base(os.Args[0]) == "systemctl" {
		os.Exit(systemctl(os.Args[1:]))
	}
	cfgPath := flag.String("config", "", "the node's JSON config")
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("nodeinit: ")
	if os.Getpid() != 1 {
		log.Fatalf("must run as PID 1 of a new PID namespace (pid %d)", os.Getpid())
	}
	b, err := os.ReadFile(*cfgPath)
	if err != nil {
		log.Fatal(err)
	}
	var cfg config
	if err := json.Unmarshal(b, &cfg); err != nil {
		log.Fatalf("%s: %v", *cfgPath, err)
	}
	if err := setupMounts(cfg); err != nil {
		log.Fatal(err)
	}
	if err := syscall.Sethostname([]byte(cfg.Hostname)); err != nil {
		log.Fatal(err)
	}
	// The test sets up the node's network, then writes a line.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		log.Fatalf("waiting for the go-ahead on stdin: %v", err)
	}
	m := newManager("/etc/systemd/system", cfg.LogDir, filepath.Dir(controlSocket))
	ln, err := net.Listen("unix", controlSocket)
	if err != nil {
		log.Fatal(err)
	}
	go serve(ln, m)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	log.Printf("node %s up", cfg.Hostname)
	if err := m.boot(); err != nil {
		log.Printf("boot: %v", err)
	}
	log.Printf("boot done")
	<-term
	log.Printf("shutting down")
	m.shutdown()
}

// setupMounts gives the node a mount tree of its own: rprivate (nothing
// leaks back to the host), then rshared (mount propagation for kubelet's
// volumes), a /proc of its PID namespace, the binds and the tmpfs.
func setupMounts(cfg config) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / rprivate: %w", err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make / rshared: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, b := range cfg.Binds {
		if err := syscall.Mount(b.Source, b.Target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s over %s: %w", b.Source, b.Target, err)
		}
	}
	for _, t := range append(cfg.Tmpfs, filepath.Dir(controlSocket)) {
		if err := os.MkdirAll(t, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount("tmpfs", t, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755"); err != nil {
			return fmt.Errorf("tmpfs on %s: %w", t, err)
		}
	}
	return nil
}

type request struct {
	Args []string `json:"args"`
}

type reply struct {
	Out  string `json:"out"`
	Code int    `json:"code"`
}

// serve answers systemctl, one request per connection.
func serve(ln net.Listener, m *manager) {
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Printf("control socket: %v", err)
			return
		}
		go func() {
			defer c.Close()
			var req request
			if err := json.NewDecoder(c).Decode(&req); err != nil {
				return
			}
			rep := handle(m, req.Args)
			log.Printf("systemctl %s: code %d %s", strings.Join(req.Args, " "), rep.Code, strings.TrimSpace(rep.Out))
			_ = json.NewEncoder(c).Encode(rep)
		}()
	}
}

// handle runs one systemctl command line.
func handle(m *manager, args []string) reply {
	var verb string
	var units []string
	now := false
	for _, a := range args {
		switch {
		case a == "--now":
			now = true
		case strings.HasPrefix(a, "-"):
			// --quiet, --no-pager, ...: nothing to do
		case verb == "":
			verb = a
		default:
			if !strings.Contains(a, ".") {
				a += ".service"
			}
			units = append(units, a)
		}
	}
	errReply := func(err error) reply { return reply{Out: err.Error() + "\n", Code: 1} }
	switch verb {
	case "daemon-reload":
		m.reload()
		return reply{}
	case "is-active":
		var out strings.Builder
		code := 0
		for _, u := range units {
			st := m.state(u)
			fmt.Fprintln(&out, st)
			if st != "active" {
				code = 3
			}
		}
		return reply{Out: out.String(), Code: code}
	}
	if len(units) == 0 {
		return reply{Out: fmt.Sprintf("systemctl %s: no unit named\n", verb), Code: 1}
	}
	for _, u := range units {
		var err error
		switch verb {
		case "start":
			err = m.start(u)
		case "stop":
			err = m.stop(u)
		case "restart":
			err = m.restart(u)
		case "enable":
			if err = m.enable(u); err == nil && now {
				err = m.start(u)
			}
		case "disable":
			if err = m.disable(u); err == nil && now {
				err = m.stop(u)
			}
		default:
			return reply{Out: fmt.Sprintf("systemctl: verb %q not supported by nodeinit (daemon-reload, enable, disable, start, stop, restart, is-active)\n", verb), Code: 1}
		}
		if err != nil {
			return errReply(err)
		}
	}
	return reply{}
}

// systemctl is the client: it sends its arguments to the node's init and
// prints the answer.
func systemctl(args []string) int {
	c, err := net.Dial("unix", controlSocket)
	if err != nil {
		fmt.Fprintf(os.Stderr, "systemctl: nodeinit not reachable: %v\n", err)
		return 1
	}
	defer c.Close()
	if err := json.NewEncoder(c).Encode(request{Args: args}); err != nil {
		fmt.Fprintf(os.Stderr, "systemctl: %v\n", err)
		return 1
	}
	var rep reply
	if err := json.NewDecoder(c).Decode(&rep); err != nil {
		fmt.Fprintf(os.Stderr, "systemctl: %v\n", err)
		return 1
	}
	quiet := false
	for _, a := range args {
		quiet = quiet || a == "-q" || a == "--quiet"
	}
	if !quiet {
		if rep.Code != 0 && rep.Code != 3 {
			fmt.Fprint(os.Stderr, rep.Out)
		} else {
			fmt.Print(rep.Out)
		}
	}
	return rep.Code
}
