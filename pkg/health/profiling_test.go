package health

import (
	"flag"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

func TestProfilingDefaultFollowsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:0": true, "[::1]:10252": true, "localhost:10252": true,
		":10252": false, "0.0.0.0:10252": false, "10.1.2.3:10252": false, "": false,
	} {
		var p Profiling
		if got := p.Enabled(addr); got != want {
			t.Errorf("default for %q: %v, want %v", addr, got, want)
		}
	}
}

func TestProfilingFlagWins(t *testing.T) {
	for _, tc := range []struct {
		args []string
		addr string
		want bool
	}{
		{[]string{"--enable-profiling"}, ":10252", true},
		{[]string{"--enable-profiling=false"}, "127.0.0.1:10252", false},
		{nil, "127.0.0.1:10252", true},
	} {
		var p Profiling
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		p.AddFlag(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := p.Enabled(tc.addr); got != tc.want {
			t.Errorf("%v on %q: %v, want %v", tc.args, tc.addr, got, tc.want)
		}
	}
	var p Profiling
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	p.AddFlag(fs)
	if err := fs.Parse([]string{"--enable-profiling=maybe"}); err == nil {
		t.Error("--enable-profiling=maybe accepted")
	}
}

func TestPprofServedOnlyWhenOn(t *testing.T) {
	for _, on := range []bool{true, false} {
		srv, err := Start("127.0.0.1:0", prometheus.NewRegistry(), func() error { return nil }, hclog.NewNullLogger(), WithProfiling(on))
		if err != nil {
			t.Fatal(err)
		}
		code, body := get(t, "http://"+srv.Addr()+"/debug/pprof/")
		idx := code == http.StatusOK && strings.Contains(body, "goroutine")
		if idx != on {
			t.Errorf("profiling %v: /debug/pprof/ answered %d", on, code)
		}
		if on {
			if code, _ := get(t, "http://"+srv.Addr()+"/debug/pprof/heap?debug=1"); code != http.StatusOK {
				t.Errorf("heap profile: %d", code)
			}
		}
		srv.Stop()
	}
}
