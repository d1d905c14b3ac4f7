package e2e

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// TestNetProxy checks the cut-off proxy itself (it runs in `make test`
// too): it forwards, resets while refusing, holds while dropping, delays
// what the client sends, and forwards again once switched back.
func TestNetProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write(append(sc.Bytes(), '\n')); err != nil {
						return
					}
				}
			}()
		}
	}()
	p := startNetProxy(t, echo.Addr().String())
	addr := p.ln.Addr().String()

	// roundTrip sends a line and reads the echo within d.
	roundTrip := func(c net.Conn, d time.Duration) error {
		_ = c.SetDeadline(time.Now().Add(d))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return err
		}
		_, err := bufio.NewReader(c).ReadString('\n')
		return err
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// refused reports whether a new connection fails: the kernel completes
	// the handshake before the proxy's Accept, so the reset reaches the
	// client either during Dial or on its first round trip.
	refused := func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return true
		}
		defer c.Close()
		return roundTrip(c, 5*time.Second) != nil
	}

	up := dial()
	if err := roundTrip(up, 5*time.Second); err != nil {
		t.Fatalf("up: %v", err)
	}

	p.set(proxyRefuse)
	if err := roundTrip(up, 5*time.Second); err == nil {
		t.Fatal("refuse: a connection forwarded before the cut still works")
	}
	if !refused() {
		t.Fatal("refuse: a new connection works")
	}

	p.set(proxyDrop)
	held := dial()
	err = roundTrip(held, 300*time.Millisecond)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("drop: want a timeout, got %v", err)
	}

	p.set(proxyUp)
	if err := roundTrip(held, 5*time.Second); err == nil {
		t.Fatal("up again: a connection held while dropping was not closed")
	}
	again := dial()
	if err := roundTrip(again, 5*time.Second); err != nil {
		t.Fatalf("up again: %v", err)
	}

	const delay = 300 * time.Millisecond
	p.setDelay(proxyDelay, delay)
	if err := roundTrip(again, 5*time.Second); err == nil {
		t.Fatal("delay: a connection forwarded before the switch still works")
	}
	slow := dial()
	for i := range 2 { // the delay holds for every request, not only the first
		start := time.Now()
		if err := roundTrip(slow, 5*time.Second); err != nil {
			t.Fatalf("delay: round trip %d: %v", i, err)
		}
		if took := time.Since(start); took < delay {
			t.Fatalf("delay: round trip %d took %v, less than the delay %v", i, took, delay)
		}
	}

	// Keepalives only: a session renewal is delayed, anything else held.
	p.setDelay(proxyKeepalive, delay)
	if err := roundTrip(slow, 5*time.Second); err == nil {
		t.Fatal("keepalive: a connection forwarded before the switch still works")
	}
	line := func(c net.Conn, req string, d time.Duration) error {
		_ = c.SetDeadline(time.Now().Add(d))
		if _, err := c.Write([]byte(req + "\n")); err != nil {
			return err
		}
		_, err := bufio.NewReader(c).ReadString('\n')
		return err
	}
	renewals := dial()
	start := time.Now()
	if err := line(renewals, "POST /nodes/session HTTP/1.1", 5*time.Second); err != nil {
		t.Fatalf("keepalive: renewal: %v", err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("keepalive: renewal took %v, less than the delay %v", took, delay)
	}
	other := dial()
	err = line(other, "PUT /refs/add HTTP/1.1", delay+300*time.Millisecond)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("keepalive: another request: want a timeout, got %v", err)
	}

	p.set(proxyUp)
	if err := roundTrip(renewals, 5*time.Second); err == nil {
		t.Fatal("up after delay: a delayed connection was not closed")
	}
	if err := roundTrip(dial(), 5*time.Second); err != nil {
		t.Fatalf("up after delay: %v", err)
	}
	for m, want := range map[proxyMode]int{proxyUp: 3, proxyRefuse: 1, proxyDrop: 1, proxyDelay: 1, proxyKeepalive: 2} {
		if got := p.connections(m); got != want {
			t.Errorf("connections accepted while %v: got %d, want %d", m, got, want)
		}
	}
}
