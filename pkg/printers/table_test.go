package printers

import (
	"bytes"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/printers/printerstest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), got, *update)
}

func fixedClock() time.Time { return now }

// TestTables prints every kind's fixtures as kubectl would: plain, wide,
// and with the NAMESPACE column of -A.
func TestTables(t *testing.T) {
	all := fixtures()
	for _, kind := range kplanev1.KindNames() {
		objs, ok := all[kind]
		if !ok {
			t.Errorf("no table fixtures for kind %s", kind)
			continue
		}
		t.Run(kind, func(t *testing.T) {
			var b bytes.Buffer
			for _, opts := range []TableOptions{
				{Now: fixedClock},
				{Now: fixedClock, Wide: true},
				{Now: fixedClock, WithNamespace: kplanev1.LookupKind(kind).Namespaced},
				{Now: fixedClock, NoHeaders: true},
			} {
				if err := Table(&b, kind, objs, opts); err != nil {
					t.Fatal(err)
				}
				b.WriteString("\n")
			}
			golden(t, "table_"+strings.ToLower(kind)+".golden", b.String())
		})
	}
}

func TestStreamKeepsColumnsAligned(t *testing.T) {
	var b bytes.Buffer
	s := NewStream(&b, "Pod", TableOptions{Now: fixedClock})
	pods := fixtures()["Pod"]
	if err := s.Print(pods[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.Print(pods[5:6]); err != nil { // "init", shorter than "web-1"
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("want a header and two rows, got:\n%s", b.String())
	}
	col := strings.Index(lines[0], "READY")
	for _, l := range lines[1:] {
		if !strings.Contains(l[col:col+3], "/") {
			t.Errorf("row %q: READY column not at offset %d", l, col)
		}
	}
}

// A Builder fed in batches prints what Table prints for all the objects
// at once: every row aligned to the widest cell of any batch, a tab or
// newline inside a cell a space.
func TestBuilderMatchesTable(t *testing.T) {
	pods := fixtures()["Pod"]
	odd := proto.Clone(pods[0]).(*kplanev1.Object)
	odd.Meta().Name = "tab\there\nnewline"
	pods = append(pods, odd)
	for _, opts := range []TableOptions{{Now: fixedClock, WithNamespace: true}, {Now: fixedClock, Wide: true, NoHeaders: true}} {
		var want, got bytes.Buffer
		if err := Table(&want, "Pod", pods, opts); err != nil {
			t.Fatal(err)
		}
		b := NewBuilder(&got, "Pod", opts)
		for i := 0; i < len(pods); i += 2 {
			b.Add(pods[i:min(i+2, len(pods))])
		}
		if b.Len() != len(pods) {
			t.Errorf("Len = %d, want %d", b.Len(), len(pods))
		}
		if err := b.Write(); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("batches:\n%s\nall at once:\n%s", got.String(), want.String())
		}
		if !strings.Contains(got.String(), "tab here newline") {
			t.Errorf("tab and newline not replaced:\n%s", got.String())
		}
	}
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-5 * time.Second:               "<invalid>",
		-500 * time.Millisecond:        "0s",
		0:                              "0s",
		119 * time.Second:              "119s",
		2 * time.Minute:                "2m",
		3*time.Minute + 20*time.Second: "3m20s",
		10 * time.Minute:               "10m",
		179 * time.Minute:              "179m",
		3 * time.Hour:                  "3h",
		7*time.Hour + 59*time.Minute:   "7h59m",
		47 * time.Hour:                 "47h",
		3*24*time.Hour + 5*time.Hour:   "3d5h",
		8 * 24 * time.Hour:             "8d",
		729 * 24 * time.Hour:           "729d",
		(3*365 + 20) * 24 * time.Hour:  "3y20d",
		9 * 365 * 24 * time.Hour:       "9y",
	} {
		if got := HumanDuration(d); got != want {
			t.Errorf("HumanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestAgeUnknown(t *testing.T) {
	if got := Age(nil, now); got != "<unknown>" {
		t.Errorf("Age(nil) = %q", got)
	}
}

// TestJobStatus follows kubectl 1.32's order: finished beats deleting
// beats the interim conditions.
func TestJobStatus(t *testing.T) {
	cond := func(types ...string) []*kplanev1.Condition {
		var out []*kplanev1.Condition
		for _, typ := range types {
			out = append(out, &kplanev1.Condition{Type: typ, Status: "True"})
		}
		return out
	}
	for _, c := range []struct {
		conds    []*kplanev1.Condition
		deleting bool
		want     string
	}{
		{nil, false, "Running"},
		{cond("SuccessCriteriaMet", "Complete"), false, "Complete"},
		{cond("FailureTarget", "Failed"), true, "Failed"},
		{cond("FailureTarget"), false, "FailureTarget"},
		{cond("SuccessCriteriaMet"), false, "SuccessCriteriaMet"},
		{cond("Suspended", "FailureTarget"), false, "Suspended"},
		{cond("Suspended"), true, "Terminating"},
		{[]*kplanev1.Condition{{Type: "Complete", Status: "False"}}, false, "Running"},
	} {
		j := &kplanev1.Job{Metadata: &kplanev1.ObjectMeta{}, Status: &kplanev1.JobStatus{Conditions: c.conds}}
		if c.deleting {
			j.Metadata.DeletionTimestamp = ago(time.Second)
		}
		if got := JobStatus(j); got != c.want {
			t.Errorf("%v deleting=%v: %s, want %s", c.conds, c.deleting, got, c.want)
		}
	}
}

// The fixtures are shared with kpctl's describe tests.
var now = printerstest.Now

func fixtures() map[string][]*kplanev1.Object { return printerstest.Fixtures() }

var ago = printerstest.Ago

// TestColumnsMatchRows: every kind's row has one cell per column, so the
// server's Table and kpctl's table line up.
func TestColumnsMatchRows(t *testing.T) {
	for kind, objs := range fixtures() {
		h, w := Columns(kind)
		for _, o := range objs {
			cells, wide := Row(o, now)
			if len(cells) != len(h) || len(wide) != len(w) {
				t.Errorf("%s: %d+%d cells for %d+%d columns", kind, len(cells), len(wide), len(h), len(w))
			}
		}
	}
}

// TestLoadBalancerExternalIP: a LoadBalancer Service shows <pending>
// until the cloud controller writes status.loadBalancer, then its
// addresses (IP, else hostname).
func TestLoadBalancerExternalIP(t *testing.T) {
	svc := &kplanev1.Service{Metadata: &kplanev1.ObjectMeta{Name: "web"}, Spec: &kplanev1.ServiceSpec{Type: "LoadBalancer", ClusterIp: "10.96.0.10"}}
	ext := func() string {
		cells, _ := serviceRow(kplanev1.MustWrap(svc), now)
		return cells[3]
	}
	if got := ext(); got != "<pending>" {
		t.Fatalf("without status: %q, want <pending>", got)
	}
	svc.Status = &kplanev1.ServiceStatus{LoadBalancer: &kplanev1.LoadBalancerStatus{Ingress: []*kplanev1.LoadBalancerIngress{{Ip: "127.240.0.1"}, {Hostname: "lb.example"}}}}
	if got := ext(); got != "127.240.0.1,lb.example" {
		t.Fatalf("with ingress: %q", got)
	}
}
