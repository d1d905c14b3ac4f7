package registry

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// DefaultHostsDir is containerd's hosts directory for the CRI plugin and
// ctr's --hosts-dir (the CRI registry's config_path).
const DefaultHostsDir = "/etc/containerd/certs.d"

// Options say how to reach registries.
type Options struct {
	// User is "user:password" (or "user", the password empty) for every
	// host; empty: the docker config's credentials for the host, if any.
	User string
	// HostsDir is the hosts directory (<dir>/<host>/hosts.toml, certs);
	// empty: none (the default endpoint of each host).
	HostsDir string
	// PlainHTTP talks HTTP to hosts without a hosts.toml (ctr's
	// --plain-http). A localhost host with a port tries HTTP anyway,
	// as containerd does.
	PlainHTTP bool
}

// Normalize returns ref in containerd's full form, which names the host
// ("alpine" → "docker.io/library/alpine:latest"), or an errdefs
// InvalidArgument naming ref.
func Normalize(ref string) (string, error) {
	r, err := name.ParseReference(ref, name.WithDefaultRegistry("docker.io"))
	if err != nil {
		return "", fmt.Errorf("image %q: %w: %w", ref, errdefs.ErrInvalidArgument, err)
	}
	host := r.Context().RegistryStr()
	if host == name.DefaultRegistry { // "index.docker.io"
		host = "docker.io"
	}
	out := host + "/" + r.Context().RepositoryStr()
	if strings.Contains(r.Identifier(), ":") {
		return out + "@" + r.Identifier(), nil
	}
	return out + ":" + r.Identifier(), nil
}

// NewResolver returns containerd's docker resolver with opts' hosts and
// credentials.
func NewResolver(ctx context.Context, opts Options) (remotes.Resolver, error) {
	creds, err := credentials(opts.User)
	if err != nil {
		return nil, err
	}
	ho := config.HostOptions{Credentials: creds}
	if opts.HostsDir != "" {
		ho.HostDir = config.HostDirFromRoot(opts.HostsDir)
	}
	if opts.PlainHTTP {
		ho.DefaultScheme = "http"
	}
	return docker.NewResolver(docker.ResolverOptions{Hosts: config.ConfigureHosts(ctx, ho)}), nil
}

// ResolveDigest resolves ref (Normalize first) to the descriptor of its
// index or manifest.
func ResolveDigest(ctx context.Context, ref string, opts Options) (ocispec.Descriptor, error) {
	r, err := NewResolver(ctx, opts)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	_, desc, err := Resolve(ctx, r, ref)
	return desc, err
}

// Resolve resolves ref with r: the full reference (Normalize) and the
// descriptor of its index or manifest.
func Resolve(ctx context.Context, r remotes.Resolver, ref string) (string, ocispec.Descriptor, error) {
	full, err := Normalize(ref)
	if err != nil {
		return "", ocispec.Descriptor{}, err
	}
	_, desc, err := r.Resolve(ctx, full)
	if err != nil {
		return "", ocispec.Descriptor{}, fmt.Errorf("resolve %s: %w", full, err)
	}
	return full, desc, nil
}

// credentials returns the resolver's credentials for a host: user's for
// every host, else the docker config's.
func credentials(user string) (func(host string) (string, string, error), error) {
	if user != "" {
		u, p, _ := strings.Cut(user, ":")
		if u == "" {
			return nil, fmt.Errorf("--user %q: want user:password: %w", user, errdefs.ErrInvalidArgument)
		}
		return func(string) (string, string, error) { return u, p, nil }, nil
	}
	return dockerConfig, nil
}

// dockerConfig answers a host's credentials from the docker config (and
// its credential helpers); none is anonymous.
func dockerConfig(host string) (string, string, error) {
	if host == "registry-1.docker.io" { // containerd's endpoint for docker.io
		host = name.DefaultRegistry
	}
	reg, err := name.NewRegistry(host, name.Insecure)
	if err != nil {
		return "", "", fmt.Errorf("credentials for %s: %w", host, err)
	}
	a, err := authn.DefaultKeychain.Resolve(reg)
	if err != nil {
		return "", "", fmt.Errorf("docker config, credentials for %s: %w", host, err)
	}
	cfg, err := a.Authorization()
	if err != nil {
		return "", "", fmt.Errorf("docker config, credentials for %s: %w", host, err)
	}
	if cfg.IdentityToken != "" {
		// containerd takes a secret without a user for a refresh token.
		return "", cfg.IdentityToken, nil
	}
	return cfg.Username, cfg.Password, nil
}
