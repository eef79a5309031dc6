package scheduler

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// setupVolumes watches the storage kinds for the VolumeBinding plugin:
// any change of a claim, volume or class may make a waiting pod
// schedulable (a claim bound, a volume created, the node written on a
// WaitForFirstConsumer claim and then the claim bound there).
func (s *Scheduler) setupVolumes(c *app.Context) {
	h := informer.Handler{
		OnAdd:    func(*kplanev1.Object) { s.moveAll("storage changed") },
		OnUpdate: func(_, _ *kplanev1.Object) { s.moveAll("storage changed") },
	}
	for _, kind := range []string{"PersistentVolumeClaim", "PersistentVolume", "StorageClass"} {
		c.Informers.ForKind(kind).AddEventHandler(h)
	}
}

// knownNodes counts the nodes that exist (for "0/N nodes are available").
func (s *Scheduler) knownNodes() int {
	n := 0
	for _, ns := range s.cache.Summary() {
		if ns.Known {
			n++
		}
	}
	return n
}
