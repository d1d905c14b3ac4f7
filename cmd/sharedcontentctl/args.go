package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/cmd/internal/cli"
	"github.com/sharedcontent/sharedcontent/internal/registry"
)

// command is one of sharedcontentctl's commands.
type command struct {
	name string   // its words, e.g. "node forget"
	args []string // its arguments, e.g. {"ID"}
	// flags defines its own flags on fs, into inv.
	flags func(fs *flag.FlagSet, inv *invocation)
	// check refuses bad arguments before anything is asked.
	check func(args []string) error
	// optional: the arguments may all be left out.
	optional bool
}

var commands = []command{
	{name: "doctor", flags: func(fs *flag.FlagSet, inv *invocation) {
		fs.StringVar(&inv.containerdConfig, "containerd-config", defaultContainerdConfig, "containerd's config file (its imports are followed)")
		fs.BoolVar(&inv.configOnly, "config-only", false, "check containerd's config only: dial neither the proxies' sockets nor the coordinator, read no root (before containerd-sharedcontent starts, as the Helm chart's init container)")
	}},
	{name: "status"},
	{name: "refs", args: []string{"DIGEST"}, check: checkDigest},
	{name: "node ls"},
	{name: "node forget", args: []string{"ID"}, optional: true, flags: func(fs *flag.FlagSet, inv *invocation) {
		fs.StringVar(&inv.forget.match, "match", "", "without ID: forget the members whose ID matches this glob (* ? [..])")
		fs.DurationVar(&inv.forget.notSeenSince, "not-seen-since", 0, "without ID: forget the members last seen at least this long ago (e.g. 168h)")
		fs.BoolVar(&inv.forget.bystanders, "bystanders", false, "without ID: forget only bystanders (one-off sessions that never synced)")
		fs.BoolVar(&inv.dryRun, "dry-run", false, "without ID: list what would be forgotten, change nothing")
	}},
	{name: "node release", args: []string{"ID"}},
	{name: "du"},
	{name: "reap", flags: func(fs *flag.FlagSet, inv *invocation) {
		fs.BoolVar(&inv.dryRun, "dry-run", false, "list what the reaper would remove; required (the nodes' reapers reclaim, one at a time)")
		fs.DurationVar(&inv.reapGrace, "reap-grace", defaultReapGrace, "the reapers' --reap-grace")
	}},
	{name: "prefetch", args: []string{"IMAGE"}, flags: func(fs *flag.FlagSet, inv *invocation) {
		f := &inv.prefetch
		fs.Var(platformsFlag{&f.platforms}, "platform", "a platform to fetch (os/arch[/variant]), repeatable; default every platform of the image")
		fs.StringVar(&f.User, "user", "", "registry credentials user:password for every host; default the docker config's (~/.docker/config.json, $DOCKER_CONFIG)")
		fs.StringVar(&f.HostsDir, "hosts-dir", registry.DefaultHostsDir, "containerd's hosts directory (<dir>/<host>/hosts.toml: mirrors, certificates), as the nodes' CRI config_path")
		fs.BoolVar(&f.PlainHTTP, "plain-http", false, "talk HTTP to registries without a hosts.toml (as ctr --plain-http)")
		fs.StringVar(&f.pinName, "pin-name", "", "the pin's name; default the image reference")
		fs.DurationVar(&f.pinExpires, "pin-expires", 0, "the pin ends after this long (e.g. 24h); default never (pin rm)")
		fs.BoolVar(&f.noPin, "no-pin", false, "do not pin: the blobs stay while a node uses them, and unused for the reaper's --reap-grace")
		fs.StringVar(&f.nodeID, "node-id", "", "the node ID the prefetch downloads as (forgotten when it ends); default prefetch-<hostname>")
		fs.StringVar(&f.stateDir, "state-dir", "", "the prefetch's journal directory, on local disk; default a temporary one, removed when it ends")
	}},
	{name: "top", flags: func(fs *flag.FlagSet, inv *invocation) {
		fs.BoolVar(&inv.top.once, "once", false, "print once and exit (also with -o json, or when the output is not a terminal)")
		fs.DurationVar(&inv.top.interval, "interval", time.Second, "how often to redraw in a terminal")
	}},
	{name: "pin add", args: []string{"IMAGE|DIGEST"}, flags: func(fs *flag.FlagSet, inv *invocation) {
		fs.StringVar(&inv.pin.User, "user", "", "registry credentials user:password, to resolve an IMAGE (as prefetch)")
		fs.StringVar(&inv.pin.HostsDir, "hosts-dir", registry.DefaultHostsDir, "containerd's hosts directory, to resolve an IMAGE (as prefetch)")
		fs.BoolVar(&inv.pin.PlainHTTP, "plain-http", false, "talk HTTP to registries without a hosts.toml, to resolve an IMAGE")
		fs.StringVar(&inv.pin.name, "name", "", "the pin's name (default: made of the digest or image)")
		fs.DurationVar(&inv.pin.expires, "expires", 0, "drop the pin this long from now (e.g. 24h); 0: never")
		fs.Var(platformsFlag{&inv.pin.platforms}, "platform", "of an index, pin only the manifests of this platform (e.g. linux/amd64; repeat, or comma-separate); default: every platform")
	}},
	{name: "pin ls"},
	{name: "pin rm", args: []string{"NAME"}, check: checkPinName},
	{name: "cluster adopt", flags: func(fs *flag.FlagSet, inv *invocation) {
		fs.BoolVar(&inv.force, "force", false, "adopt even though the coordinator already has members")
	}},
}

