// Command scheduler places pods on nodes: it watches pods without a node
// and the nodes, filters the nodes each pod fits (ready, not cordoned,
// resources, pod count, nodeSelector, taints), scores those (least
// allocated, balanced, spread across the pod's owner, taint preferences),
// and binds the pod to the best by setting spec.nodeName with a
// compare-and-swap update. One replica schedules at a time (lease
// kplane-system/scheduler); the others stand by with a warm cache.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/scheduler/internal/scheduler"
)

func main() { app.Main(scheduler.NewService()) }
