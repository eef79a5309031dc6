// Command kcm runs kplane's controllers in one process, the shape of
// kube-controller-manager: --controllers picks them ("*" all, "*,-jobctl"
// all but one, "replicactl,nodectl" two), each holding its own Lease as
// its own binary does.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/kcm/kcm"
)

func main() { app.MainHost(kcm.NewHost()) }
