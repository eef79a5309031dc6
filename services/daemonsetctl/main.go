// Command daemonsetctl runs the DaemonSet controller: one pod on every
// eligible node, replaced node by node when the template changes.
package main

import (
	"github.com/kplane/kplane/pkg/app"

	"github.com/kplane/kplane/services/daemonsetctl/daemonset"
)

func main() { app.Main(daemonset.NewService()) }
