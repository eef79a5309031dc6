package core

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// clusterModel is the world the scheduler's cache is driven against: the
// apiserver's truth about pods (which node each is bound to) and nodes,
// plus the binds in flight and the watch events not yet delivered. Every
// step is one thing that can happen in a real cluster, in any order.
type clusterModel struct {
	cache *Cache
	nodes map[string]*kplanev1.Node // present nodes
	// pods by uid, as the apiserver has them.
	pods map[string]*kplanev1.Pod
	// pending lists pods waiting to be scheduled; inflight maps uid to the
	// node of a bind being written; unconfirmed lists bound pods the
	// cache has not seen through the watch yet.
	pending     []string
	inflight    map[string]string
	unconfirmed []string
	next        int
}

// allocatable of node i is fixed, so a node that comes back is the same size.
func modelNode(i int) *kplanev1.Node {
	n := testNode(fmt.Sprintf("node-%d", i), fmt.Sprintf("%dm", 500+700*i), fmt.Sprintf("%dMi", 256+300*i), 2+i%3)
	return n
}

func (m *clusterModel) check(t *rapid.T) {
	// Every pod the scheduler committed (bound or being bound) counts.
	used := map[string]Resources{}
	for uid, p := range m.pods {
		node := p.Spec.NodeName
		if node == "" {
			node = m.inflight[uid]
		}
		if node == "" {
			continue
		}
		req, _, _ := PodRequests(p.Spec)
		used[node] = used[node].Add(req)
	}
	sum := m.cache.Summary()
	for name, n := range m.nodes {
		alloc := NewNodeState(n).Allocatable
		u := used[name]
		if u.MilliCPU > alloc.MilliCPU || u.Memory > alloc.Memory || u.Pods > alloc.Pods {
			t.Fatalf("node %s over-committed: %+v > allocatable %+v", name, u, alloc)
		}
		if sum[name].Requested != u {
			t.Fatalf("node %s: cache accounts %+v, committed %+v", name, sum[name].Requested, u)
		}
	}
}

func (m *clusterModel) popRandom(t *rapid.T, list *[]string, label string) (string, bool) {
	if len(*list) == 0 {
		return "", false
	}
	i := rapid.IntRange(0, len(*list)-1).Draw(t, label)
	uid := (*list)[i]
	*list = slices.Delete(*list, i, i+1)
	return uid, true
}

func TestPropertyNoNodeIsOverCommitted(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &clusterModel{
			cache:    NewCache(0, nil, rapid.Uint64().Draw(t, "seed")),
			nodes:    map[string]*kplanev1.Node{},
			pods:     map[string]*kplanev1.Pod{},
			inflight: map[string]string{},
		}
		t.Repeat(map[string]func(*rapid.T){
			"addNode": func(t *rapid.T) {
				n := modelNode(rapid.IntRange(0, 5).Draw(t, "node"))
				if _, ok := m.nodes[n.Metadata.Name]; ok {
					t.Skip("present")
				}
				m.nodes[n.Metadata.Name] = n
				m.cache.SetNode(n)
			},
			"removeNode": func(t *rapid.T) {
				name := fmt.Sprintf("node-%d", rapid.IntRange(0, 5).Draw(t, "node"))
				if _, ok := m.nodes[name]; !ok {
					t.Skip("absent")
				}
				delete(m.nodes, name)
				m.cache.RemoveNode(name)
			},
			"flipNode": func(t *rapid.T) {
				name := fmt.Sprintf("node-%d", rapid.IntRange(0, 5).Draw(t, "node"))
				n, ok := m.nodes[name]
				if !ok {
					t.Skip("absent")
				}
				if rapid.Bool().Draw(t, "cordon") {
					n.Spec.Unschedulable = !n.Spec.Unschedulable
				} else if n.Status.Conditions[0].Status == "True" {
					n.Status.Conditions[0].Status = "Unknown"
				} else {
					n.Status.Conditions[0].Status = "True"
				}
				m.cache.SetNode(n)
			},
			"createPod": func(t *rapid.T) {
				m.next++
				var reqs [][2]string
				for range rapid.IntRange(0, 3).Draw(t, "containers") {
					cpu, mem := "", ""
					if rapid.Bool().Draw(t, "hasCPU") {
						cpu = fmt.Sprintf("%dm", rapid.IntRange(1, 1500).Draw(t, "cpu"))
					}
					if rapid.Bool().Draw(t, "hasMem") {
						mem = fmt.Sprintf("%dMi", rapid.IntRange(1, 800).Draw(t, "mem"))
					}
					reqs = append(reqs, [2]string{cpu, mem})
				}
				p := testPod(fmt.Sprintf("p%d", m.next), reqs...)
				if rapid.Bool().Draw(t, "owned") {
					ownedBy(fmt.Sprintf("rs-%d", rapid.IntRange(0, 2).Draw(t, "owner")), p)
				}
				m.pods[p.Metadata.Uid] = p
				m.pending = append(m.pending, p.Metadata.Uid)
			},
			"schedule": func(t *rapid.T) {
				uid, ok := m.popRandom(t, &m.pending, "pending")
				if !ok {
					t.Skip("nothing pending")
				}
				node, err := m.cache.ScheduleDefault(mustInfo(m.pods[uid]))
				if err != nil {
					if _, fit := err.(*FitError); !fit {
						t.Fatalf("schedule: %v", err)
					}
					m.pending = append(m.pending, uid) // retried later
					return
				}
				if _, ok := m.nodes[node]; !ok {
					t.Fatalf("scheduled onto %s, which is not a node", node)
				}
				m.inflight[uid] = node
			},
			"bindResult": func(t *rapid.T) {
				uids := slices.Sorted(mapKeys(m.inflight))
				if len(uids) == 0 {
					t.Skip("no bind in flight")
				}
				uid := rapid.SampledFrom(uids).Draw(t, "bind")
				node := m.inflight[uid]
				delete(m.inflight, uid)
				if rapid.Bool().Draw(t, "conflict") {
					m.cache.Forget(uid)
					m.pending = append(m.pending, uid)
					return
				}
				m.pods[uid].Spec.NodeName = node
				m.cache.FinishBinding(uid)
				m.unconfirmed = append(m.unconfirmed, uid)
			},
			"watchConfirms": func(t *rapid.T) {
				uid, ok := m.popRandom(t, &m.unconfirmed, "unconfirmed")
				if !ok {
					t.Skip("nothing to confirm")
				}
				m.cache.SyncPod(m.pods[uid])
			},
			"deletePod": func(t *rapid.T) {
				var bound []string
				for uid, p := range m.pods {
					if p.Spec.NodeName != "" {
						bound = append(bound, uid)
					}
				}
				if len(bound) == 0 {
					t.Skip("no bound pod")
				}
				slices.Sort(bound)
				uid := rapid.SampledFrom(bound).Draw(t, "delete")
				p := m.pods[uid]
				delete(m.pods, uid)
				m.unconfirmed = slices.DeleteFunc(m.unconfirmed, func(u string) bool { return u == uid })
				if rapid.Bool().Draw(t, "finishes") {
					p.Status = &kplanev1.PodStatus{Phase: "Succeeded"}
					m.cache.SyncPod(p)
				} else {
					m.cache.RemovePod(p)
				}
			},
			"": m.check,
		})
	})
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
