package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/internal/testutil/testnet"
)

// The HTTP floors are lock services that do no locking and no JSON: POST
// /lock and POST /unlock send and answer fixed bodies the size of the lock
// server's, over HTTP/1.1 on loopback, one connection per client. One
// uses net/http on both ends (the stack sharedcontent is built on), the
// other fasthttp. They bound what any HTTP lock service on that stack can
// reach on this machine, in the same rounds as Redis. They do not exclude,
// so they run only on distinct keys.

var (
	floorRequest  = []byte(`{"type":"update","resource_id":"bench-0-key-0","node_id":"bench-0","request_id":"7f0e8d9c6b5a4f3e2d1c0b9a8f7e6d5c"}`)
	floorResponse = []byte(`{"request_id":"7f0e8d9c6b5a4f3e2d1c0b9a8f7e6d5c","acquired":true,"skip":false,"queued":false,"lease_id":"0a1b2c3d4e5f60718293a4b5c6d7e8f9","fence":123456,"lease_ttl_ms":15000}` + "\n")
)

// startNetHTTPFloor serves the floor with net/http; its clients use
// net/http.Client.
func startNetHTTPFloor() (*lockSystem, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	answer := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header()["Content-Type"] = []string{"application/json"}
		w.Write(floorResponse)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /lock", answer)
	mux.HandleFunc("POST /unlock", answer)
	srv := &http.Server{Handler: mux}
	counted := testnet.Count(ln)
	go srv.Serve(counted)
	base := "http://" + ln.Addr().String()
	return &lockSystem{
		name:         "HTTP floor: net/http",
		distinctOnly: true,
		accepted:     counted.Accepted,
		newClient: func(int) (lockClient, error) {
			return &netHTTPFloorClient{base: base, c: &http.Client{Transport: &http.Transport{}, Timeout: unlockTimeout}}, nil
		},
		stop: func() { srv.Close() },
	}, nil
}

type netHTTPFloorClient struct {
	base string
	c    *http.Client
}

func (f *netHTTPFloorClient) post(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.base+path, bytes.NewReader(floorRequest))
	if err != nil {
		return err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	resp, err := f.c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

func (f *netHTTPFloorClient) lock(ctx context.Context, _ string) error { return f.post(ctx, "/lock") }
func (f *netHTTPFloorClient) unlock(ctx context.Context, _ string) error {
	return f.post(ctx, "/unlock")
}
func (f *netHTTPFloorClient) close() { f.c.CloseIdleConnections() }

// startFastHTTPFloor serves the floor with fasthttp; its clients use
// fasthttp.HostClient.
func startFastHTTPFloor() (*lockSystem, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		switch string(c.Path()) {
		case "/lock", "/unlock":
			c.SetContentType("application/json")
			c.Write(floorResponse)
		default:
			c.SetStatusCode(fasthttp.StatusNotFound)
		}
	}}
	counted := testnet.Count(ln)
	go srv.Serve(counted)
	addr := ln.Addr().String()
	return &lockSystem{
		name:         "HTTP floor: fasthttp",
		distinctOnly: true,
		accepted:     counted.Accepted,
		newClient: func(int) (lockClient, error) {
			return &fastHTTPFloorClient{addr: addr, c: &fasthttp.HostClient{Addr: addr, MaxConns: 1}}, nil
		},
		stop: func() { srv.Shutdown() },
	}, nil
}

type fastHTTPFloorClient struct {
	addr string
	c    *fasthttp.HostClient
}

func (f *fastHTTPFloorClient) post(path string) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + f.addr + path)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBody(floorRequest)
	if err := f.c.DoTimeout(req, resp, unlockTimeout); err != nil {
		return err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return fmt.Errorf("POST %s: status %d", path, resp.StatusCode())
	}
	return nil
}

func (f *fastHTTPFloorClient) lock(context.Context, string) error   { return f.post("/lock") }
func (f *fastHTTPFloorClient) unlock(context.Context, string) error { return f.post("/unlock") }
func (f *fastHTTPFloorClient) close()                               { f.c.CloseIdleConnections() }
