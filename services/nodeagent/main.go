// Command nodeagent is kplane's kubelet: it registers a Node (or, with
// --runtime=fake --fake-nodes N, N of them), renews its node Lease, runs
// the pods bound to it and reports their status, stops and removes pods
// that are deleted, and serves their logs over HTTP.
//
// "nodeagent shim ..." is the per-container supervisor the exec runtime
// starts (see internal/shim); it is not meant to be run by hand.
//
// On SIGTERM the agent exits and leaves the containers running; started
// again on the same --root-dir it adopts them (see internal/agent).
package main

import (
	"os"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/nodeagent/internal/agent"
	"github.com/kplane/kplane/services/nodeagent/internal/shim"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == shim.Command {
		os.Exit(shim.Main(os.Args[2:]))
	}
	app.Main(agent.NewService())
}
