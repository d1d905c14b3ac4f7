package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// blob is the resource the examples lock: a blob's digest.
const blob = "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"

// A node pulls a blob under its pull lock: it acquires the lock, downloads,
// and unlocks with success. The coordinator then records the node's
// reference, and a node that asks for the same pull afterwards skips it.
func ExampleClient_Lock() {
	url, stop := startCoordinator()
	defer stop()
	ctx := context.Background()

	a, err := lockclient.New(url, lockclient.WithNodeID("node-a"))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	// A node's daemon holds its session (ExampleClient_Session): a
	// pull's success records the node's reference only then.
	if _, err := a.Session(ctx, api.SessionRequest{InstanceID: "daemon-1"}); err != nil {
		log.Fatal(err)
	}
	pull := api.LockRequest{Type: api.OperationPull, ResourceID: blob}
	res, err := a.Lock(ctx, pull) // waits while another node pulls it
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("node-a acquired:", res.Acquired)
	if res.Acquired {
		// ... download the blob (res.Lease.Lost() closes if the lease is lost) ...
		if err := a.Unlock(ctx, res.Lease, true, nil); err != nil {
			log.Fatal(err)
		}
	}

	b := newClient(url, "node-b") // lockclient.New, as above
	defer b.Close()
	res, err = b.Lock(ctx, pull)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("node-b skipped:", res.Skipped)

	refs, err := b.Refs(ctx, blob)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("references:", refs.Nodes)
	// Output:
	// node-a acquired: true
	// node-b skipped: true
	// references: [node-a]
}

// TryLock does not wait: a lock held by another holder fails at once with
// api.ErrLocked, and Status names the holder.
func ExampleClient_TryLock() {
	url, stop := startCoordinator()
	defer stop()
	ctx := context.Background()
	a, b := newClient(url, "node-a"), newClient(url, "node-b")
	defer a.Close()
	defer b.Close()

	update := api.LockRequest{Type: api.OperationUpdate, ResourceID: blob}
	held, err := a.Lock(ctx, update)
	if err != nil {
		log.Fatal(err)
	}

	_, err = b.TryLock(ctx, update)
	if errors.Is(err, api.ErrLocked) {
		st, err := b.Status(ctx, update.Type, update.ResourceID)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("locked by", st.Holder.NodeID)
	}

	if err := a.Unlock(ctx, held.Lease, true, nil); err != nil {
		log.Fatal(err)
	}
	res, err := b.TryLock(ctx, update)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("node-b acquired:", res.Acquired)
	if err := b.Unlock(ctx, res.Lease, true, nil); err != nil {
		log.Fatal(err)
	}
	// Output:
	// locked by node-a
	// node-b acquired: true
}

// A node's daemon opens its session at start, and adds its reference to
// a blob before it uses it. While node-a references the blob, another
// node's delete of it is refused, naming the reference set. At a clean
// shutdown the daemon ends its session.
func ExampleClient_Session() {
	url, stop := startCoordinator()
	defer stop()
	ctx := context.Background()
	a, b := newClient(url, "node-a"), newClient(url, "node-b")
	defer a.Close()
	defer b.Close()

	const instance = "daemon-1" // random per daemon start
	s, err := a.Session(ctx, api.SessionRequest{InstanceID: instance})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("new member:", s.NewMember)
	refs, err := a.AddRef(ctx, blob)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("references:", refs.Count)

	_, err = b.TryLock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blob})
	var inUse *api.InUseError
	if errors.As(err, &inUse) {
		fmt.Println("delete refused; in use by", inUse.Refs.Nodes)
	}

	end, err := a.EndSession(ctx, instance)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("session ended:", end.Ended)
	// Output:
	// new member: true
	// references: 1
	// delete refused; in use by [node-a]
	// session ended: true
}
