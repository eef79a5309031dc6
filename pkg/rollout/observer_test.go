package rollout

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func obsPod(name, hash string, ready bool) *kplanev1.Pod {
	p := &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: "d", Name: name, Labels: map[string]string{kplanev1.LabelPodTemplateHash: hash}},
		Status: &kplanev1.PodStatus{Phase: kplanev1.PodRunning}}
	if ready {
		p.Status.Conditions = []*kplanev1.Condition{{Type: kplanev1.PodReady, Status: kplanev1.ConditionTrue, LastTransitionTime: timestamppb.New(time.Unix(0, 0))}}
	}
	return p
}

func TestObserver(t *testing.T) {
	const (
		add = kplanev1.EventType_EVENT_TYPE_ADDED
		mod = kplanev1.EventType_EVENT_TYPE_MODIFIED
		del = kplanev1.EventType_EVENT_TYPE_DELETED
	)
	now := time.Unix(100, 0)
	o := NewObserver(0)
	o.Observe(add, obsPod("a", "h1", true), now)
	o.Observe(add, obsPod("b", "h1", true), now)
	o.SetBounds(3, 1, false, now)
	o.Observe(add, obsPod("c", "h2", false), now)
	gone := obsPod("a", "h1", true)
	gone.Metadata.DeletionTimestamp = timestamppb.New(now)
	o.Observe(mod, gone, now) // terminating: not present, not available
	if _, _, _, v := o.Report(); len(v) != 0 {
		t.Fatalf("violations within bounds: %v", v)
	}
	o.Observe(add, obsPod("d", "h2", false), now)
	o.Observe(add, obsPod("e", "h2", false), now) // 4 present
	o.Observe(del, obsPod("b", "h1", true), now)  // 0 available
	events, peak, low, v := o.Report()
	if events != 7 || peak != 4 || low != 0 || len(v) != 2 ||
		!strings.Contains(v[0], "4 pods present, at most 3 allowed: b c d e") || !strings.Contains(v[1], "0 pods available (and 0 disrupted), at least 1") {
		t.Fatalf("report %d %d %d %v", events, peak, low, v)
	}

	// A pod that was available and turns unready while it stays (its node
	// went unready) was disrupted, not removed by the controller: it
	// still counts toward the floor. Removing it then does not.
	d := NewObserver(0)
	d.Observe(add, obsPod("a", "h1", true), now)
	d.Observe(add, obsPod("b", "h1", true), now)
	d.SetBounds(-1, 2, false, now)
	d.Observe(mod, obsPod("a", "h1", false), now)
	d.Observe(mod, obsPod("b", "h1", false), now)
	if _, _, low, v := d.Report(); len(v) != 0 || low != 0 {
		t.Fatalf("disrupted pods counted as removed: low %d, %v", low, v)
	}
	d.Observe(del, obsPod("a", "h1", false), now)
	if _, _, _, v := d.Report(); len(v) != 1 || !strings.Contains(v[0], "0 pods available (and 1 disrupted), at least 2") {
		t.Fatalf("removing a disrupted pod below the floor not seen: %v", v)
	}

	// A relist replaces the pods: ones deleted while events were lost
	// stop counting toward the surge bound.
	g := NewObserver(0)
	g.SetBounds(2, -1, false, now)
	g.Observe(add, obsPod("a", "h1", true), now)
	g.Observe(add, obsPod("b", "h1", true), now)
	g.Replace([]*kplanev1.Pod{obsPod("c", "h2", true), obsPod("d", "h2", false)}, now)
	if present, avail := g.Counts(now); present != 2 || avail != 1 {
		t.Fatalf("after relist: %d present, %d available; want 2, 1", present, avail)
	}
	if _, _, _, v := g.Report(); len(v) != 0 {
		t.Fatalf("relist counted stale pods: %v", v)
	}

	r := NewObserver(0)
	r.SetBounds(-1, -1, true, now)
	r.Observe(add, obsPod("a", "h1", true), now)
	old := obsPod("a", "h1", true)
	old.Metadata.DeletionTimestamp = timestamppb.New(now)
	r.Observe(mod, old, now)
	r.Observe(add, obsPod("b", "h2", false), now) // the old one still terminating
	if _, _, _, v := r.Report(); len(v) != 1 || !strings.Contains(v[0], "2 templates") {
		t.Fatalf("Recreate overlap not seen: %v", v)
	}

	m := NewObserver(time.Minute)
	p := obsPod("a", "h", true)
	p.Status.Conditions[0].LastTransitionTime = timestamppb.New(now.Add(-30 * time.Second))
	m.Observe(add, p, now)
	if _, a := m.Counts(now); a != 0 {
		t.Fatal("available before minReadySeconds")
	}
	if _, a := m.Counts(now.Add(31 * time.Second)); a != 1 {
		t.Fatal("not available after minReadySeconds")
	}
}
