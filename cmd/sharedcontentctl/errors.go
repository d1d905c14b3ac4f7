package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// probeTimeout bounds checkCoordinator's request.
const probeTimeout = 5 * time.Second

// reportedError is a failure the command's output already states (doctor's
// "N problems"): main exits 1 without printing it again.
type reportedError struct{ msg string }

func (e *reportedError) Error() string { return e.msg }

func reported(msg string) error { return &reportedError{msg: msg} }

func isReported(err error) bool {
	var r *reportedError
	return errors.As(err, &r)
}

// checkCoordinator returns err, or, when server does not answer its
// /healthz as a coordinator, an error that says so in one line instead of
// quoting the page it got. A coordinator's answer carries
// api.ProtocolHeader; one older than that header answers "ok", and its
// connection limit answers JSON without it: those count as coordinators.
//
// With a list of URLs (the replicas of one coordinator) it probes the
// first.
func checkCoordinator(ctx context.Context, server string, err error) error {
	server, _, _ = strings.Cut(server, ",")
	server = strings.TrimSpace(server)
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, perr := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(server, "/")+"/healthz", nil)
	if perr != nil {
		return err
	}
	resp, perr := http.DefaultClient.Do(req)
	if perr != nil {
		return err // unreachable: err says so
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16))
	resp.Body.Close()
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.Header.Get(api.ProtocolHeader) != "" || ct == "application/json" ||
		(resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "ok") {
		return err
	}
	if ct == "" {
		ct = "no content type"
	}
	return fmt.Errorf("%s: not a sharedcontent coordinator (HTTP %d, %s); point --coordinator at one", server, resp.StatusCode, ct)
}

// explainCredentials returns err, or, when the coordinator refused the
// command's credentials, err with what it needs: with node tokens it
// answers only calls with a token, and admin calls only with the admin
// token, which every command takes.
func explainCredentials(err error, tokenFile string) error {
	if !errdefs.IsUnauthorized(err) && !errdefs.IsPermissionDenied(err) {
		return err
	}
	given := "no --token-file was given"
	if tokenFile != "" {
		given = fmt.Sprintf("--token-file %s was refused", tokenFile)
	}
	return fmt.Errorf("%w\n%s: a coordinator with node tokens (--node-tokens-file) answers only calls with a token, and node forget, node release, cluster adopt and prefetch only with its admin token: give sharedcontentctl the admin token (the file of the coordinator's --admin-token-file) with --token-file or SHAREDCONTENT_TOKEN_FILE; every command takes it", err, given)
}
