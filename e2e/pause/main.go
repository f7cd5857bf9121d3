// Command pause is the sandbox ("pause") image of the e2e node (e2e/harness/node.ts): it holds
// a pod's namespaces, reaps the children reparented to it, and exits on SIGTERM or SIGINT.
// Static (CGO_ENABLED=0) so the image needs nothing but this file.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
