package leaderelection

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// nilClient satisfies kplanev1.ResourcesClient for tests that never call it.
type nilClient struct{ kplanev1.ResourcesClient }

func validConfig() Config {
	return Config{
		Client:        nilClient{},
		Name:          "ctl",
		Identity:      "me",
		LeaseDuration: time.Second,
		RenewDeadline: 700 * time.Millisecond,
		RetryPeriod:   200 * time.Millisecond,
	}
}

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   []string // substrings of the error
	}{
		{"missing client", func(c *Config) { c.Client = nil }, []string{"client is required"}},
		{"missing name", func(c *Config) { c.Name = "" }, []string{"lease name is required"}},
		{"missing identity", func(c *Config) { c.Identity = "" }, []string{"identity is required"}},
		{"renew deadline equal to lease", func(c *Config) { c.RenewDeadline = c.LeaseDuration },
			[]string{"renew deadline (1s) must be less than the lease duration (1s)"}},
		{"renew deadline above lease", func(c *Config) { c.RenewDeadline = 2 * time.Second },
			[]string{"renew deadline (2s) must be less than the lease duration (1s)"}},
		{"retry equal to renew deadline", func(c *Config) { c.RetryPeriod = c.RenewDeadline },
			[]string{"retry period (700ms) must be less than the renew deadline (700ms)"}},
		{"negative duration", func(c *Config) { c.RetryPeriod = -time.Second }, []string{"durations must be positive"}},
		{"defaults conflict with a short lease", func(c *Config) { c.RenewDeadline, c.RetryPeriod = 0, 0 },
			[]string{"renew deadline (10s) must be less than the lease duration (1s)"}},
		{"several problems at once", func(c *Config) { c.Name, c.Identity = "", "" },
			[]string{"lease name is required", "identity is required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig()
			tt.modify(&cfg)
			e, err := New(cfg)
			if err == nil {
				t.Fatalf("New succeeded, want an error containing %q", tt.want)
			}
			if e != nil {
				t.Fatal("New returned an Elector along with an error")
			}
			if !strings.HasPrefix(err.Error(), "leaderelection: invalid config: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestNewAppliesDefaults(t *testing.T) {
	e, err := New(Config{Client: nilClient{}, Name: "ctl", Identity: "me"})
	if err != nil {
		t.Fatal(err)
	}
	if e.cfg.Namespace != "kplane-system" || e.cfg.LeaseDuration != 15*time.Second ||
		e.cfg.RenewDeadline != 10*time.Second || e.cfg.RetryPeriod != 2*time.Second {
		t.Fatalf("defaults not applied: %+v", e.cfg)
	}
	if e.IsLeader() || e.GetLeader() != "" {
		t.Fatal("a new Elector claims to know a leader")
	}
}

func TestOptionsFlags(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if !o.LeaderElect || o.LeaseDuration != 15*time.Second || o.RenewDeadline != 10*time.Second ||
		o.RetryPeriod != 2*time.Second || o.Identity != "" {
		t.Fatalf("defaults: %+v", o)
	}
	var cfg Config
	o.ApplyTo(&cfg)
	if cfg.Identity != DefaultIdentity() || cfg.LeaseDuration != 15*time.Second {
		t.Fatalf("ApplyTo with defaults: %+v", cfg)
	}

	o = Options{}
	fs = flag.NewFlagSet("test", flag.ContinueOnError)
	o.AddFlags(fs)
	err := fs.Parse([]string{"--leader-elect=false", "--leader-elect-lease-duration=30s",
		"--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=3s", "--id=replica-1"})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{LeaderElect: false, LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second,
		RetryPeriod: 3 * time.Second, Identity: "replica-1"}
	if o != want {
		t.Fatalf("parsed %+v, want %+v", o, want)
	}
	o.ApplyTo(&cfg)
	if cfg.Identity != "replica-1" || cfg.RenewDeadline != 20*time.Second || cfg.RetryPeriod != 3*time.Second {
		t.Fatalf("ApplyTo: %+v", cfg)
	}
}

func TestDefaultIdentity(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skipf("no hostname: %v", err)
	}
	if got, want := DefaultIdentity(), host+"_"+strconv.Itoa(os.Getpid()); got != want {
		t.Fatalf("DefaultIdentity = %q, want %q", got, want)
	}
}

func TestLeaseSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int32{
		time.Second: 1, 1500 * time.Millisecond: 2, 15 * time.Second: 15, 100 * time.Millisecond: 1,
	} {
		if got := leaseSeconds(d); got != want {
			t.Errorf("leaseSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestOptionsComplete(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		args                []string
		lease, renew, retry time.Duration
		err                 string // part of the error; "" = valid
	}{
		{args: nil, lease: 15 * s, renew: 10 * s, retry: 2 * s},
		// A short lease shrinks the defaults that would not fit under it.
		{args: []string{"--leader-elect-lease-duration=4s"}, lease: 4 * s, renew: 4 * s * 2 / 3, retry: 2 * s},
		{args: []string{"--leader-elect-lease-duration=1500ms"}, lease: 1500 * time.Millisecond, renew: s, retry: 200 * time.Millisecond},
		{args: []string{"--leader-elect-renew-deadline=1s"}, lease: 15 * s, renew: s, retry: 200 * time.Millisecond},
		// A default that fits stays.
		{args: []string{"--leader-elect-lease-duration=12s"}, lease: 12 * s, renew: 10 * s, retry: 2 * s},
		// Explicit values are kept, and explicit conflicts are errors naming the flags.
		{args: []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"},
			lease: 4 * s, renew: 3 * s, retry: 500 * time.Millisecond},
		{args: []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=5s"},
			err: "--leader-elect-renew-deadline (5s) must be less than --leader-elect-lease-duration (4s)"},
		{args: []string{"--leader-elect-renew-deadline=20s"},
			err: "--leader-elect-renew-deadline (20s) must be less than --leader-elect-lease-duration (15s)"},
		{args: []string{"--leader-elect-lease-duration=4s", "--leader-elect-retry-period=3s"},
			err: "--leader-elect-retry-period (3s) must be less than --leader-elect-renew-deadline (2.666666666s)"},
		{args: []string{"--leader-elect-lease-duration=0s"}, err: "must be positive"},
	} {
		var o Options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.Complete(fs)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.err == "" && (o.LeaseDuration != tc.lease || o.RenewDeadline != tc.renew || o.RetryPeriod != tc.retry):
			t.Errorf("%v: lease %v, renew %v, retry %v; want %v, %v, %v", tc.args,
				o.LeaseDuration, o.RenewDeadline, o.RetryPeriod, tc.lease, tc.renew, tc.retry)
		}
	}
}
