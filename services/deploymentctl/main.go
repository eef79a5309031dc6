// Command deploymentctl runs the Deployment controller: it rolls a
// Deployment's pods from one template to the next through ReplicaSets.
package main

import (
	"github.com/kplane/kplane/pkg/app"

	"github.com/kplane/kplane/services/deploymentctl/deployment"
)

func main() { app.Main(deployment.NewService()) }
