package hostinstall

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/containerd/errdefs"
)

// Service account files every pod that mounts its token sees.
const (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// DefaultTokenFile, DefaultCAFile and DefaultNamespaceFile are the
	// pod's service account token, the API server's CA and its namespace.
	DefaultTokenFile     = serviceAccountDir + "/token"
	DefaultCAFile        = serviceAccountDir + "/ca.crt"
	DefaultNamespaceFile = serviceAccountDir + "/namespace"
)

// DaemonSet asks the API server about the pod's own DaemonSet, with one
// HTTPS GET (apps/v1 daemonsets/NAME, which the chart's Role grants), so
// that the installer needs no Kubernetes client library.
type DaemonSet struct {
	// APIServer is the API server's URL (in a pod:
	// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT).
	APIServer string
	// Namespace and Name name the DaemonSet.
	Namespace, Name string
	// TokenFile is the bearer token (re-read at each call: kubelet
	// rotates it); CAFile verifies the API server.
	TokenFile, CAFile string
}

// DaemonSetState is what Lookup learnt.
type DaemonSetState int

const (
	// DaemonSetPresent: it exists and is not being deleted (an upgrade,
	// a pod deleted, a drain).
	DaemonSetPresent DaemonSetState = iota
	// DaemonSetGone: it is gone or being deleted (helm uninstall).
	DaemonSetGone
	// DaemonSetForbidden: the API server refused the pod's credentials
	// (401, 403); once they worked, their removal with the release is
	// what makes this happen.
	DaemonSetForbidden
)

// Lookup asks whether the DaemonSet still exists without a
// deletionTimestamp. An answer other than 200, 401, 403 or 404, or none,
// is an error.
func (d DaemonSet) Lookup(ctx context.Context) (DaemonSetState, error) {
	token, err := os.ReadFile(d.TokenFile)
	if err != nil {
		return 0, fmt.Errorf("service account token: %w", err)
	}
	client, err := d.client()
	if err != nil {
		return 0, err
	}
	u := strings.TrimSuffix(d.APIServer, "/") + path.Join("/apis/apps/v1/namespaces", url.PathEscape(d.Namespace), "daemonsets", url.PathEscape(d.Name))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, fmt.Errorf("API server %q: %v: %w", d.APIServer, err, errdefs.ErrInvalidArgument)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("daemonset %s/%s: %v: %w", d.Namespace, d.Name, err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch resp.StatusCode {
	case http.StatusNotFound:
		return DaemonSetGone, nil
	case http.StatusUnauthorized, http.StatusForbidden:
		return DaemonSetForbidden, nil
	case http.StatusOK:
	default:
		return 0, fmt.Errorf("daemonset %s/%s: %s: %s: %w", d.Namespace, d.Name, resp.Status, strings.TrimSpace(string(body)), errdefs.ErrUnavailable)
	}
	var ds struct {
		Metadata struct {
			DeletionTimestamp *time.Time `json:"deletionTimestamp"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &ds); err != nil {
		return 0, fmt.Errorf("daemonset %s/%s: %v: %w", d.Namespace, d.Name, err, errdefs.ErrUnknown)
	}
	if ds.Metadata.DeletionTimestamp != nil {
		return DaemonSetGone, nil
	}
	return DaemonSetPresent, nil
}

func (d DaemonSet) client() (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if d.CAFile != "" {
		pem, err := os.ReadFile(d.CAFile)
		if err != nil {
			return nil, fmt.Errorf("API server CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("API server CA %s: no certificate: %w", d.CAFile, errdefs.ErrInvalidArgument)
		}
		tc.RootCAs = pool
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}}, nil
}
