package app

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestLeaderFlagDefaultsAdapt(t *testing.T) {
	const s = time.Second
	svc := Service{Name: "x", LeaderElected: true, Reconcile: func(context.Context, string) error { return nil }}
	for _, tc := range []struct {
		args                       []string
		lease, renew, retry, grace time.Duration
	}{
		{args: nil, lease: 15 * s, renew: 10 * s, retry: 2 * s, grace: DefaultShutdownGrace},
		// The default grace follows the lease it is given: half of lease
		// minus retry when 10s does not fit.
		{args: []string{"--leader-elect-lease-duration", "4s"}, lease: 4 * s, renew: 4 * s * 2 / 3, retry: 2 * s, grace: s},
		{args: []string{"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms"},
			lease: 4 * s, renew: 3 * s, retry: 500 * time.Millisecond, grace: 1750 * time.Millisecond},
		{args: []string{"--leader-elect-lease-duration", "4s", "--shutdown-grace-period", "1500ms"},
			lease: 4 * s, renew: 4 * s * 2 / 3, retry: 2 * s, grace: 1500 * time.Millisecond},
		// Not leader-elected: the lease puts no bound on the grace.
		{args: []string{"--leader-elect=false", "--leader-elect-lease-duration", "4s"},
			lease: 4 * s, renew: 10 * s, retry: 2 * s, grace: DefaultShutdownGrace},
	} {
		o, err := parseFlags(svc, tc.args)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if o.leader.LeaseDuration != tc.lease || o.leader.RenewDeadline != tc.renew || o.leader.RetryPeriod != tc.retry || o.shutdownGrace != tc.grace {
			t.Errorf("%v: lease %v, renew %v, retry %v, grace %v; want %v, %v, %v, %v", tc.args,
				o.leader.LeaseDuration, o.leader.RenewDeadline, o.leader.RetryPeriod, o.shutdownGrace,
				tc.lease, tc.renew, tc.retry, tc.grace)
		}
	}
}

func TestLeaderFlagExplicitConflicts(t *testing.T) {
	svc := Service{Name: "x", LeaderElected: true, Reconcile: func(context.Context, string) error { return nil }}
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--leader-elect-lease-duration", "4s", "--shutdown-grace-period", "2s"},
			"--shutdown-grace-period (2s) must be less than --leader-elect-lease-duration minus --leader-elect-retry-period (2s)"},
		{[]string{"--shutdown-grace-period", "13s"},
			"--shutdown-grace-period (13s) must be less than --leader-elect-lease-duration minus --leader-elect-retry-period (13s)"},
		{[]string{"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "4s"},
			"--leader-elect-renew-deadline (4s) must be less than --leader-elect-lease-duration (4s)"},
		{[]string{"--shutdown-grace-period", "-1s"}, "--shutdown-grace-period must not be negative"},
	} {
		_, err := parseFlags(svc, tc.args)
		var usage *usageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: error %v, want a usage error containing %q", tc.args, err, tc.err)
		}
	}
}

// CheckFlags sees the parsed flags and its error is a usage error.
func TestCheckFlagsRunsAfterParsing(t *testing.T) {
	var level string
	svc := Service{Name: "x", Reconcile: func(context.Context, string) error { return nil },
		AddFlags: func(fs *flag.FlagSet) { fs.StringVar(&level, "level", "", "") },
		CheckFlags: func() error {
			if level == "" {
				return errors.New("--level is required")
			}
			return nil
		}}
	if _, err := parseFlags(svc, []string{"--level", "3"}); err != nil {
		t.Fatalf("--level 3: %v", err)
	}
	_, err := parseFlags(svc, nil)
	var usage *usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--level is required") {
		t.Fatalf("error %v, want the usage error CheckFlags returned", err)
	}
}

// TestMainReportsUsageErrorOnOneLine runs Main in a child process (this
// test binary again): a flag error is one line on stderr, ending with a
// newline, and exit status 2.
func TestMainReportsUsageErrorOnOneLine(t *testing.T) {
	if args := os.Getenv("KPLANE_APP_TEST_MAIN_ARGS"); args != "" {
		os.Args = append([]string{"x"}, strings.Fields(args)...)
		Main(Service{Name: "x", LeaderElected: true, Reconcile: func(context.Context, string) error { return nil }})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainReportsUsageErrorOnOneLine$")
	cmd.Env = append(os.Environ(), "KPLANE_APP_TEST_MAIN_ARGS=--leader-elect-lease-duration 4s --shutdown-grace-period 3s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit: %v, want status 2; stderr %q", err, stderr.String())
	}
	want := "x: --shutdown-grace-period (3s) must be less than --leader-elect-lease-duration minus --leader-elect-retry-period (2s)\n"
	if stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
}
