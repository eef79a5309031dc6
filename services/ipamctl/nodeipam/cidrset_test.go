package nodeipam

import (
	"slices"
	"strings"
	"testing"
)

func TestCIDRSetRanges(t *testing.T) {
	s, err := newCIDRSet("127.64.0.0/10", 24)
	if err != nil {
		t.Fatal(err)
	}
	if s.count != 1<<14 {
		t.Fatalf("count = %d, want %d", s.count, 1<<14)
	}
	for i, want := range map[int]string{0: "127.64.0.0/24", 1: "127.64.1.0/24", 256: "127.65.0.0/24", s.count - 1: "127.127.255.0/24"} {
		if got := s.prefix(i).String(); got != want {
			t.Errorf("prefix(%d) = %s, want %s", i, got, want)
		}
	}
	for cidr, want := range map[string][]int{
		"127.64.1.0/24":   {1},
		"127.64.1.128/25": {1},    // part of one range
		"127.64.2.0/23":   {2, 3}, // two ranges set by hand
		"10.0.0.0/24":     nil,    // outside the cluster CIDR
		"":                nil,    // none
		"fd00::/64":       nil,    // not IPv4
		"127.65.0.7/24":   {256},  // host bits ignored
	} {
		if got := s.indexes(cidr); !slices.Equal(got, want) {
			t.Errorf("indexes(%q) = %v, want %v", cidr, got, want)
		}
	}
	if got := len(s.indexes("127.0.0.0/8")); got != s.count {
		t.Errorf("a CIDR around the whole cluster CIDR overlaps %d ranges, want all %d", got, s.count)
	}
}

func TestCIDRSetRejectsBadFlags(t *testing.T) {
	for _, c := range []struct {
		cidr string
		mask int
		want string
	}{
		{"10.244.0.0", 24, "--cluster-cidr: \"10.244.0.0\" is not a CIDR"},
		{"fd00::/48", 64, "only IPv4"},
		{"10.244.1.0/16", 24, "has host bits set; did you mean 10.244.0.0/16?"},
		{"10.244.0.0/16", 8, "--node-cidr-mask-size: /8 is larger than the cluster CIDR"},
		{"10.244.0.0/16", 31, "leaves no usable pod address"},
		{"10.0.0.0/8", 30, "more than 2^16 node ranges"},
	} {
		_, err := newCIDRSet(c.cidr, c.mask)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("newCIDRSet(%q, %d) = %v, want an error containing %q", c.cidr, c.mask, err, c.want)
		}
	}
}
