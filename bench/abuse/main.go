// Command abuse floods a real sharedcontent-lockserver the way an attacker
// would (docs/design.md §10.3), and prints what it took: idle connections under a low descriptor
// limit (how many are held, answered 503, or closed; whether the server
// lives; how soon it serves again), and 100k waiters on one key (enqueue
// rate, and the size and time of a status answer).
//
//	go run ./abuse -server ../bin/sharedcontent-lockserver
//
// `make bench-abuse` builds the server and runs it. Figures depend on the
// machine; the comparison that matters is against an older server binary
// run the same way (-server).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

func main() {
	server := flag.String("server", "bin/sharedcontent-lockserver", "the coordinator binary")
	nofile := flag.Int("nofile", 256, "descriptor limit of the server in the flood")
	conns := flag.Int("conns", 300, "idle connections of the flood")
	waiters := flag.Int("waiters", 100000, "waiters on one key")
	flag.Parse()
	if err := flood(*server, *nofile, *conns); err != nil {
		fmt.Fprintln(os.Stderr, "abuse:", err)
		os.Exit(1)
	}
	if err := queue(*server, *waiters); err != nil {
		fmt.Fprintln(os.Stderr, "abuse:", err)
		os.Exit(1)
	}
}

// start runs the server on a free port with a temp data dir, under
// ulimit -n nofile when nofile > 0, and waits until it answers.
func start(server string, nofile int, args ...string) (addr string, stop func() error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = ln.Addr().String()
	ln.Close()
	dir, err := os.MkdirTemp("", "abuse-")
	if err != nil {
		return "", nil, err
	}
	cmdline := fmt.Sprintf("exec %q --listen %s --data-dir %s/db --log-level error %s", server, addr, dir, strings.Join(args, " "))
	if nofile > 0 {
		cmdline = fmt.Sprintf("ulimit -n %d && %s", nofile, cmdline)
	}
	cmd := exec.Command("sh", "-c", cmdline)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() error {
		defer os.RemoveAll(dir)
		select {
		case err := <-exited:
			return fmt.Errorf("the server had exited: %v", err)
		default:
		}
		_ = cmd.Process.Signal(os.Interrupt)
		<-exited
		return nil
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			return addr, stop, nil
		}
	}
	_ = stop()
	return "", nil, errors.New("the server did not start")
}

func flood(server string, nofile, n int) error {
	addr, stop, err := start(server, nofile)
	if err != nil {
		return err
	}
	var conns []net.Conn
	dialErrs := 0
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			dialErrs++
			continue
		}
		conns = append(conns, c)
	}
	during := get(addr)
	deadline := time.Now().Add(2 * time.Second)
	results := make(chan string, len(conns))
	for _, c := range conns {
		go func(c net.Conn) {
			_ = c.SetReadDeadline(deadline)
			b := make([]byte, 64)
			k, err := c.Read(b)
			var ne net.Error
			switch {
			case k > 0 && strings.Contains(string(b[:k]), " 503 "):
				results <- "answered 503"
			case errors.As(err, &ne) && ne.Timeout():
				results <- "held"
			default:
				results <- "closed without an answer"
			}
		}(c)
	}
	counts := map[string]int{}
	for range conns {
		counts[<-results]++
	}
	fmt.Printf("flood: ulimit -n %d, %d idle connections: %d held, %d answered 503, %d closed without an answer, %d dial errors\n",
		nofile, n, counts["held"], counts["answered 503"], counts["closed without an answer"], dialErrs)
	fmt.Printf("flood: a new GET /healthz during the flood: %s\n", during)
	start := time.Now()
	for _, c := range conns {
		c.Close()
	}
	recovered := false
	for time.Since(start) < 20*time.Second {
		if get(addr) == "200 OK" {
			recovered = true
			break
		}
		time.Sleep(time.Millisecond)
	}
	if recovered {
		fmt.Printf("flood: GET /healthz 200 %s after the flood closed\n", time.Since(start).Round(time.Millisecond))
	} else {
		fmt.Println("flood: NOT serving 20 s after the flood closed")
	}
	if err := stop(); err != nil {
		fmt.Println("flood:", err)
		return nil
	}
	fmt.Println("flood: the server lived through it")
	return nil
}

func get(addr string) string {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	return resp.Status
}

func queue(server string, n int) error {
	// Waiters that poll nothing would be dropped after a lease TTL. The
	// coordinator refuses a lease TTL its session TTL does not cover
	// (docs/design.md §8.8: lease_ttl < FailOpenDelay(session_ttl)), so
	// the session TTL is an hour too; no node here holds a session.
	addr, stop, err := start(server, 0, "--lease-ttl", "1h", "--session-ttl", "1h", "--max-waiters-per-node", "1000000")
	if err != nil {
		return err
	}
	defer stop()
	c := &http.Client{}
	lock := func(node, id string) error {
		body := fmt.Sprintf(`{"type":"pull","resource_id":"sha256:%064d","node_id":"%s","request_id":"%s"}`, 0, node, id)
		resp, err := c.Post("http://"+addr+"/lock", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	}
	if err := lock("holder", "holder"); err != nil {
		return err
	}
	// Enqueue rate in windows of a tenth: flat when a /lock costs the
	// same behind any number of waiters.
	window := max(1, n/10)
	var rates []string
	begin := time.Now()
	for i := range n {
		if err := lock(fmt.Sprint("n", i%100), fmt.Sprint("r", i)); err != nil {
			return err
		}
		if (i+1)%window == 0 {
			rates = append(rates, fmt.Sprintf("%.0f", float64(window)/time.Since(begin).Seconds()))
			begin = time.Now()
		}
	}
	fmt.Printf("queue: %d waiters on one key; enqueues per second, by tenth: %s\n", n, strings.Join(rates, " "))
	for _, q := range []string{"", fmt.Sprintf("&node_id=n%d&request_id=r%d", (n-1)%100, n-1)} {
		t := time.Now()
		resp, err := c.Get("http://" + addr + "/lock/status?type=pull&resource_id=sha256:" + fmt.Sprintf("%064d", 0) + q)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		who := "anyone's"
		if q != "" {
			who = "the last waiter's own"
		}
		fmt.Printf("queue: %s GET /lock/status: %d bytes in %s\n", who, len(b), time.Since(t).Round(time.Microsecond))
	}
	return nil
}
