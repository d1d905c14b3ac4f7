package testnet

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestRelayBlackHole: the relay forwards both ways; black-holed, an open
// connection and a new one stay open and get nothing back (a read times
// out: no EOF, no reset); healed, new connections forward again.
func TestRelayBlackHole(t *testing.T) {
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
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	r := StartRelay(t, echo.Addr().String())
	roundTrip := func(c net.Conn) error {
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		if err := c.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
			return err
		}
		buf := make([]byte, 4)
		_, err := io.ReadFull(c, buf)
		if err == nil && string(buf) != "ping" {
			t.Fatalf("echo: %q", buf)
		}
		return err
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	open := dial()
	if err := roundTrip(open); err != nil {
		t.Fatalf("forwarding: %v", err)
	}
	r.BlackHole()
	for name, c := range map[string]net.Conn{"open": open, "new": dial()} {
		if err := roundTrip(c); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("black-holed %s connection: want silence (a read timeout), got %v", name, err)
		}
	}
	r.Heal()
	if err := roundTrip(dial()); err != nil {
		t.Fatalf("healed: %v", err)
	}
}
