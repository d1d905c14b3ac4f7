package e2ek8s

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"
)

// errNotFound is a 404 from the API server.
var errNotFound = errors.New("not found")

// apiClient calls the API server as the admin (system:masters): plain
// HTTPS and JSON, no client library, no kubectl.
type apiClient struct {
	server string
	http   *http.Client
}

func newAPIClient(server, caFile, certFile, keyFile string) (*apiClient, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no certificate", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &apiClient{server: server, http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}}, nil
}

// do sends body (JSON, if not nil) to path and decodes the answer into
// out (if not nil).
func (a *apiClient) do(method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.server+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s %s: %w", method, path, errNotFound)
	case resp.StatusCode >= 300:
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	case out != nil:
		return json.Unmarshal(b, out)
	}
	return nil
}

func (a *apiClient) get(path string, out any) error { return a.do(http.MethodGet, path, nil, out) }

// pods lists the pods of ns that match a label selector.
func (a *apiClient) pods(ns, selector string) (podList, error) {
	var l podList
	err := a.get("/api/v1/namespaces/"+ns+"/pods?labelSelector="+url.QueryEscape(selector), &l)
	return l, err
}
