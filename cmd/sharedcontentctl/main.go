// Command sharedcontentctl is the operator's tool for a sharedcontent
// cluster: it shows the coordinator's state and, with --root, the shared
// directory's, it adopts a root or forgets a node, and it pins images. Output is a table,
// or JSON with -o json.
//
//	sharedcontentctl [--coordinator URL[,URL...]] [--token-file F] [-o json] status
//	sharedcontentctl ... [--root DIR] doctor [--containerd-config PATH]
//	sharedcontentctl ... [--root DIR] refs DIGEST
//	sharedcontentctl ... node ls | node forget ID | node release ID
//	sharedcontentctl ... --root DIR du | reap --dry-run [--reap-grace D]
//	sharedcontentctl ... [--root DIR] top [--once] [--interval D]
//	sharedcontentctl ... cluster adopt --root DIR [--force]
//	sharedcontentctl ... --root DIR prefetch IMAGE [--platform P]... [--user U:P] [--hosts-dir D] [--pin-name N] [--pin-expires D] [--no-pin]
//	sharedcontentctl ... --root DIR pin add DIGEST|IMAGE [--name N] [--expires D] [--platform P]
//	sharedcontentctl ... [--root DIR] pin ls | pin rm NAME
//	sharedcontentctl --version
//
// Flags go before or after the command. --lock-server (and the variable
// SHAREDCONTENT_LOCK_SERVER) is the deprecated name of --coordinator.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/containerd/log"
	"github.com/sirupsen/logrus"

	"github.com/sharedcontent/sharedcontent/cmd/internal/cli"
	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/internal/tokenfile"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

const (
	defaultServer = "http://127.0.0.1:8642"
	callTimeout   = 30 * time.Second
	// walkTimeout bounds the commands that walk every reference or member
	// (du, reap --dry-run, bulk node forget) a page at a time: each call
	// is still bounded by the client's own timeouts, but a million
	// references take longer than callTimeout on a loaded coordinator.
	walkTimeout = 15 * time.Minute
)

func main() {
	// The client's retry warnings are for daemons' logs; here the command's
	// own answer (or error) says what happened.
	if os.Getenv("SHAREDCONTENT_DEBUG") == "" {
		log.L.Logger.SetLevel(logrus.ErrorLevel)
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !isReported(err) {
			fmt.Fprintln(os.Stderr, "sharedcontentctl:", err)
		}
		os.Exit(1)
	}
}

const usage = `usage: sharedcontentctl [flags] COMMAND [flags]
commands:
  doctor [--containerd-config PATH] [--config-only]   check this node's setup (containerd's config, the plugin's socket, the coordinator, --root); says what to fix
  status                              cluster id and epoch, members (live, synced), locks queued, requests refused and why
  refs DIGEST                         the nodes that reference a blob, and (with --root) whether its file is there
  node ls                             list member nodes: live session, synced, absence in the coordinator's uptime
  node forget ID                      forget a node gone for good (drops its references)
  node forget [--match GLOB] [--not-seen-since D] [--bystanders] [--dry-run]
                                      forget every member not live that matches (e.g. one-off sessions)
  node release ID                     let another host take over a node ID (the host that held it is gone, or has a new state dir); keeps its references
  du                                  bytes in the shared directory (--root), per node, and reclaimable
  reap --dry-run [--reap-grace D]     what a reaper pass would remove now (--root) and why: the reaper's own decision code
  top [--once] [--interval D]         the downloads in flight: blob, holder node, since, bytes (with --root), waiting nodes; redraws in a terminal
  cluster adopt --root DIR [--force]  make the coordinator take the shared root's cluster (after it lost its database)
  prefetch IMAGE --root DIR [--platform P]... [--user U:P] [--hosts-dir D] [--pin-name N] [--pin-expires D] [--no-pin]
                                      download an image's blobs into the shared root once, under the nodes' pull locks, and pin it
  pin add DIGEST|IMAGE --root DIR [--name N] [--expires D] [--platform P ...]
                                      keep an image's blobs (index, manifests, config, layers, read from --root) whatever the nodes' GC does
  pin ls                              list the pins (with --root: their bytes there)
  pin rm NAME                         drop a pin; its blobs go when no node uses them
flags (before or after the command):`

