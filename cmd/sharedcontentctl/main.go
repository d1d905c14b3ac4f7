// Command sharedcontentctl is the operator's tool for a sharedcontent
// cluster: it shows the coordinator's state and, with --root, the shared
// directory's, and it adopts a root or forgets a node. Output is a table,
// or JSON with -o json.
//
//	sharedcontentctl [--lock-server URL] [--token-file F] [-o json] status
//	sharedcontentctl ... [--root DIR] doctor [--containerd-config PATH]
//	sharedcontentctl ... [--root DIR] refs DIGEST
//	sharedcontentctl ... node ls | node forget ID
//	sharedcontentctl ... --root DIR du | reap --dry-run [--reap-grace D]
//	sharedcontentctl ... cluster adopt --root DIR [--force]
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

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/internal/tokenfile"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

const (
	defaultServer = "http://127.0.0.1:8642"
	callTimeout   = 30 * time.Second
)

func main() {
	// The client's retry warnings are for daemons' logs; here the command's
	// own answer (or error) says what happened.
	if os.Getenv("SHAREDCONTENT_DEBUG") == "" {
		log.L.Logger.SetLevel(logrus.ErrorLevel)
	}
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sharedcontentctl:", err)
		os.Exit(1)
	}
}

const usage = `usage: sharedcontentctl [flags] COMMAND
commands:
  doctor [--containerd-config PATH]   check this node's setup (containerd's config, the plugin's socket, the coordinator, --root); says what to fix
  status                              cluster id and epoch, members (live, synced), locks queued, requests refused and why
  refs DIGEST                         the nodes that reference a blob, and (with --root) whether its file is there
  node ls                             list member nodes: live session, synced, absence in the coordinator's uptime
  node forget ID                      forget a node gone for good (drops its references)
  du                                  bytes in the shared directory (--root), per node, and reclaimable
  reap --dry-run [--reap-grace D]     what a reaper pass would remove now (--root) and why: the reaper's own decision code
  cluster adopt --root DIR [--force]  make the coordinator take the shared root's cluster (after it lost its database)
flags:`

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sharedcontentctl", flag.ContinueOnError)
	server := fs.String("lock-server", envOr("SHAREDCONTENT_LOCK_SERVER", defaultServer), "coordinator URL (env SHAREDCONTENT_LOCK_SERVER)")
	tokenFile := fs.String("token-file", os.Getenv("SHAREDCONTENT_TOKEN_FILE"), "file with the bearer token (admin token for adopt and forget)")
	output := fs.String("o", "table", "output: table or json")
	root := fs.String("root", os.Getenv("SHAREDCONTENT_ROOT"), "the shared content directory, for refs, du and reap (env SHAREDCONTENT_ROOT)")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	p, err := newPrinter(out, *output)
	if err != nil {
		return err
	}
	var (
		opts  []lockclient.Option
		token string
	)
	if *tokenFile != "" {
		if token, err = tokenfile.Read(*tokenFile); err != nil {
			return err
		}
		opts = append(opts, lockclient.WithBearerToken(token))
	}
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "doctor" {
		// doctor reports how the coordinator answers now: one retry, not
		// the default few that ride out a restart.
		opts = append(opts, lockclient.WithMaxRetries(1))
	}
	c, err := lockclient.New(*server, append(opts, lockclient.WithNodeID("sharedcontentctl"))...)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	switch {
	case len(rest) >= 2 && rest[0] == "cluster" && rest[1] == "adopt":
		return adopt(ctx, c, rest[2:], out)
	case len(rest) >= 1 && rest[0] == "doctor":
		return doctor(ctx, c, *server, *root, rest[1:], p)
	case len(rest) == 1 && rest[0] == "status":
		return status(ctx, c, *server, token, p)
	case len(rest) == 2 && rest[0] == "refs":
		return refs(ctx, c, *root, rest[1], p)
	case len(rest) == 1 && rest[0] == "du":
		return du(ctx, c, *root, p)
	case len(rest) >= 1 && rest[0] == "reap":
		return reapDryRun(ctx, c, *root, rest[1:], p)
	case len(rest) == 2 && rest[0] == "node" && rest[1] == "ls":
		return nodes(ctx, c, p)
	case len(rest) == 3 && rest[0] == "node" && rest[1] == "forget":
		if err := c.Forget(ctx, rest[2]); err != nil {
			return err
		}
		fmt.Fprintf(out, "forgot node %s; its references are dropped (the reaper reclaims what nobody else uses)\n", rest[2])
		return nil
	}
	fs.Usage()
	return fmt.Errorf("unknown command %q", rest)
}

func adopt(ctx context.Context, c *lockclient.Client, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("cluster adopt", flag.ContinueOnError)
	root := fs.String("root", "", "the shared content directory (required)")
	force := fs.Bool("force", false, "adopt even though the coordinator already has members")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *root == "" {
		return errors.New("cluster adopt: --root is required")
	}
	id, err := contentv2.ReadClusterID(*root)
	if err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("cluster adopt: %s records no cluster (no node has used it yet); nothing to adopt", *root)
	}
	members, err := contentv2.NodeMarkers(*root)
	if err != nil {
		return err
	}
	cl, err := c.Adopt(ctx, api.AdoptRequest{ClusterID: id, Nodes: members, Force: *force})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "coordinator adopted cluster %s (epoch %d) with %d member(s) %v; deletes wait until every one has synced\n",
		cl.ClusterID, cl.Epoch, len(members), members)
	return nil
}

func nodes(ctx context.Context, c *lockclient.Client, p printer) error {
	resp, err := c.Nodes(ctx)
	if err != nil {
		return err
	}
	return p.print(resp, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "cluster %s, epoch %d, node expiry %s\n", resp.ClusterID, resp.Epoch, time.Duration(resp.NodeExpiryMs)*time.Millisecond)
		fmt.Fprintln(tw, "NODE\tLIVE\tSYNCED\tLAST SEEN\tABSENT (COORDINATOR UPTIME)")
		for _, n := range resp.Nodes {
			fmt.Fprintf(tw, "%s\t%v\t%v\t%s\t%s\n", n.NodeID, n.Live, n.Synced, n.LastSeen, (time.Duration(n.AbsentMs) * time.Millisecond).Round(time.Second))
		}
	})
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
