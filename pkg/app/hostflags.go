package app

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

// hostFlags are a Host's parsed flags.
type hostFlags struct {
	common   *options            // the flags every service shares
	opts     map[string]*options // per selected service: common plus its --<name>-workers
	selected []Service
}

// parseHostFlags registers and parses a Host's flags:
//   - the common flags (connection, logging, --health-addr, profiling,
//     --resync-period, --shutdown-grace-period, leader election) once,
//     for every hosted loop;
//   - --controllers (default "*");
//   - --<service>-workers for each service, its --workers;
//   - the union of the services' own flags. A flag that only one service
//     has keeps its name. A name several services share sets it in all of
//     them, and each also gets "<service>.<flag>" to set it in one alone
//     (which wins over the shared name, in any order). A service flag
//     whose name a common flag already takes is only "<service>.<flag>".
//
// Flags of services that --controllers leaves out are accepted and
// unused; only the selected services' CheckFlags run.
func parseHostFlags(h Host, args []string) (*hostFlags, error) {
	common := &options{logOutput: os.Stderr}
	fs := flag.NewFlagSet(h.Name, flag.ContinueOnError)
	common.addCommonFlags(fs, h.HealthAddr, 0, true)
	known := make([]string, len(h.Services))
	for i, s := range h.Services {
		known[i] = s.Name
	}
	controllers := fs.String(FlagControllers, "*", fmt.Sprintf(
		"controllers to run, comma-separated: \"*\" is all, \"-name\" leaves one out, e.g. \"*,-jobctl\" (known: %s)", strings.Join(known, ", ")))
	workers := map[string]*int{}
	for _, s := range h.Services {
		workers[s.Name] = fs.Int(s.Name+"-workers", defaultWorkers(s), "number of concurrent reconciles of "+s.Name)
	}
	qualified := addServiceFlags(fs, h.Services)
	if err := parseArgs(fs, args); err != nil {
		return nil, err
	}
	for _, q := range qualified {
		if q.set {
			// The one service's own setting wins over the shared name.
			if err := q.Value.Set(q.given); err != nil {
				return nil, &usageError{fmt.Errorf("--%s: %w", q.name, err)}
			}
		}
	}
	if err := common.check(fs, true); err != nil {
		return nil, err
	}
	names, err := SelectControllers(*controllers, known)
	if err != nil {
		return nil, &usageError{err}
	}
	hf := &hostFlags{common: common, opts: map[string]*options{}}
	for _, name := range names {
		for _, s := range h.Services {
			if s.Name != name {
				continue
			}
			if s.CheckFlags != nil {
				if err := s.CheckFlags(); err != nil {
					return nil, &usageError{fmt.Errorf("%s: %w", s.Name, err)}
				}
			}
			if err := checkWorkers("--"+s.Name+"-workers", *workers[s.Name]); err != nil {
				return nil, err
			}
			o := *common
			o.workers = *workers[s.Name]
			if !s.LeaderElected {
				o.leader.LeaderElect = false
			}
			hf.opts[s.Name] = &o
			hf.selected = append(hf.selected, s)
		}
	}
	return hf, nil
}

// serviceFlag is one service's own flag.
type serviceFlag struct {
	svc string
	f   *flag.Flag
}

// addServiceFlags registers the union of the services' own flags on fs
// (see parseHostFlags) and returns the "<service>.<flag>" ones.
func addServiceFlags(fs *flag.FlagSet, services []Service) []*qualifiedValue {
	byName := map[string][]serviceFlag{}
	for _, s := range services {
		if s.AddFlags == nil {
			continue
		}
		own := flag.NewFlagSet(s.Name, flag.ContinueOnError)
		s.AddFlags(own)
		own.VisitAll(func(f *flag.Flag) { byName[f.Name] = append(byName[f.Name], serviceFlag{s.Name, f}) })
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var qualified []*qualifiedValue
	for _, name := range names {
		owners := byName[name]
		taken := fs.Lookup(name) != nil
		if len(owners) == 1 && !taken {
			fs.Var(owners[0].f.Value, name, owners[0].f.Usage+" ("+owners[0].svc+")")
			continue
		}
		values := make([]flag.Value, len(owners))
		svcs := make([]string, len(owners))
		for i, o := range owners {
			values[i] = o.f.Value
			svcs[i] = o.svc
			q := &qualifiedValue{Value: o.f.Value, name: o.svc + "." + name}
			fs.Var(q, q.name, o.f.Usage+" ("+o.svc+" only)")
			qualified = append(qualified, q)
		}
		if !taken {
			fs.Var(fanOut(values), name, owners[0].f.Usage+" (sets it in "+strings.Join(svcs, ", ")+"; <controller>."+name+" sets one)")
		}
	}
	return qualified
}

// fanOut sets one value in several services.
type fanOut []flag.Value

func (v fanOut) String() string {
	if len(v) == 0 {
		return ""
	}
	return v[0].String()
}

func (v fanOut) Set(s string) error {
	for _, x := range v {
		if err := x.Set(s); err != nil {
			return err
		}
	}
	return nil
}

// IsBoolFlag lets a shared boolean be given without a value.
func (v fanOut) IsBoolFlag() bool { return len(v) > 0 && isBool(v[0]) }

// qualifiedValue is "<service>.<flag>": it sets the service's value and
// remembers what was given, to apply it again after the shared name.
type qualifiedValue struct {
	flag.Value
	name  string
	given string
	set   bool
}

func (q *qualifiedValue) String() string {
	if q == nil || q.Value == nil {
		return ""
	}
	return q.Value.String()
}

func (q *qualifiedValue) Set(s string) error {
	if err := q.Value.Set(s); err != nil {
		return err
	}
	q.given, q.set = s, true
	return nil
}

// IsBoolFlag lets a boolean be given without a value.
func (q *qualifiedValue) IsBoolFlag() bool { return q.Value != nil && isBool(q.Value) }

func isBool(v flag.Value) bool {
	b, ok := v.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
