package plugins

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/internal/core"
)

// Scoring strategies of NodeResourcesFit, as Kubernetes names them.
const (
	LeastAllocated           = "LeastAllocated"
	MostAllocated            = "MostAllocated"
	RequestedToCapacityRatio = "RequestedToCapacityRatio"
)

// NodeResourcesFitArgs are NodeResourcesFit's pluginConfig args.
type NodeResourcesFitArgs struct {
	ScoringStrategy *ScoringStrategy `json:"scoringStrategy,omitempty"`
}

// ScoringStrategy says how NodeResourcesFit scores.
type ScoringStrategy struct {
	Type                     string               `json:"type,omitempty"`
	Resources                []ResourceSpec       `json:"resources,omitempty"`
	RequestedToCapacityRatio *RequestedToCapacity `json:"requestedToCapacityRatio,omitempty"`
}

// ResourceSpec is a resource (cpu or memory) and its weight in the score.
type ResourceSpec struct {
	Name   string `json:"name"`
	Weight int64  `json:"weight,omitempty"`
}

// RequestedToCapacity is the utilization → score curve.
type RequestedToCapacity struct {
	Shape []UtilizationShapePoint `json:"shape"`
}

// UtilizationShapePoint is one point of the curve: utilization in
// 0..100 percent, score in 0..10 (scaled to 0..100 like Kubernetes).
type UtilizationShapePoint struct {
	Utilization int32 `json:"utilization"`
	Score       int32 `json:"score"`
}

// NodeResourcesFit rejects nodes without room for the pod's requests and
// scores by the configured strategy (LeastAllocated by default).
type NodeResourcesFit struct {
	strategy  string
	resources []ResourceSpec
	shape     []UtilizationShapePoint
}

// NewNodeResourcesFit is NodeResourcesFit's factory; it validates args.
func NewNodeResourcesFit(raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
	var args NodeResourcesFitArgs
	if err := strictJSON(raw, &args); err != nil {
		return nil, err
	}
	p := &NodeResourcesFit{strategy: LeastAllocated, resources: []ResourceSpec{{core.ResourceCPU, 1}, {core.ResourceMemory, 1}}}
	s := args.ScoringStrategy
	if s == nil {
		return p, nil
	}
	switch s.Type {
	case "":
	case LeastAllocated, MostAllocated, RequestedToCapacityRatio:
		p.strategy = s.Type
	default:
		return nil, fmt.Errorf("args.scoringStrategy.type: Unsupported value: %q: supported values: %q, %q, %q", s.Type, LeastAllocated, MostAllocated, RequestedToCapacityRatio)
	}
	if len(s.Resources) > 0 {
		p.resources = nil
		for i, r := range s.Resources {
			if r.Name != core.ResourceCPU && r.Name != core.ResourceMemory {
				return nil, fmt.Errorf("args.scoringStrategy.resources[%d].name: Unsupported value: %q: supported values: \"cpu\", \"memory\"", i, r.Name)
			}
			if r.Weight == 0 {
				r.Weight = 1
			}
			if r.Weight < 1 || r.Weight > 100 {
				return nil, fmt.Errorf("args.scoringStrategy.resources[%d].weight: Invalid value: %d: must be in 1..100", i, r.Weight)
			}
			p.resources = append(p.resources, r)
		}
	}
	if p.strategy == RequestedToCapacityRatio {
		if s.RequestedToCapacityRatio == nil || len(s.RequestedToCapacityRatio.Shape) == 0 {
			return nil, fmt.Errorf("args.scoringStrategy.requestedToCapacityRatio.shape: Required value: at least one point")
		}
		for i, pt := range s.RequestedToCapacityRatio.Shape {
			f := fmt.Sprintf("args.scoringStrategy.requestedToCapacityRatio.shape[%d]", i)
			if pt.Utilization < 0 || pt.Utilization > 100 {
				return nil, fmt.Errorf("%s.utilization: Invalid value: %d: must be in 0..100", f, pt.Utilization)
			}
			if pt.Score < 0 || pt.Score > 10 {
				return nil, fmt.Errorf("%s.score: Invalid value: %d: must be in 0..10", f, pt.Score)
			}
			if i > 0 && pt.Utilization <= s.RequestedToCapacityRatio.Shape[i-1].Utilization {
				return nil, fmt.Errorf("%s.utilization: Invalid value: %d: utilization values must be sorted in increasing order", f, pt.Utilization)
			}
		}
		p.shape = s.RequestedToCapacityRatio.Shape
	} else if s.RequestedToCapacityRatio != nil {
		return nil, fmt.Errorf("args.scoringStrategy.requestedToCapacityRatio: Forbidden: only for type %q", RequestedToCapacityRatio)
	}
	return p, nil
}

func strictJSON(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytesReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("args: %w", err)
	}
	return nil
}

// Name implements framework.Plugin.
func (*NodeResourcesFit) Name() string { return NodeResourcesFitName }

// Filter implements framework.FilterPlugin.
func (*NodeResourcesFit) Filter(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	return status(core.FilterResources(pod, node))
}

// Score implements framework.ScorePlugin: the weighted mean over the
// configured resources of the strategy's per-resource score, after
// placing the pod (containers without requests count with the defaults).
func (p *NodeResourcesFit) Score(_ context.Context, _ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	after := node.NonZeroRequested.Add(pod.NonZero)
	var sum, weights int64
	for _, r := range p.resources {
		req, alloc := after.MilliCPU, node.Allocatable.MilliCPU
		if r.Name == core.ResourceMemory {
			req, alloc = after.Memory, node.Allocatable.Memory
		}
		sum += r.Weight * p.resourceScore(req, alloc)
		weights += r.Weight
	}
	if weights == 0 {
		return 0, nil
	}
	return sum / weights, nil
}

func (p *NodeResourcesFit) resourceScore(requested, allocatable int64) int64 {
	if allocatable <= 0 {
		return 0
	}
	switch p.strategy {
	case MostAllocated:
		if requested > allocatable {
			return 0
		}
		return requested * framework.MaxNodeScore / allocatable
	case RequestedToCapacityRatio:
		return p.shapeScore(min(requested*100/allocatable, 100))
	}
	if requested > allocatable {
		return 0
	}
	return (allocatable - requested) * framework.MaxNodeScore / allocatable
}

// shapeScore interpolates the curve at utilization u (percent): flat
// before the first point and after the last, linear between points.
func (p *NodeResourcesFit) shapeScore(u int64) int64 {
	scale := int64(framework.MaxNodeScore / 10)
	first, last := p.shape[0], p.shape[len(p.shape)-1]
	if u <= int64(first.Utilization) {
		return int64(first.Score) * scale
	}
	for i := 1; i < len(p.shape); i++ {
		a, b := p.shape[i-1], p.shape[i]
		if u <= int64(b.Utilization) {
			du := int64(b.Utilization - a.Utilization)
			ds := int64(b.Score-a.Score) * scale
			return int64(a.Score)*scale + ds*(u-int64(a.Utilization))/du
		}
	}
	return int64(last.Score) * scale
}

// ScoreExtensions implements framework.ScorePlugin.
func (*NodeResourcesFit) ScoreExtensions() framework.ScoreExtensions { return nil }
