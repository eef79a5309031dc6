package e2e

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// BenchmarkStatefulSet100 (make bench-sets) measures, with real processes
// (apiserver, statefulsetctl, the scheduler, ipamctl and a node agent
// faking 20 nodes), a StatefulSet of 100 replicas without claims whose pods turn Ready
// 100ms after they start: the time until all 100 are Ready under
// OrderedReady (one ordinal at a time) and under Parallel, and a rolling
// update of the Parallel set with maxUnavailable 10.
func BenchmarkStatefulSet100(b *testing.B) {
	const n = 100
	for range b.N {
		needBinaries(b, "statefulsetctl", "nodeagent", "scheduler", "ipamctl")
		c := startCluster(b)
		c.startController("statefulsetctl", "statefulsetctl", "--log-level", "warn")
		c.startController("scheduler", "scheduler", "--log-level", "warn")
		c.startController("ipamctl", "ipamctl", "--log-level", "warn")
		c.startController("nodeagent", "nodeagent", "--runtime", "fake", "--fake-nodes", "20", "--node-name", "fake",
			"--root-dir", b.TempDir(), "--log-level", "warn", "--logs-addr", freeAddrB(b))
		for _, policy := range []string{kplanev1.PodManagementOrderedReady, kplanev1.PodManagementParallel} {
			name := map[string]string{kplanev1.PodManagementOrderedReady: "ord", kplanev1.PodManagementParallel: "par"}[policy]
			l := map[string]string{"app": name}
			ss := &kplanev1.StatefulSet{Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default"}, Spec: &kplanev1.StatefulSetSpec{
				Replicas: proto.Int32(n), PodManagementPolicy: policy, Selector: &kplanev1.LabelSelector{MatchLabels: l},
				UpdateStrategy: &kplanev1.StatefulSetUpdateStrategy{Type: kplanev1.UpdateStrategyRollingUpdate,
					RollingUpdate: &kplanev1.RollingUpdateStatefulSetStrategy{MaxUnavailable: kplanev1.IntOrStringFromInt32(10)}},
				Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: l, Annotations: map[string]string{annotationStartDelay: "100ms"}},
					Spec: &kplanev1.PodSpec{TerminationGracePeriodSeconds: proto.Int64(0), Containers: []*kplanev1.Container{{Name: "app", Image: "bench:1"}}}}}}
			start := time.Now()
			if _, err := c.api.Create(c.ctx(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(ss)}); err != nil {
				b.Fatal(err)
			}
			c.stsReady(name, n, 10*time.Minute)
			took := time.Since(start)
			b.ReportMetric(took.Seconds(), "s/"+name+"-create")
			fmt.Printf("statefulset %s: %d replicas Ready after %v (%.1f pods/s)\n", policy, n, took.Round(time.Millisecond), float64(n)/took.Seconds())
			if policy != kplanev1.PodManagementParallel {
				continue
			}
			resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "StatefulSet", Namespace: "default", Name: name})
			if err != nil {
				b.Fatal(err)
			}
			cur := resp.GetObject().GetStatefulSet()
			cur.Spec.Template.Spec.Containers[0].Image = "bench:2"
			start = time.Now()
			if _, err := c.api.Update(c.ctx(), &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(cur)}); err != nil {
				b.Fatal(err)
			}
			c.stsReady(name, n, 10*time.Minute)
			took = time.Since(start)
			b.ReportMetric(took.Seconds(), "s/rolling-update")
			fmt.Printf("statefulset Parallel rolling update of %d pods, maxUnavailable 10: %v (%.1f pods replaced/s)\n", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
		}
	}
}

