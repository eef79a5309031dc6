package plugins

import (
	"encoding/json"
	"fmt"

	"github.com/kplane/kplane/pkg/controller"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/labels"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"
)

// PodTopologySpread's defaulting types.
const (
	// SystemDefaulting applies Kubernetes' built-in default constraints
	// (SystemDefaultConstraints).
	SystemDefaulting = "System"
	// ListDefaulting applies args.defaultConstraints.
	ListDefaulting = "List"
)

// PodTopologySpreadArgs is PodTopologySpread's pluginConfig args, as
// kube-scheduler's: defaultConstraints apply to a pod that has no
// topologySpreadConstraints of its own and belongs to a Service,
// ReplicationController, ReplicaSet or StatefulSet; they have no
// labelSelector: the pod's owners' selectors are used.
type PodTopologySpreadArgs struct {
	DefaultConstraints []DefaultSpreadConstraint `json:"defaultConstraints,omitempty"`
	// DefaultingType is System (the default: SystemDefaultConstraints;
	// defaultConstraints must then be empty) or List.
	DefaultingType string `json:"defaultingType,omitempty"`
}

// DefaultSpreadConstraint is one default constraint.
type DefaultSpreadConstraint struct {
	MaxSkew           int32  `json:"maxSkew"`
	TopologyKey       string `json:"topologyKey"`
	WhenUnsatisfiable string `json:"whenUnsatisfiable"`
}

// SystemDefaultConstraints are Kubernetes' system defaults: spread by
// zone (maxSkew 5) and by node (maxSkew 3), both ScheduleAnyway, so they
// only score.
var SystemDefaultConstraints = []DefaultSpreadConstraint{
	{MaxSkew: 3, TopologyKey: kplanev1.LabelHostname, WhenUnsatisfiable: ScheduleAnyway},
	{MaxSkew: 5, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: ScheduleAnyway},
}

// NewPodTopologySpread is PodTopologySpread's factory: it validates args
// and, when there are default constraints and h gives informers, watches
// Services, ReplicationControllers, ReplicaSets and StatefulSets to find
// a pod's default selector.
func NewPodTopologySpread(raw json.RawMessage, h framework.Handle) (framework.Plugin, error) {
	var args PodTopologySpreadArgs
	if err := strictJSON(raw, &args); err != nil {
		return nil, err
	}
	defaults, err := validateSpreadArgs(args)
	if err != nil {
		return nil, err
	}
	p := PodTopologySpread{systemDefaults: args.DefaultingType != ListDefaulting, matching: newMatchCounts()}
	if len(defaults) == 0 || h == nil {
		return p, nil
	}
	for _, d := range defaults {
		p.defaults = append(p.defaults, &kplanev1.TopologySpreadConstraint{MaxSkew: d.MaxSkew, TopologyKey: d.TopologyKey, WhenUnsatisfiable: d.WhenUnsatisfiable})
	}
	sel := &ownerSelectors{services: h.Informer("Service"), rcs: h.Informer("ReplicationController"),
		rss: h.Informer("ReplicaSet"), sets: h.Informer("StatefulSet")}
	p.defaultSelector = sel.selector
	return p, nil
}

func validateSpreadArgs(args PodTopologySpreadArgs) ([]DefaultSpreadConstraint, error) {
	switch args.DefaultingType {
	case "", SystemDefaulting:
		if len(args.DefaultConstraints) > 0 {
			return nil, fmt.Errorf(`args.defaultConstraints: Invalid value: %d constraints: must be empty when .defaultingType is "System"`, len(args.DefaultConstraints))
		}
		return SystemDefaultConstraints, nil
	case ListDefaulting:
	default:
		return nil, fmt.Errorf("args.defaultingType: Unsupported value: %q: supported values: %q, %q", args.DefaultingType, SystemDefaulting, ListDefaulting)
	}
	seen := map[[2]string]bool{}
	for i, c := range args.DefaultConstraints {
		f := fmt.Sprintf("args.defaultConstraints[%d]", i)
		switch {
		case c.MaxSkew <= 0:
			return nil, fmt.Errorf("%s.maxSkew: Invalid value: %d: must be greater than zero", f, c.MaxSkew)
		case c.TopologyKey == "":
			return nil, fmt.Errorf("%s.topologyKey: Required value: can not be empty", f)
		case c.WhenUnsatisfiable != DoNotSchedule && c.WhenUnsatisfiable != ScheduleAnyway:
			return nil, fmt.Errorf("%s.whenUnsatisfiable: Unsupported value: %q: supported values: %q, %q", f, c.WhenUnsatisfiable, DoNotSchedule, ScheduleAnyway)
		}
		k := [2]string{c.TopologyKey, c.WhenUnsatisfiable}
		if seen[k] {
			return nil, fmt.Errorf("%s: Duplicate value: {%s, %s}", f, c.TopologyKey, c.WhenUnsatisfiable)
		}
		seen[k] = true
	}
	return args.DefaultConstraints, nil
}

// ownerSelectors computes a pod's default selector from the informers
// (Kubernetes' helper.DefaultSelector).
type ownerSelectors struct {
	services, rcs, rss, sets *informer.Informer
}

// selector returns what selects the pod's group: the selectors of the
// Services selecting it and of its controlling ReplicationController,
// ReplicaSet or StatefulSet, combined (every requirement must hold).
// Empty when it belongs to none.
func (o *ownerSelectors) selector(pod *kplanev1.Pod) labels.Selector {
	ns := pod.GetMetadata().GetNamespace()
	podLabels := pod.GetMetadata().GetLabels()
	set := map[string]string{}
	svcs, _ := o.services.Store().ByIndex(informer.NamespaceIndex, ns)
	for _, obj := range svcs {
		sel := obj.GetService().GetSpec().GetSelector()
		if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(podLabels) {
			for k, v := range sel {
				set[k] = v
			}
		}
	}
	var extra *kplanev1.LabelSelector
	if ref := controller.ControllerRef(pod.GetMetadata()); ref != nil {
		switch ref.GetKind() {
		case "ReplicationController":
			if obj, ok := o.rcs.Store().GetByName(ns, ref.GetName()); ok {
				for k, v := range obj.GetReplicationController().GetSpec().GetSelector() {
					set[k] = v
				}
			}
		case "ReplicaSet":
			if obj, ok := o.rss.Store().GetByName(ns, ref.GetName()); ok {
				extra = obj.GetReplicaSet().GetSpec().GetSelector()
			}
		case "StatefulSet":
			if obj, ok := o.sets.Store().GetByName(ns, ref.GetName()); ok {
				extra = obj.GetStatefulSet().GetSpec().GetSelector()
			}
		}
	}
	reqs, _ := labels.Requirements(labels.SelectorFromSet(set))
	if extra != nil {
		sel, err := labels.FromLabelSelector(extra)
		if err != nil {
			return labels.Nothing()
		}
		more, _ := labels.Requirements(sel)
		reqs = append(reqs, more...)
	}
	return labels.New(reqs...)
}
