package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// statusReport is `status`: the cluster's identity, its members, the
// locks queued now, and what the coordinator refused since it started.
type statusReport struct {
	api.Cluster
	Members []api.NodeStatus `json:"members"`
	// Unsynced members hold every delete back (docs/design.md §8.7).
	Unsynced []string `json:"unsynced"`
	// Queued is the requests waiting, by lock type.
	Queued map[string]float64 `json:"queued"`
	// Requests counts lock requests since the coordinator started, by
	// "type/result" (acquired, skipped, queued, locked, in_use, unsynced).
	Requests map[string]float64 `json:"requests"`
	// Health: database write failures and refused connections.
	WriteFailures       float64 `json:"db_write_failures"`
	RejectedConnections float64 `json:"rejected_connections"`
	// MetricsError says why the counters are missing, if they are.
	MetricsError string `json:"metrics_error,omitempty"`
	// Replicas is each configured URL's role, when --coordinator lists
	// several (docs/design.md §7).
	Replicas []lockclient.ReplicaRole `json:"replicas,omitempty"`
}

func status(ctx context.Context, c *lockclient.Client, server, token string, p printer) error {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return err
	}
	r := statusReport{Cluster: nodes.Cluster, Members: nodes.Nodes, Unsynced: []string{},
		Queued: map[string]float64{}, Requests: map[string]float64{}}
	if r.Members == nil {
		r.Members = []api.NodeStatus{}
	}
	for _, n := range r.Members {
		if !n.Synced {
			r.Unsynced = append(r.Unsynced, n.NodeID)
		}
	}
	// The counters are the leader's; with one URL, that one's.
	urls, err := lockclient.ParseURLs(server)
	if err != nil {
		return err
	}
	if len(urls) > 1 {
		r.Replicas = c.Replicas(ctx)
		server = urls[0]
		for _, rr := range r.Replicas {
			if rr.Role == lockclient.RoleLeader {
				server = rr.URL
				break
			}
		}
	}
	if err := r.readMetrics(ctx, server, token); err != nil {
		r.MetricsError = err.Error()
	}
	return p.print(r, r.table)
}

func (r *statusReport) table(tw *tabwriter.Writer) {
	fmt.Fprintf(tw, "cluster %s, epoch %d\n\n", r.ClusterID, r.Epoch)
	if len(r.Replicas) > 0 {
		fmt.Fprintln(tw, "REPLICA\tROLE")
		for _, rr := range r.Replicas {
			role := rr.Role
			switch {
			case rr.Role == lockclient.RoleStandby:
				role += " (leader: " + or(rr.Leader, "unknown") + ")"
			case rr.Error != "":
				role += " (" + rr.Error + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\n", rr.URL, role)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "NODE\tLIVE\tSYNCED\tLAST SEEN")
	for _, n := range r.Members {
		fmt.Fprintf(tw, "%s\t%v\t%v\t%s\n", n.NodeID, n.Live, n.Synced, n.LastSeen)
	}
	if len(r.Unsynced) > 0 {
		fmt.Fprintf(tw, "\ndeletes are held back until these nodes sync: %s\n", strings.Join(r.Unsynced, ", "))
	} else {
		fmt.Fprintln(tw, "\nevery member is synced: deletes may proceed")
	}
	if r.MetricsError != "" {
		fmt.Fprintf(tw, "\n(no counters: %s)\n", r.MetricsError)
		return
	}
	fmt.Fprintln(tw, "\nTYPE\tQUEUED NOW\tACQUIRED\tSKIPPED\tREFUSED IN USE\tREFUSED UNSYNCED\tLOCKED")
	for _, t := range []api.OperationType{api.OperationPull, api.OperationUpdate, api.OperationDelete} {
		k := string(t) + "/"
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\n", t, r.Queued[string(t)], r.Requests[k+"acquired"],
			r.Requests[k+"skipped"], r.Requests[k+"in_use"], r.Requests[k+"unsynced"], r.Requests[k+"locked"])
	}
	fmt.Fprintf(tw, "\ndatabase write failures %.0f, connections refused %.0f (since the coordinator started)\n",
		r.WriteFailures, r.RejectedConnections)
}

// readMetrics reads the coordinator's /metrics.
func (r *statusReport) readMetrics(ctx context.Context, server, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(server, "/")+"/metrics", nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("reading /metrics: %w", err)
	}
	each := func(name string, fn func(labels map[string]string, v float64)) {
		f := families[name]
		if f == nil {
			return
		}
		for _, m := range f.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			fn(labels, value(m))
		}
	}
	each("sharedcontent_lock_queue_depth", func(l map[string]string, v float64) { r.Queued[l["type"]] = v })
	each("sharedcontent_lock_requests_total", func(l map[string]string, v float64) { r.Requests[l["type"]+"/"+l["result"]] = v })
	each("sharedcontent_db_write_failures_total", func(_ map[string]string, v float64) { r.WriteFailures += v })
	each("sharedcontent_http_connections_rejected_total", func(_ map[string]string, v float64) { r.RejectedConnections += v })
	return nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}
