package framework

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"

	"sigs.k8s.io/yaml"
)

// Config file identity, as kube-scheduler's.
const (
	ConfigAPIVersion = "kubescheduler.config.k8s.io/v1"
	ConfigKind       = "KubeSchedulerConfiguration"
	// DefaultSchedulerName is the profile pods get when they name none.
	DefaultSchedulerName = "default-scheduler"
	// MaxWeight is the largest Score weight a profile may give.
	MaxWeight = 100
)

// Configuration is the --config file: KubeSchedulerConfiguration's
// shape, the fields kplane's scheduler reads.
type Configuration struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// PercentageOfNodesToScore is, as in Kubernetes, the share of the
	// nodes (0-100) a scheduling cycle looks at once at least 100 nodes
	// are feasible: filtering stops when that many feasible nodes are
	// found (starting where the previous cycle stopped) and only they
	// are scored. Unset or 0 is adaptive: 50% minus 1% per 125 nodes, at
	// least 5%; 100 looks at every node.
	PercentageOfNodesToScore *int32    `json:"percentageOfNodesToScore,omitempty"`
	Profiles                 []Profile `json:"profiles,omitempty"`
}

// Profile is one schedulerName and its plugins.
type Profile struct {
	SchedulerName string         `json:"schedulerName,omitempty"`
	Plugins       *Plugins       `json:"plugins,omitempty"`
	PluginConfig  []PluginConfig `json:"pluginConfig,omitempty"`
}

// Plugins enables and disables plugins per extension point. MultiPoint
// enables a plugin at every extension point it implements.
type Plugins struct {
	MultiPoint PluginSet `json:"multiPoint,omitempty"`
	QueueSort  PluginSet `json:"queueSort,omitempty"`
	PreFilter  PluginSet `json:"preFilter,omitempty"`
	Filter     PluginSet `json:"filter,omitempty"`
	PostFilter PluginSet `json:"postFilter,omitempty"`
	PreScore   PluginSet `json:"preScore,omitempty"`
	Score      PluginSet `json:"score,omitempty"`
	Reserve    PluginSet `json:"reserve,omitempty"`
	Permit     PluginSet `json:"permit,omitempty"`
	PreBind    PluginSet `json:"preBind,omitempty"`
	Bind       PluginSet `json:"bind,omitempty"`
	PostBind   PluginSet `json:"postBind,omitempty"`
}

// PluginSet is what to enable (appended after the defaults that remain,
// in this order) and what to disable ("*" disables every default) at one
// extension point.
type PluginSet struct {
	Enabled  []PluginRef `json:"enabled,omitempty"`
	Disabled []PluginRef `json:"disabled,omitempty"`
}

// PluginRef names a plugin; Weight is its Score weight (Score and
// MultiPoint only; 0 means the default weight, or 1).
type PluginRef struct {
	Name   string `json:"name"`
	Weight int32  `json:"weight,omitempty"`
}

// PluginConfig is a plugin's arguments (its own JSON/YAML object).
type PluginConfig struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

// PluginFactory builds a plugin from its arguments (nil when the profile
// gives none).
type PluginFactory func(args json.RawMessage, h Handle) (Plugin, error)

// Registry maps plugin names to factories.
type Registry map[string]PluginFactory

// Merge adds other's plugins; a name in both is an error.
func (r Registry) Merge(other Registry) error {
	for name, f := range other {
		if _, ok := r[name]; ok {
			return fmt.Errorf("plugin %q is already registered", name)
		}
		r[name] = f
	}
	return nil
}

// LoadConfig reads and validates a KubeSchedulerConfiguration file.
// Unknown fields are errors, so a misspelt key is not silently ignored.
func LoadConfig(path string) (*Configuration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	return ParseConfig(data)
}

// ParseConfig parses a KubeSchedulerConfiguration (YAML or JSON). It
// checks the document's shape; plugin names are checked by NewProfiles.
func ParseConfig(data []byte) (*Configuration, error) {
	var c Configuration
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	if c.APIVersion != ConfigAPIVersion {
		return nil, fmt.Errorf("scheduler config: apiVersion: Unsupported value: %q: supported values: %q", c.APIVersion, ConfigAPIVersion)
	}
	if c.Kind != ConfigKind {
		return nil, fmt.Errorf("scheduler config: kind: Unsupported value: %q: supported values: %q", c.Kind, ConfigKind)
	}
	if p := c.PercentageOfNodesToScore; p != nil && (*p < 0 || *p > 100) {
		return nil, fmt.Errorf("scheduler config: percentageOfNodesToScore: Invalid value: %d: not in valid range [0-100]", *p)
	}
	if len(c.Profiles) == 0 {
		c.Profiles = []Profile{{SchedulerName: DefaultSchedulerName}}
	}
	seen := map[string]bool{}
	for i := range c.Profiles {
		p := &c.Profiles[i]
		if p.SchedulerName == "" {
			p.SchedulerName = DefaultSchedulerName
		}
		if seen[p.SchedulerName] {
			return nil, fmt.Errorf("scheduler config: profiles[%d].schedulerName: Duplicate value: %q", i, p.SchedulerName)
		}
		seen[p.SchedulerName] = true
		names := map[string]bool{}
		for j, pc := range p.PluginConfig {
			if names[pc.Name] {
				return nil, fmt.Errorf("scheduler config: profiles[%d].pluginConfig[%d].name: Duplicate value: %q", i, j, pc.Name)
			}
			names[pc.Name] = true
		}
	}
	return &c, nil
}

