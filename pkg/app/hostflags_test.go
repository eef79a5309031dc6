package app

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"
)

// flagged is a service with its own flags, to check how a Host merges them.
type flagged struct {
	burst  int
	period time.Duration
	health string
	on     bool
}

func (f *flagged) service(name string, shared bool) Service {
	return Service{
		Name: name, Workers: 3,
		Reconcile: func(context.Context, string) error { return nil },
		AddFlags: func(fs *flag.FlagSet) {
			fs.IntVar(&f.burst, name+"-burst", 1, "own flag")
			if shared {
				fs.DurationVar(&f.period, "sync-period", time.Second, "shared flag")
				fs.BoolVar(&f.on, "feature", false, "shared boolean")
			}
			fs.StringVar(&f.health, "health-addr", "x", "clashes with a common flag")
		},
	}
}

func TestHostFlags(t *testing.T) {
	var a, b, c flagged
	h := Host{Name: "h", Services: []Service{a.service("a", true), b.service("b", true), c.service("c", false)}}
	for _, tc := range []struct {
		args  []string
		check func(t *testing.T, hf *hostFlags)
	}{
		{[]string{"--controllers=a,c", "--a-burst=5", "--c-burst=7", "--b-workers=9", "--a-workers=2"}, func(t *testing.T, hf *hostFlags) {
			if a.burst != 5 || c.burst != 7 {
				t.Errorf("own flags: a=%d c=%d", a.burst, c.burst)
			}
			if len(hf.selected) != 2 || hf.opts["a"].workers != 2 || hf.opts["c"].workers != 3 {
				t.Errorf("selected %d, workers a=%d c=%d", len(hf.selected), hf.opts["a"].workers, hf.opts["c"].workers)
			}
			if hf.opts["b"] != nil {
				t.Error("b was not selected")
			}
		}},
		{[]string{"--sync-period=3s", "--feature"}, func(t *testing.T, _ *hostFlags) {
			if a.period != 3*time.Second || b.period != 3*time.Second || !a.on || !b.on {
				t.Errorf("a shared name sets every owner: a=%v,%v b=%v,%v", a.period, a.on, b.period, b.on)
			}
		}},
		// The qualified name wins over the shared one in either order.
		{[]string{"--b.sync-period=4s", "--sync-period=3s", "--b.feature=false", "--feature"}, func(t *testing.T, _ *hostFlags) {
			if a.period != 3*time.Second || b.period != 4*time.Second || !a.on || b.on {
				t.Errorf("a=%v,%v b=%v,%v", a.period, a.on, b.period, b.on)
			}
		}},
		// A service flag named like a common flag is only reachable qualified.
		{[]string{"--health-addr=127.0.0.1:0", "--c.health-addr=mine"}, func(t *testing.T, hf *hostFlags) {
			if hf.common.healthAddr != "127.0.0.1:0" || c.health != "mine" || a.health != "x" {
				t.Errorf("common %q, c %q, a %q", hf.common.healthAddr, c.health, a.health)
			}
		}},
	} {
		a, b, c = flagged{}, flagged{}, flagged{}
		hf, err := parseHostFlags(h, tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		tc.check(t, hf)
	}
	for _, bad := range [][]string{{"--sync-period=soon"}, {"--a.sync-period=soon"}, {"--nope"}, {"extra"}} {
		if _, err := parseHostFlags(h, bad); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(strings.SplitN(bad[0], "=", 2)[0], "--")) {
			t.Errorf("%v: %v, want a usage error naming the flag", bad, err)
		}
	}
}
