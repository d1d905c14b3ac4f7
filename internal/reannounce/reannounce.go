package reannounce

import (
	"context"
	"errors"
	"fmt"
	"time"

	eventsapi "github.com/containerd/containerd/api/events"
	eventsvc "github.com/containerd/containerd/api/services/events/v1"
	imagesvc "github.com/containerd/containerd/api/services/images/v1"
	namespacesvc "github.com/containerd/containerd/api/services/namespaces/v1"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	// DefaultAddress is containerd's default API socket.
	DefaultAddress = "/run/containerd/containerd.sock"
	// DefaultNamespace is CRI's namespace, the only one whose image
	// events CRI handles.
	DefaultNamespace = "k8s.io"

	// updateTopic is the topic containerd's image store publishes an
	// image update on, and CRI reloads the image it names on.
	updateTopic = "/images/update"
	// nothingFilter matches no event: the subscription only tells when
	// containerd goes away.
	nothingFilter = `topic=="/sharedcontent/never"`
	// maxRedial bounds the wait between two attempts to reach containerd,
	// so that images are announced within seconds of containerd's start.
	maxRedial = 2 * time.Second
	// retryPause separates two rounds after a failed one (containerd
	// answering but refusing a call), so a persistent error never spins.
	retryPause = 5 * time.Second
)

// Config says which containerd to announce images to.
type Config struct {
	// Address is containerd's API socket (a path).
	Address string
	// Namespace is the namespace whose images are announced; empty:
	// every namespace.
	Namespace string
}

// Run announces every image to containerd each time it becomes reachable,
// until ctx ends. It waits for containerd, quietly, as long as it takes
// (containerd may start after the plugin, as it should). It returns only
// when ctx ends, or at once when the address cannot be dialled at all.
func Run(ctx context.Context, cfg Config) error {
	conn, err := grpc.NewClient("unix://"+cfg.Address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxRedial},
			MinConnectTimeout: maxRedial,
		}))
	if err != nil {
		return fmt.Errorf("containerd at %s: %w", cfg.Address, err)
	}
	defer conn.Close()
	lg := log.G(ctx).WithField("containerd", cfg.Address)
	for {
		err := round(ctx, conn, cfg)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errGone) {
			lg.Info("containerd went away; its images are announced again when it is back")
			continue
		}
		lg.WithError(err).Warn("could not announce the images to containerd; retrying")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retryPause):
		}
	}
}

// errGone is a round's end when containerd stopped answering.
var errGone = errors.New("containerd went away")

// round waits for containerd, announces every image, then waits until
// containerd goes away. Subscribing first means a restart of containerd
// after the announcement always ends the round, so it is never missed.
func round(ctx context.Context, conn *grpc.ClientConn, cfg Config) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Events are published in a namespace, but a subscription sees all.
	stream, err := eventsvc.NewEventsClient(conn).Subscribe(namespaces.WithNamespace(ctx, DefaultNamespace),
		&eventsvc.SubscribeRequest{Filters: []string{nothingFilter}}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	n, err := announce(ctx, conn, cfg.Namespace)
	if err != nil {
		return err
	}
	log.G(ctx).WithField("containerd", cfg.Address).WithField("images", n).
		Info("announced every image to containerd (CRI reloads each image whose content it could not read before)")
	for {
		if _, err := stream.Recv(); err != nil {
			return errors.Join(errGone, err)
		}
	}
}

// announce publishes an image update for each image of namespace (every
// namespace when empty) and returns how many it published. It writes
// nothing: an Update of the image record would announce too, but as a
// read-modify-write from outside containerd's transaction it could undo a
// pull that retags the image in between.
func announce(ctx context.Context, conn *grpc.ClientConn, namespace string) (int, error) {
	nss := []string{namespace}
	if namespace == "" {
		resp, err := namespacesvc.NewNamespacesClient(conn).List(ctx, &namespacesvc.ListNamespacesRequest{})
		if err != nil {
			return 0, fmt.Errorf("list namespaces: %w", err)
		}
		nss = nss[:0]
		for _, ns := range resp.Namespaces {
			nss = append(nss, ns.Name)
		}
	}
	images := imagesvc.NewImagesClient(conn)
	events := eventsvc.NewEventsClient(conn)
	n := 0
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		resp, err := images.List(nctx, &imagesvc.ListImagesRequest{})
		if err != nil {
			return n, fmt.Errorf("list images of namespace %s: %w", ns, err)
		}
		for _, img := range resp.Images {
			ev, err := typeurl.MarshalAnyToProto(&eventsapi.ImageUpdate{Name: img.Name, Labels: img.Labels})
			if err != nil {
				return n, err
			}
			if _, err := events.Publish(nctx, &eventsvc.PublishRequest{Topic: updateTopic, Event: ev}); err != nil {
				return n, fmt.Errorf("announce image %s of namespace %s: %w", img.Name, ns, err)
			}
			n++
		}
	}
	return n, nil
}