// DefaultPlugin is one plugin of the default profile: enabled at every
// extension point it implements, with its Score weight.
type DefaultPlugin struct {
	Name   string
	Weight int32
}

// extension points, in the order of Plugins' fields.
var points = []string{"queueSort", "preFilter", "filter", "postFilter", "preScore", "score", "reserve", "permit", "preBind", "bind", "postBind"}

func (p *Plugins) set(point string) PluginSet {
	if p == nil {
		return PluginSet{}
	}
	switch point {
	case "queueSort":
		return p.QueueSort
	case "preFilter":
		return p.PreFilter
	case "filter":
		return p.Filter
	case "postFilter":
		return p.PostFilter
	case "preScore":
		return p.PreScore
	case "score":
		return p.Score
	case "reserve":
		return p.Reserve
	case "permit":
		return p.Permit
	case "preBind":
		return p.PreBind
	case "bind":
		return p.Bind
	case "postBind":
		return p.PostBind
	}
	return PluginSet{}
}

func implements(pl Plugin, point string) bool {
	var ok bool
	switch point {
	case "queueSort":
		_, ok = pl.(QueueSortPlugin)
	case "preFilter":
		_, ok = pl.(PreFilterPlugin)
	case "filter":
		_, ok = pl.(FilterPlugin)
	case "postFilter":
		_, ok = pl.(PostFilterPlugin)
	case "preScore":
		_, ok = pl.(PreScorePlugin)
	case "score":
		_, ok = pl.(ScorePlugin)
	case "reserve":
		_, ok = pl.(ReservePlugin)
	case "permit":
		_, ok = pl.(PermitPlugin)
	case "preBind":
		_, ok = pl.(PreBindPlugin)
	case "bind":
		_, ok = pl.(BindPlugin)
	case "postBind":
		_, ok = pl.(PostBindPlugin)
	}
	return ok
}

// NewProfiles builds one Framework per profile of c. defaults are the
// plugins every profile starts from (the multiPoint defaults); each
// profile's multiPoint and per-point sets then disable and enable
// plugins, as kube-scheduler merges them. Every profile must end up with
// a Bind plugin, and all profiles with the same QueueSort plugin. Errors
// name the field at fault.
func NewProfiles(c *Configuration, registry Registry, defaults []DefaultPlugin, h Handle, seed uint64) (map[string]*Framework, error) {
	out := map[string]*Framework{}
	waiting := &waitingPods{pods: map[string]*waitingPod{}}
	queueSort := ""
	for i, prof := range c.Profiles {
		field := fmt.Sprintf("profiles[%d]", i)
		f, err := newFramework(prof, field, registry, defaults, h)
		if err != nil {
			return nil, err
		}
		f.waiting = waiting
		if c.PercentageOfNodesToScore != nil {
			f.percentToScore = int(*c.PercentageOfNodesToScore)
		}
		f.rnd = rand.New(rand.NewPCG(seed+uint64(i), seed^0x9e3779b97f4a7c15))
		qs := ""
		if f.queueSort != nil {
			qs = f.queueSort.Name()
		}
		if i > 0 && qs != queueSort {
			return nil, fmt.Errorf("%s.plugins.queueSort: Invalid value: %q: every profile must use the same queueSort plugin (profiles[0] uses %q)", field, qs, queueSort)
		}
		queueSort = qs
		out[prof.SchedulerName] = f
	}
	return out, nil
}

type enabled struct {
	name   string
	weight int32
}

