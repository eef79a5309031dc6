// Command scheduler places pods on nodes, as kube-scheduler does: each
// pod waiting for a node goes through the plugins of its profile
// (schedulerName; --config gives profiles in KubeSchedulerConfiguration's
// shape) — filters (ready, not cordoned, taints, node affinity, host
// ports, resources, volumes), scores (resources, balance, spreading,
// taint preferences) — and is bound to the best node by setting
// spec.nodeName with a compare-and-swap update. One replica schedules at
// a time (lease kplane-system/scheduler); the others stand by with a
// warm cache. A custom binary with plugins of its own is built with
// package app (see examples/scheduler-plugin).
package main

import (
	kapp "github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/scheduler/app"
)

func main() { kapp.Main(app.NewService()) }
