package main

import (
	"strings"
	"testing"
)

// TestRangeFlagsRejectBadValues: the allocation flags are checked before
// anything starts, with the flag's name in the error.
func TestRangeFlagsRejectBadValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--service-cluster-ip-range", "10.0.0.1/24"}, "--service-cluster-ip-range: 10.0.0.1/24: must be a network address (10.0.0.0/24)"},
		{[]string{"--service-cluster-ip-range", "banana"}, "--service-cluster-ip-range"},
		{[]string{"--service-cluster-ip-range", "fd00::/108"}, "must be an IPv4 CIDR"},
		{[]string{"--service-cluster-ip-range", "10.0.0.0/31"}, "too small"},
		{[]string{"--service-node-port-range", "32767-30000"}, "--service-node-port-range"},
		{[]string{"--service-node-port-range", "x"}, "must be a port range"},
		{[]string{"--allocation-repair-interval", "soon"}, "allocation-repair-interval"},
	} {
		err := run(append(c.args, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--health-addr", ""))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