func newFramework(prof Profile, field string, registry Registry, defaults []DefaultPlugin, h Handle) (*Framework, error) {
	args := map[string]json.RawMessage{}
	for j, pc := range prof.PluginConfig {
		if _, ok := registry[pc.Name]; !ok {
			return nil, fmt.Errorf("%s.pluginConfig[%d].name: Unsupported value: %q: not a registered plugin", field, j, pc.Name)
		}
		args[pc.Name] = pc.Args
	}
	// multiPoint: the defaults, minus its disabled, plus its enabled.
	multi := make([]enabled, 0, len(defaults))
	mp := PluginSet{}
	if prof.Plugins != nil {
		mp = prof.Plugins.MultiPoint
	}
	for _, d := range defaults {
		if !disabled(mp.Disabled, d.Name) {
			multi = append(multi, enabled{d.Name, d.Weight})
		}
	}
	for j, e := range mp.Enabled {
		if err := checkRef(registry, e, fmt.Sprintf("%s.plugins.multiPoint.enabled[%d]", field, j)); err != nil {
			return nil, err
		}
		multi = slices.DeleteFunc(multi, func(x enabled) bool { return x.name == e.Name })
		multi = append(multi, enabled{e.Name, e.Weight})
	}
	for j, d := range mp.Disabled {
		if d.Name != "*" {
			if _, ok := registry[d.Name]; !ok {
				return nil, fmt.Errorf("%s.plugins.multiPoint.disabled[%d].name: Unsupported value: %q: not a registered plugin", field, j, d.Name)
			}
		}
	}

	f := &Framework{name: prof.SchedulerName, handle: h}
	instances := map[string]Plugin{}
	get := func(name, at string) (Plugin, error) {
		if pl, ok := instances[name]; ok {
			return pl, nil
		}
		pl, err := registry[name](args[name], h)
		if err != nil {
			return nil, fmt.Errorf("%s: plugin %s: %w", field, name, err)
		}
		if pl.Name() != name {
			return nil, fmt.Errorf("%s: plugin registered as %q calls itself %q", at, name, pl.Name())
		}
		instances[name] = pl
		return pl, nil
	}
	for _, point := range points {
		set := prof.Plugins.set(point)
		var list []enabled
		for _, e := range multi {
			if disabled(set.Disabled, e.name) {
				continue
			}
			pl, err := get(e.name, field+".plugins.multiPoint")
			if err != nil {
				return nil, err
			}
			if implements(pl, point) {
				list = append(list, e)
			}
		}
		for j, e := range set.Enabled {
			at := fmt.Sprintf("%s.plugins.%s.enabled[%d]", field, point, j)
			if err := checkRef(registry, e, at); err != nil {
				return nil, err
			}
			if e.Weight != 0 && point != "score" {
				return nil, fmt.Errorf("%s.weight: Invalid value: %d: only score plugins have a weight", at, e.Weight)
			}
			pl, err := get(e.Name, at)
			if err != nil {
				return nil, err
			}
			if !implements(pl, point) {
				return nil, fmt.Errorf("%s.name: Invalid value: %q: the plugin does not implement %s", at, e.Name, point)
			}
			list = slices.DeleteFunc(list, func(x enabled) bool { return x.name == e.Name })
			list = append(list, enabled{e.Name, e.Weight})
		}
		for j, d := range set.Disabled {
			if d.Name == "*" {
				continue
			}
			if _, ok := registry[d.Name]; !ok {
				return nil, fmt.Errorf("%s.plugins.%s.disabled[%d].name: Unsupported value: %q: not a registered plugin", field, point, j, d.Name)
			}
		}
		for _, e := range list {
			if err := f.add(point, instances[e.name], e.weight); err != nil {
				return nil, fmt.Errorf("%s.plugins.%s: %w", field, point, err)
			}
		}
	}
	if len(f.bind) == 0 {
		return nil, fmt.Errorf("%s.plugins.bind: Required value: at least one bind plugin is needed", field)
	}
	for name := range args {
		if _, ok := instances[name]; !ok {
			return nil, fmt.Errorf("%s.pluginConfig: Invalid value: %q: arguments for a plugin the profile does not enable", field, name)
		}
	}
	return f, nil
}

func checkRef(registry Registry, e PluginRef, at string) error {
	if _, ok := registry[e.Name]; !ok {
		return fmt.Errorf("%s.name: Unsupported value: %q: not a registered plugin", at, e.Name)
	}
	if e.Weight < 0 || e.Weight > MaxWeight {
		return fmt.Errorf("%s.weight: Invalid value: %d: must be in 0..%d", at, e.Weight, MaxWeight)
	}
	return nil
}

func disabled(list []PluginRef, name string) bool {
	for _, d := range list {
		if d.Name == "*" || d.Name == name {
			return true
		}
	}
	return false
}

func (f *Framework) add(point string, pl Plugin, weight int32) error {
	switch point {
	case "queueSort":
		if f.queueSort != nil {
			return errors.New("only one queueSort plugin may be enabled")
		}
		f.queueSort = pl.(QueueSortPlugin)
	case "preFilter":
		f.preFilter = append(f.preFilter, pl.(PreFilterPlugin))
	case "filter":
		f.filter = append(f.filter, pl.(FilterPlugin))
	case "postFilter":
		f.postFilter = append(f.postFilter, pl.(PostFilterPlugin))
	case "preScore":
		f.preScore = append(f.preScore, pl.(PreScorePlugin))
	case "score":
		sp := pl.(ScorePlugin)
		if weight == 0 {
			weight = 1
		}
		f.score = append(f.score, weighted{ScorePlugin: sp, weight: int64(weight), ext: sp.ScoreExtensions()})
	case "reserve":
		f.reserve = append(f.reserve, pl.(ReservePlugin))
	case "permit":
		f.permit = append(f.permit, pl.(PermitPlugin))
	case "preBind":
		f.preBind = append(f.preBind, pl.(PreBindPlugin))
	case "bind":
		f.bind = append(f.bind, pl.(BindPlugin))
	case "postBind":
		f.postBind = append(f.postBind, pl.(PostBindPlugin))
	}
	return nil
}

// WaitingPod returns the pod held at Permit, by uid (nil when none), for
// Handle implementations.
func (f *Framework) WaitingPod(uid string) WaitingPod { return f.waiting.get(uid) }
