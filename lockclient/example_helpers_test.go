package lockclient_test

import (
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// newClient returns a Client of the coordinator at url for node.
func newClient(url, node string) *lockclient.Client {
	c, err := lockclient.New(url, lockclient.WithNodeID(node))
	if err != nil {
		log.Fatal(err)
	}
	return c
}

// startCoordinator starts a real coordinator on a loopback port, its data
// in a temporary directory, for one example; stop shuts it down and
// removes the directory.
func startCoordinator() (url string, stop func()) {
	t := &exampleT{}
	return lockservertest.Start(t).URL(), t.cleanup
}

// exampleT is the testing.TB that lockservertest needs, for examples,
// which get none: a failure panics, and cleanup runs what was registered.
type exampleT struct {
	testing.TB // nil: lockservertest calls only the methods below

	cleanups []func()
}

func (t *exampleT) Helper()                        {}
func (t *exampleT) Cleanup(f func())               { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Errorf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (t *exampleT) FailNow()                       { panic("example failed") }
func (t *exampleT) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (t *exampleT) Logf(format string, a ...any)   { log.Printf(format, a...) }
func (t *exampleT) Name() string                   { return "example" }
func (t *exampleT) Failed() bool                   { return false } // a failure has panicked

func (t *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "lockclient-example-")
	if err != nil {
		panic(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// cleanup runs the registered functions, last first, as testing does.
func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
