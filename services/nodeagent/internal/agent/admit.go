package agent

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// ReasonOutOfPods is the kubelet's reason for a pod it refused because its
// node already runs --max-pods pods.
const ReasonOutOfPods = "OutOfpods"

// admission is the kubelet's pod-count admission, per node: a pod bound
// to a node that already runs --max-pods pods (not finished) is refused
// before anything is set up for it, and fails with OutOfpods. The
// scheduler honours the same count (the Node's allocatable pods), so only
// a pod bound past it (by hand, or by a scheduler that ignored it) meets
// this. Fake nodes count as real ones.
type admission struct {
	admitted map[string]string            // uid -> node
	byNode   map[string]map[string]string // node -> uid -> pod key
}

// admit decides whether pod may run on its node and records it; nil
// means yes. Pods admitted before, finished pods and pods that already
// ran (the agent restarted) pass without counting.
func (a *Agent) admit(pod *kplanev1.Pod) *podFailure {
	md := pod.GetMetadata()
	uid, node := md.GetUid(), pod.GetSpec().GetNodeName()
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.adm.admitted[uid]; ok {
		return nil
	}
	st := pod.GetStatus()
	if st.GetPhase() == kplanev1.PodFailed && st.GetReason() == ReasonOutOfPods {
		return &podFailure{reason: st.GetReason(), message: st.GetMessage()} // refused before: stays so
	}
	// Fewer pods admitted to the node than --max-pods leaves room whatever
	// their phases: only a full node needs its pods looked up and counted
	// (at 100 pods a node, counting for every new pod was a quarter of a
	// fake node agent's CPU).
	if !apiutil.IsTerminalPhase(st.GetPhase()) && len(st.GetContainerStatuses()) == 0 && len(a.adm.byNode[node]) >= a.cfg.MaxPods {
		used := 0
		for _, key := range a.adm.byNode[node] {
			if o, ok := a.pods.Store().Get(key); ok && !apiutil.IsPodTerminal(o.GetPod()) {
				used++
			}
		}
		if used >= a.cfg.MaxPods {
			return &podFailure{reason: ReasonOutOfPods,
				message: fmt.Sprintf("Node didn't have enough resource: pods, requested: 1, used: %d, capacity: %d", used, a.cfg.MaxPods)}
		}
	}
	a.admitLocked(uid, node, md.GetNamespace()+"/"+md.GetName())
	return nil
}

// admitLocked records an admitted pod; callers hold a.mu.
func (a *Agent) admitLocked(uid, node, key string) {
	a.adm.admitted[uid] = node
	if a.adm.byNode[node] == nil {
		a.adm.byNode[node] = map[string]string{}
	}
	a.adm.byNode[node][uid] = key
}

// forgetAdmittedLocked drops a pod the runtime no longer holds; callers
// hold a.mu.
func (a *Agent) forgetAdmittedLocked(uid string) {
	node, ok := a.adm.admitted[uid]
	if !ok {
		return
	}
	delete(a.adm.admitted, uid)
	delete(a.adm.byNode[node], uid)
	if len(a.adm.byNode[node]) == 0 {
		delete(a.adm.byNode, node)
	}
}

// refusedStatus is the status of a pod admission refused: Failed with
// the reason, nothing else changed.
func refusedStatus(pod *kplanev1.Pod, f *podFailure) *kplanev1.PodStatus {
	st, _ := proto.Clone(pod.GetStatus()).(*kplanev1.PodStatus)
	if st == nil {
		st = &kplanev1.PodStatus{}
	}
	st.Phase, st.Reason, st.Message = kplanev1.PodFailed, f.reason, f.message
	return st
}
