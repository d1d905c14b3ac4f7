// Command pause is the sandbox ("pause") image of make e2e-k8s, and the
// entrypoint of its test workload: it sleeps until SIGTERM or SIGINT and
// reaps the children it inherits as a PID 1, like Kubernetes' own pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			if pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
	}
}
