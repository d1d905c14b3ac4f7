//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"time"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

// armed holds the actions SHAREDCONTENT_FAILPOINTS sets, by point name;
// written once by init, read-only after.
var armed map[string]action

func init() {
	a, err := parse(os.Getenv(EnvVar))
	if err != nil {
		fmt.Fprintf(os.Stderr, "failpoint: %s: %v\n", EnvVar, err)
		os.Exit(2)
	}
	armed = a
}

// Inject carries out the action armed at name, if any.
func Inject(name string) {
	a, ok := armed[name]
	if !ok {
		return
	}
	switch a.kind {
	case actExit:
		fmt.Fprintf(os.Stderr, "failpoint %s: exit %d\n", name, ExitCode)
		os.Exit(ExitCode)
	case actPanic:
		panic("failpoint " + name)
	case actSleep:
		fmt.Fprintf(os.Stderr, "failpoint %s: sleep %v\n", name, a.sleep)
		time.Sleep(a.sleep)
	}
}
