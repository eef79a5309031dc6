package framework

import (
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// NewPodInfo parses a pod as the scheduler does (for plugin tests).
func NewPodInfo(pod *kplanev1.Pod) (*PodInfo, error) { return core.NewPodInfo(pod) }

// NewNodeInfo returns node with pods assigned to it, as the scheduler's
// cache would hold it (for plugin tests). The pods must parse.
func NewNodeInfo(node *kplanev1.Node, pods ...*kplanev1.Pod) (*NodeInfo, error) {
	infos := make([]*PodInfo, 0, len(pods))
	for _, p := range pods {
		info, err := core.NewPodInfo(p)
		if err != nil {
			return nil, err
		}
		infos = append(infos, info)
	}
	return core.NewNodeInfo(core.NewNodeState(node), infos...), nil
}
