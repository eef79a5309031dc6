package nodelabel_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/scheduler/framework"

	"github.com/kplane/kplane/examples/scheduler-plugin/nodelabel"
)

func nodeWith(t *testing.T, name string, labels map[string]string) *framework.NodeInfo {
	t.Helper()
	n, err := framework.NewNodeInfo(&kplanev1.Node{Metadata: &kplanev1.ObjectMeta{Name: name, Labels: labels}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNodeLabelPreference(t *testing.T) {
	ssd := nodeWith(t, "ssd", map[string]string{"disktype": "ssd"})
	hdd := nodeWith(t, "hdd", map[string]string{"disktype": "hdd"})
	bare := nodeWith(t, "bare", nil)
	ctx := context.Background()
	for _, tc := range []struct {
		args           string
		ssd, hdd, bare int64
		rejectsOthers  bool
	}{
		{`{"label":"disktype","value":"ssd"}`, 100, 0, 0, false},
		{`{"label":"disktype","value":"hdd","required":true}`, 0, 100, 0, true},
		{`{"label":"disktype","value":""}`, 0, 0, 100, false},
	} {
		pl, err := nodelabel.New(json.RawMessage(tc.args), nil)
		if err != nil {
			t.Fatal(err)
		}
		p := pl.(*nodelabel.Plugin)
		for _, c := range []struct {
			n    *framework.NodeInfo
			want int64
		}{{ssd, tc.ssd}, {hdd, tc.hdd}, {bare, tc.bare}} {
			got, _ := p.Score(ctx, nil, nil, c.n)
			if got != c.want {
				t.Errorf("%s: score(%s) = %d, want %d", tc.args, c.n.Name, got, c.want)
			}
			st := p.Filter(ctx, nil, nil, c.n)
			if rejected := !st.IsSuccess(); rejected != (tc.rejectsOthers && c.want == 0) {
				t.Errorf("%s: filter(%s) = %v", tc.args, c.n.Name, st.Message())
			}
		}
	}
	for args, want := range map[string]string{
		`{}`:                           "args.label: Required value",
		`{"label":"a","colour":"red"}`: `unknown field "colour"`,
	} {
		if _, err := nodelabel.New(json.RawMessage(args), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%s) = %v, want %q", args, err, want)
		}
	}
}
