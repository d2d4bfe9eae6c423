// Command pause is the sandbox process of every pod in the locally built kind node image: it
// holds the pod's namespaces open and does nothing until it is told to stop. It reaps the
// zombies of the pod's other processes, as the sandbox (PID 1 of a shared PID namespace) must.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