// run runs the command of args, writing its result to out and notes
// (deprecated names) to errOut.
func run(args []string, out, errOut io.Writer) error {
	inv, err := parseArgs(args, errOut)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if inv.version {
		cli.PrintVersion(out, "sharedcontentctl")
		return nil
	}
	p, err := newPrinter(out, inv.output)
	if err != nil {
		return err
	}
	var (
		opts  []lockclient.Option
		token string
	)
	if inv.tokenFile != "" {
		if token, err = tokenfile.Read(inv.tokenFile); err != nil {
			return err
		}
		opts = append(opts, lockclient.WithBearerToken(token))
	}
	if inv.cmd.name == "doctor" {
		// doctor reports how the coordinator answers now: one retry, not
		// the default few that ride out a restart.
		opts = append(opts, lockclient.WithMaxRetries(1))
	}
	c, err := lockclient.New(inv.server, append(opts, lockclient.WithNodeID("sharedcontentctl"))...)
	if err != nil {
		return err
	}
	defer c.Close()
	timeout := callTimeout
	switch inv.cmd.name {
	case "du", "reap", "node forget":
		timeout = walkTimeout
	case "prefetch":
		timeout = prefetchTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	inv.errOut = errOut
	err = inv.run(ctx, c, token, p, out)
	if err != nil && !isReported(err) {
		return checkCoordinator(context.Background(), inv.server, explainCredentials(err, inv.tokenFile))
	}
	return err
}

// run calls the command.
func (inv *invocation) run(ctx context.Context, c *lockclient.Client, token string, p printer, out io.Writer) error {
	switch inv.cmd.name {
	case "cluster adopt":
		return adopt(ctx, c, inv.root, inv.force, out)
	case "doctor":
		return doctor(ctx, c, inv.server, inv.root, inv.containerdConfig, inv.configOnly, p)
	case "status":
		return status(ctx, c, inv.server, token, p)
	case "refs":
		return refs(ctx, c, inv.root, inv.args[0], p)
	case "du":
		return du(ctx, c, inv.root, p)
	case "reap":
		return reapDryRun(ctx, c, inv.root, inv.dryRun, inv.reapGrace, p)
	case "node ls":
		return nodes(ctx, c, p)
	case "node forget":
		var id string
		if len(inv.args) > 0 {
			id = inv.args[0]
		}
		return forgetNodes(ctx, c, id, inv.forget, inv.dryRun, p, out)
	case "node release":
		return release(ctx, c, inv.args[0], out)
	case "prefetch":
		return runPrefetch(ctx, c, token, inv.server, inv.root, inv.args[0], inv.prefetch, p, out, inv.errOut)
	case "top":
		return top(c, inv.root, inv.top, p, out)
	case "pin add":
		return pinAdd(ctx, c, inv.root, inv.args[0], inv.pin, p, out)
	case "pin ls":
		return pinList(ctx, c, inv.root, p)
	case "pin rm":
		return pinRemove(ctx, c, inv.root, inv.args[0], out)
	}
	panic("sharedcontentctl: no code for command " + inv.cmd.name)
}

// release lets the next host to open the node ID's session take it over
// (docs/design.md §8.5).
func release(ctx context.Context, c *lockclient.Client, id string, out io.Writer) error {
	resp, err := c.Release(ctx, id)
	if err != nil {
		return err
	}
	was := "no recorded host"
	if resp.Lineage != "" {
		was = "the host of journal generation " + resp.Lineage
	}
	fmt.Fprintf(out, "released node %s (it belonged to %s); the next host to start with this node ID takes it over, with its references\n", id, was)
	return nil
}

func adopt(ctx context.Context, c *lockclient.Client, root string, force bool, out io.Writer) error {
	if root == "" {
		return errors.New("cluster adopt: --root is required")
	}
	id, err := contentv2.ReadClusterID(root)
	if err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("cluster adopt: %s records no cluster (no node has used it yet); nothing to adopt", root)
	}
	members, err := contentv2.NodeMarkers(root)
	if err != nil {
		return err
	}
	// The pins first: once adopted, the members sync and deletes go on,
	// and a blob only a pin held must be held by then.
	pinsErr := restorePins(ctx, c, root, out)
	cl, err := c.Adopt(ctx, api.AdoptRequest{ClusterID: id, Nodes: members, Force: force})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "coordinator adopted cluster %s (epoch %d) with %d member(s) %v; deletes wait until every one has synced\n",
		cl.ClusterID, cl.Epoch, len(members), members)
	return pinsErr
}

func nodes(ctx context.Context, c *lockclient.Client, p printer) error {
	resp, err := c.Nodes(ctx)
	if err != nil {
		return err
	}
	return p.print(resp, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "cluster %s, epoch %d, node expiry %s\n", resp.ClusterID, resp.Epoch, time.Duration(resp.NodeExpiryMs)*time.Millisecond)
		fmt.Fprintln(tw, "NODE\tLIVE\tSYNCED\tBYSTANDER\tLAST SEEN\tABSENT (COORDINATOR UPTIME)")
		for _, n := range resp.Nodes {
			fmt.Fprintf(tw, "%s\t%v\t%v\t%v\t%s\t%s\n", n.NodeID, n.Live, n.Synced, n.Bystander, n.LastSeen, (time.Duration(n.AbsentMs) * time.Millisecond).Round(time.Second))
		}
	})
}
