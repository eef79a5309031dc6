package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kplane/kplane/pkg/testutil"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestClientGoEventRecorder: client-go's event recorder (an
// EventBroadcaster recording to the apiserver's Events) lands events, and
// a repeated event is aggregated into the stored one: its count goes up
// through the recorder's PATCH, no second Event appears.
func TestClientGoEventRecorder(t *testing.T) {
	srv := testserver.Start(t)
	cs := clientset(t, srv)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rs, err := cs.AppsV1().ReplicaSets("default").Create(ctx, goRS("web", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	defer b.Shutdown()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kplane-test"})

	events := cs.CoreV1().Events("default")
	find := func(reason string) (*corev1.Event, int) {
		l, err := events.List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web"})
		if err != nil {
			t.Fatalf("list events: %v", err)
		}
		var found *corev1.Event
		n := 0
		for i := range l.Items {
			if l.Items[i].Reason == reason {
				found = &l.Items[i]
				n++
			}
		}
		return found, n
	}

	rec.Event(rs, corev1.EventTypeNormal, "Scaled", "scaled to 1")
	var ev *corev1.Event
	testutil.Eventually(t, 20*time.Second, "the recorded event to land", func() bool {
		ev, _ = find("Scaled")
		return ev != nil
	})
	if ev.Count != 1 || ev.Message != "scaled to 1" || ev.Type != corev1.EventTypeNormal || ev.Source.Component != "kplane-test" ||
		ev.InvolvedObject.Kind != "ReplicaSet" || ev.InvolvedObject.UID != rs.UID || ev.FirstTimestamp.IsZero() {
		t.Fatalf("recorded event: %+v", ev)
	}

	// The same event twice more: the recorder's correlator patches the
	// stored Event's count rather than creating another.
	rec.Event(rs, corev1.EventTypeNormal, "Scaled", "scaled to 1")
	rec.Event(rs, corev1.EventTypeNormal, "Scaled", "scaled to 1")
	testutil.Eventually(t, 20*time.Second, "the event's count to reach 3", func() bool {
		ev, _ = find("Scaled")
		return ev != nil && ev.Count == 3
	})
	if _, n := find("Scaled"); n != 1 {
		t.Errorf("%d Scaled events, want 1 aggregated", n)
	}
	if ev.LastTimestamp.Before(&ev.FirstTimestamp) {
		t.Errorf("lastTimestamp %v before firstTimestamp %v", ev.LastTimestamp, ev.FirstTimestamp)
	}

	// A different event is its own.
	rec.Eventf(rs, corev1.EventTypeWarning, "FailedCreate", "quota: %s", "exceeded")
	testutil.Eventually(t, 20*time.Second, "the warning to land", func() bool {
		w, _ := find("FailedCreate")
		return w != nil && w.Type == corev1.EventTypeWarning && w.Message == "quota: exceeded" && w.Count == 1
	})
}