// BenchmarkDaemonSet50 (make bench-sets) measures a DaemonSet on 50 fake
// nodes: the time until every node has a Ready pod, and a rolling update
// with maxUnavailable 5.
func BenchmarkDaemonSet50(b *testing.B) {
	const nodes = 50
	for range b.N {
		needBinaries(b, "daemonsetctl", "scheduler", "nodeagent", "ipamctl")
		c := startCluster(b)
		c.startController("daemonsetctl", "daemonsetctl", "--log-level", "warn")
		c.startController("scheduler", "scheduler", "--log-level", "warn")
		c.startController("ipamctl", "ipamctl", "--log-level", "warn")
		c.startController("nodeagent", "nodeagent", "--runtime", "fake", "--fake-nodes", fmt.Sprint(nodes), "--node-name", "fake",
			"--root-dir", b.TempDir(), "--log-level", "warn", "--logs-addr", freeAddrB(b))
		c.eventually(time.Minute, func() string {
			resp, err := c.api.List(c.ctx(), &kplanev1.ListRequest{Kind: "Node"})
			if err != nil || len(resp.GetItems()) != nodes {
				return fmt.Sprintf("nodes: %d, %v", len(resp.GetItems()), err)
			}
			return ""
		})
		l := map[string]string{"app": "bench"}
		ds := &kplanev1.DaemonSet{Metadata: &kplanev1.ObjectMeta{Name: "bench", Namespace: "default"}, Spec: &kplanev1.DaemonSetSpec{
			Selector: &kplanev1.LabelSelector{MatchLabels: l},
			UpdateStrategy: &kplanev1.DaemonSetUpdateStrategy{Type: kplanev1.UpdateStrategyRollingUpdate,
				RollingUpdate: &kplanev1.RollingUpdateDaemonSet{MaxUnavailable: kplanev1.IntOrStringFromInt32(5)}},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: l, Annotations: map[string]string{annotationStartDelay: "100ms"}},
				Spec: &kplanev1.PodSpec{TerminationGracePeriodSeconds: proto.Int64(0), Containers: []*kplanev1.Container{{Name: "app", Image: "bench:1"}}}}}}
		start := time.Now()
		if _, err := c.api.Create(c.ctx(), &kplanev1.CreateRequest{Object: kplanev1.MustWrap(ds)}); err != nil {
			b.Fatal(err)
		}
		var names []string
		for i := range nodes {
			names = append(names, fmt.Sprintf("fake-%d", i))
		}
		c.eventually(10*time.Minute, c.daemonOn("bench", names...))
		took := time.Since(start)
		b.ReportMetric(took.Seconds(), "s/create")
		fmt.Printf("daemonset on %d fake nodes: every node Ready after %v\n", nodes, took.Round(time.Millisecond))
		resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "DaemonSet", Namespace: "default", Name: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		cur := resp.GetObject().GetDaemonSet()
		cur.Spec.Template.Spec.Containers[0].Image = "bench:2"
		start = time.Now()
		if _, err := c.api.Update(c.ctx(), &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(cur)}); err != nil {
			b.Fatal(err)
		}
		c.eventually(10*time.Minute, c.daemonOn("bench", names...))
		took = time.Since(start)
		b.ReportMetric(took.Seconds(), "s/rolling-update")
		fmt.Printf("daemonset rolling update on %d nodes, maxUnavailable 5: %v\n", nodes, took.Round(time.Millisecond))
	}
}

// stsReady waits until the set has n Ready replicas at its update
// revision (the rollout complete).
func (c *cluster) stsReady(name string, n int32, d time.Duration) {
	c.eventually(d, func() string {
		resp, err := c.api.Get(c.ctx(), &kplanev1.GetRequest{Kind: "StatefulSet", Namespace: "default", Name: name})
		if err != nil {
			return err.Error()
		}
		ss := resp.GetObject().GetStatefulSet()
		st := ss.GetStatus()
		if st.GetObservedGeneration() != ss.GetMetadata().GetGeneration() || st.GetReadyReplicas() != n || st.GetUpdatedReplicas() != n ||
			st.GetReplicas() != n || st.GetCurrentRevision() != st.GetUpdateRevision() {
			return fmt.Sprintf("status %v", st)
		}
		return ""
	})
}

func freeAddrB(b *testing.B) string {
	b.Helper()
	a, err := launcherFreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	return a
}