// invocation is a parsed command line.
type invocation struct {
	cmd  command
	args []string
	// The flags every command takes.
	server, tokenFile, output, root string
	serverSet                       bool // --coordinator was given
	version                         bool // --version: print it, run nothing
	// The commands' own flags.
	containerdConfig string
	configOnly       bool
	dryRun, force    bool
	reapGrace        time.Duration
	forget           forgetSelection
	prefetch         prefetchFlags
	errOut           io.Writer // notes beside the result
	top              topOptions
	pin              pinOptions
}

// parseArgs parses a command line: the flags every command takes, before
// or after the command's words, and the command's own flags after them,
// between or after its arguments. Notes on deprecated names go to errOut.
func parseArgs(args []string, errOut io.Writer) (*invocation, error) {
	inv := &invocation{
		server: coordinatorFromEnv(errOut),
		root:   os.Getenv("SHAREDCONTENT_ROOT"),
	}
	fs := inv.flagSet("sharedcontentctl", errOut)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if inv.version {
		return inv, nil
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return nil, errors.New("no command")
	}
	cmd, ok := findCommand(rest)
	if !ok {
		return nil, fmt.Errorf("unknown command %q (sharedcontentctl -h lists the commands)", strings.Join(rest, " "))
	}
	inv.cmd = cmd
	cfs := inv.flagSet("sharedcontentctl "+cmd.name, errOut)
	if cmd.flags != nil {
		cmd.flags(cfs, inv)
	}
	positional, err := parseInterspersed(cfs, rest[len(strings.Fields(cmd.name)):])
	if err != nil {
		return nil, err
	}
	if len(positional) != len(cmd.args) && (!cmd.optional || len(positional) != 0) {
		want := strings.TrimSpace(cmd.name + " " + strings.Join(cmd.args, " "))
		return nil, fmt.Errorf("%s: want %q, got arguments %q", cmd.name, want, positional)
	}
	if cmd.check != nil && len(positional) > 0 {
		if err := cmd.check(positional); err != nil {
			return nil, err
		}
	}
	inv.args = positional
	if err := checkCoordinatorURLs(inv.server); err != nil {
		return nil, err
	}
	return inv, nil
}

// checkCoordinatorURLs refuses a --coordinator whose URLs do not name
// their scheme ("c0:8642" would be read as a scheme "c0").
func checkCoordinatorURLs(server string) error {
	for _, u := range strings.Split(server, ",") {
		u = strings.TrimSpace(u)
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("--coordinator %q: coordinator URL must start with http:// or https://: %w", u, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// checkDigest refuses a first argument that is not a digest.
func checkDigest(args []string) error {
	if _, err := digest.Parse(args[0]); err != nil {
		return fmt.Errorf("%q is not a digest (want sha256:<64 hex digits>): %w", args[0], err)
	}
	return nil
}

// findCommand returns the command whose words start rest.
func findCommand(rest []string) (command, bool) {
	for _, c := range commands {
		words := strings.Fields(c.name)
		if len(rest) >= len(words) && strings.Join(rest[:len(words)], " ") == c.name {
			return c, true
		}
	}
	return command{}, false
}

// flagSet returns a flag set with the flags every command takes, their
// defaults what inv holds now (so that a second set keeps what the first
// parsed).
func (inv *invocation) flagSet(name string, errOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Func("coordinator", "coordinator URL, or the comma-separated URLs of its replicas (env SHAREDCONTENT_COORDINATOR; default "+defaultServer+")", func(v string) error {
		inv.server, inv.serverSet = v, true
		return nil
	})
	fs.Func("lock-server", "deprecated name of --coordinator", func(v string) error {
		fmt.Fprintln(errOut, "sharedcontentctl: --lock-server is deprecated, use --coordinator")
		if !inv.serverSet {
			inv.server = v
		}
		return nil
	})
	fs.StringVar(&inv.tokenFile, "token-file", or(inv.tokenFile, os.Getenv("SHAREDCONTENT_TOKEN_FILE")), "file with the bearer token (env SHAREDCONTENT_TOKEN_FILE): the coordinator's admin token (its --admin-token-file), which every command takes and forget, release, adopt and pin need; a coordinator with node tokens answers no call without a token. Without node or admin tokens: its --token-file")
	fs.StringVar(&inv.output, "o", or(inv.output, "table"), "output: table or json")
	fs.BoolVar(&inv.version, cli.VersionFlag, false, "print the version (and revision, Go version) and exit")
	fs.StringVar(&inv.root, "root", inv.root, "the shared content directory, for refs, du, reap, top, doctor, prefetch, pin and cluster adopt (env SHAREDCONTENT_ROOT)")
	return fs
}

// coordinatorFromEnv returns SHAREDCONTENT_COORDINATOR, else the
// deprecated SHAREDCONTENT_LOCK_SERVER (with a note), else the default.
func coordinatorFromEnv(errOut io.Writer) string {
	if v := os.Getenv("SHAREDCONTENT_COORDINATOR"); v != "" {
		return v
	}
	if v := os.Getenv("SHAREDCONTENT_LOCK_SERVER"); v != "" {
		fmt.Fprintln(errOut, "sharedcontentctl: SHAREDCONTENT_LOCK_SERVER is deprecated, use SHAREDCONTENT_COORDINATOR")
		return v
	}
	return defaultServer
}

// parseInterspersed parses args into fs, flags between the arguments
// too, and returns the arguments. After "--" everything is an argument.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
