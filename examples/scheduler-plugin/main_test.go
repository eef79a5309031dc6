package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	kapp "github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	"github.com/kplane/kplane/services/scheduler/app"

	"github.com/kplane/kplane/examples/scheduler-plugin/nodelabel"
)

// The custom binary's scheduler with config.yaml, against a real
// apiserver: ssd-scheduler pods all land on the one ssd node of three
// (weight 10 beats spreading), default-scheduler pods spread.
func TestCustomSchedulerPlacesBySSDLabel(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	for i, disk := range []string{"hdd", "ssd", "hdd"} {
		alloc := map[string]string{"cpu": "8", "memory": "16Gi", "pods": "110"}
		n := &kplanev1.Node{
			Metadata: &kplanev1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), Labels: map[string]string{"disktype": disk}},
			Spec:     &kplanev1.NodeSpec{},
			Status: &kplanev1.NodeStatus{Allocatable: alloc, Capacity: alloc,
				Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True", Reason: "KubeletReady"}}},
		}
		created, err := client.Nodes(c).Create(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		created.Status = n.Status
		if _, err := client.Nodes(c).UpdateStatus(ctx, created); err != nil {
			t.Fatal(err)
		}
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- kapp.Run(sctx, app.NewService(app.WithPlugin(nodelabel.Name, nodelabel.New)), []string{
			"--apiserver", srv.Addr(), "--health-addr", "127.0.0.1:0", "--log-level", "warn", "--id", "example",
			"--leader-elect-retry-period", "200ms", "--shutdown-grace-period", "1s",
			"--config", filepath.Join(".", "config.yaml"),
		})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("scheduler: %v", err)
		}
	}()
	mk := func(name, scheduler string) {
		p := &kplanev1.Pod{
			Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: &kplanev1.PodSpec{SchedulerName: scheduler, Containers: []*kplanev1.Container{{Name: "c", Image: "busybox",
				Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "100m", "memory": "64Mi"}}}}},
		}
		if _, err := client.Pods(c).Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		mk(fmt.Sprintf("fast-%d", i), "ssd-scheduler")
	}
	nodeOf := func(name string) string {
		var node string
		testutil.Eventually(t, 20*time.Second, name+" bound", func() bool {
			p, err := client.Pods(c).Get(ctx, "default", name)
			node = p.GetSpec().GetNodeName()
			return err == nil && node != ""
		})
		return node
	}
	for i := range 4 {
		if got := nodeOf(fmt.Sprintf("fast-%d", i)); got != "node-1" {
			t.Errorf("fast-%d on %s, want the ssd node node-1", i, got)
		}
	}
	// The default profile does not prefer ssd: with node-1 the fullest,
	// the next default pod goes elsewhere.
	mk("plain", "")
	if got := nodeOf("plain"); got == "node-1" {
		t.Errorf("default-scheduler pod went to the ssd node; the plugin must only be in ssd-scheduler")
	}
}
