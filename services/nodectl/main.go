// Command nodectl is the node controller: it watches every node's
// heartbeat (the Lease kplane-node-lease/<node> renewed by its agent),
// marks silent nodes Ready=Unknown and taints them unreachable, marks their
// pods not ready, and after --pod-eviction-timeout force-deletes the pods
// of nodes tainted NoExecute so that their owners recreate them elsewhere,
// at a limited rate and not at all when most nodes are down at once. It
// deletes the pods of deleted nodes too. Like every kplane controller it
// is its own leader-elected process.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/nodectl/nodelifecycle"
)

func main() { app.Main(nodelifecycle.NewService()) }
