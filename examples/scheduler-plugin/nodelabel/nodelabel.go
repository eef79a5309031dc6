// Package nodelabel is an example scheduler plugin: NodeLabelPreference
// prefers nodes whose label has a given value (say disktype=ssd), and can
// require it. It is registered into a scheduler binary with
// app.WithPlugin (see ../main.go) and enabled by a --config profile.
package nodelabel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kplane/kplane/services/scheduler/framework"
)

// Name is the plugin's name in the registry and in profiles.
const Name = "NodeLabelPreference"

// Args are the plugin's pluginConfig args.
type Args struct {
	// Label and Value: nodes with label Label=Value score MaxNodeScore,
	// the others MinNodeScore.
	Label string `json:"label"`
	Value string `json:"value"`
	// Required also filters out the nodes without it.
	Required bool `json:"required,omitempty"`
}

// Plugin is NodeLabelPreference.
type Plugin struct{ args Args }

// New is the plugin's factory: it checks the args and names the field at
// fault.
func New(raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
	var a Args
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil {
			return nil, fmt.Errorf("args: %w", err)
		}
	}
	if a.Label == "" {
		return nil, errors.New("args.label: Required value")
	}
	return &Plugin{args: a}, nil
}

// Name implements framework.Plugin.
func (*Plugin) Name() string { return Name }

// Filter implements framework.FilterPlugin: with Required, a node without
// the label value is rejected.
func (p *Plugin) Filter(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	if p.args.Required && node.Labels[p.args.Label] != p.args.Value {
		return framework.NewStatus(framework.UnschedulableAndUnresolvable,
			fmt.Sprintf("node(s) didn't have label %s=%s", p.args.Label, p.args.Value))
	}
	return nil
}

// Score implements framework.ScorePlugin.
func (p *Plugin) Score(_ context.Context, _ *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	if node.Labels[p.args.Label] == p.args.Value {
		return framework.MaxNodeScore, nil
	}
	return framework.MinNodeScore, nil
}

// ScoreExtensions implements framework.ScorePlugin: scores are already in
// range.
func (*Plugin) ScoreExtensions() framework.ScoreExtensions { return nil }
