package hostinstall

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
)

// readyPoll is how often waitReady asks again.
const readyPoll = 500 * time.Millisecond

// waitReady returns once the host daemon serves: its /readyz at url
// answers 200 or, with no url, its unix socket at the host path socket
// accepts a connection. It gives up when ctx ends, with the last answer.
func waitReady(ctx context.Context, hostRoot, url, socket string) error {
	check := func(ctx context.Context) error {
		if url == "" {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", filepath.Join(hostRoot, socket))
			if err != nil {
				return err
			}
			return c.Close()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the host daemon (%s) did not become ready (see `journalctl -u %s` on the node): %v: %w", Unit, Unit, err, errdefs.ErrUnavailable)
		case <-t.C:
		}
	}
}
