package contentv2_test

import (
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/coordinatortest"
)

// TestFakeContract holds the store's fake coordinator to the contract the
// real one is held to (contentv2/remote's TestContract), so that the
// store's unit tests run against the rules of the real coordinator.
func TestFakeContract(t *testing.T) {
	coordinatortest.Run(t, func(*testing.T) coordinatortest.Cluster { return contentv2.NewFakeContract(10 * time.Minute) })
}
