package apijson

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// at is 2026-12-02T17:44:03.123456789Z: nanoseconds that both precisions cut.
var at = time.Date(2026, 12, 2, 17, 44, 3, 123456789, time.UTC)

func field(m proto.Message, name string) protoreflect.FieldDescriptor {
	return m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
}

func TestPrecisionFollowsTheMicroTimeOption(t *testing.T) {
	cases := []struct {
		msg   proto.Message
		field string
		want  time.Duration
	}{
		{&kplanev1.LeaseSpec{}, "acquire_time", time.Microsecond},
		{&kplanev1.LeaseSpec{}, "renew_time", time.Microsecond},
		{&kplanev1.Event{}, "event_time", time.Microsecond},
		{&kplanev1.Event{}, "first_timestamp", time.Second},
		{&kplanev1.ObjectMeta{}, "creation_timestamp", time.Second},
		{&kplanev1.Condition{}, "last_transition_time", time.Second},
		{&kplanev1.PodStatus{}, "start_time", time.Second},
	}
	for _, c := range cases {
		if got := Precision(field(c.msg, c.field)); got != c.want {
			t.Errorf("%s.%s: precision %v, want %v", c.msg.ProtoReflect().Descriptor().Name(), c.field, got, c.want)
		}
	}
}

func TestToMapWritesKubernetesTimestampsAndNumbers(t *testing.T) {
	pod := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: "web", Generation: 3, CreationTimestamp: timestamppb.New(at)},
		Status: &kplanev1.PodStatus{
			PodIp:      "10.0.0.5",
			StartTime:  timestamppb.New(at),
			Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True", LastTransitionTime: timestamppb.New(at.Add(time.Hour))}},
			ContainerStatuses: []*kplanev1.ContainerStatus{{Name: "app", ContainerId: "exec://1",
				State: &kplanev1.ContainerState{Running: &kplanev1.ContainerStateRunning{StartedAt: timestamppb.New(at)}}}},
		},
	}
	b, err := Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"creationTimestamp":"2026-12-02T17:44:03Z","generation":3,"name":"web"},` +
		`"status":{"conditions":[{"lastTransitionTime":"2026-12-02T18:44:03Z","status":"True","type":"Ready"}],` +
		`"containerStatuses":[{"containerID":"exec://1","name":"app","state":{"running":{"startedAt":"2026-12-02T17:44:03Z"}}}],` +
		`"podIP":"10.0.0.5","startTime":"2026-12-02T17:44:03Z"}}`
	if string(b) != want {
		t.Errorf("pod JSON:\n got %s\nwant %s", b, want)
	}

	lease := &kplanev1.Lease{Spec: &kplanev1.LeaseSpec{HolderIdentity: "a", AcquireTime: timestamppb.New(at), RenewTime: timestamppb.New(at.Add(time.Second))}}
	b, err = Marshal(lease)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"spec":{"acquireTime":"2026-12-02T17:44:03.123456Z","holderIdentity":"a","renewTime":"2026-12-02T17:44:04.123456Z"}}`
	if string(b) != want {
		t.Errorf("lease JSON:\n got %s\nwant %s", b, want)
	}

	// A whole second still shows six digits in a MicroTime, as in Kubernetes.
	ev := &kplanev1.Event{EventTime: timestamppb.New(at.Truncate(time.Second))}
	m, err := ToMap(ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := m["eventTime"]; got != "2026-12-02T17:44:03.000000Z" {
		t.Errorf("eventTime = %v", got)
	}
}

func TestParsingAcceptsEveryRFC3339Form(t *testing.T) {
	for _, s := range []string{
		"2026-12-02T17:44:03Z",
		"2026-12-02T17:44:03.123456Z",
		"2026-12-02T17:44:03.123456789Z",
		"2026-12-02T18:44:03+01:00",
	} {
		var spec kplanev1.LeaseSpec
		if err := protojson.Unmarshal([]byte(`{"renewTime":"`+s+`"}`), &spec); err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		want, _ := time.Parse(time.RFC3339Nano, s)
		if got := spec.GetRenewTime().AsTime(); !got.Equal(want) {
			t.Errorf("%s: parsed %v", s, got)
		}
	}
}

func TestTruncateTimesCutsToEachFieldsPrecision(t *testing.T) {
	obj := kplanev1.MustWrap(&kplanev1.Lease{
		Metadata: &kplanev1.ObjectMeta{CreationTimestamp: timestamppb.New(at)},
		Spec:     &kplanev1.LeaseSpec{RenewTime: timestamppb.New(at)},
	})
	TruncateTimes(obj)
	l := obj.GetLease()
	if got := l.GetMetadata().GetCreationTimestamp().AsTime(); !got.Equal(at.Truncate(time.Second)) {
		t.Errorf("creationTimestamp = %v", got)
	}
	if got := l.GetSpec().GetRenewTime().AsTime(); !got.Equal(at.Truncate(time.Microsecond)) {
		t.Errorf("renewTime = %v", got)
	}

	// Timestamps in lists of messages are reached too, and JSON shows
	// exactly what is stored.
	pod := &kplanev1.Pod{Status: &kplanev1.PodStatus{Conditions: []*kplanev1.Condition{{LastProbeTime: timestamppb.New(at)}}}}
	TruncateTimes(pod)
	if got := pod.Status.Conditions[0].LastProbeTime.AsTime(); !got.Equal(at.Truncate(time.Second)) {
		t.Errorf("lastProbeTime = %v", got)
	}
	b, err := Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var back kplanev1.Pod
	if err := protojson.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&back, pod) {
		t.Errorf("JSON does not read back what was stored: %s", b)
	}
}

func TestIntegersAreNumbersEverywhere(t *testing.T) {
	grace := int64(30)
	b, err := Marshal(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{DeletionGracePeriodSeconds: &grace},
		Spec: &kplanev1.PodSpec{TerminationGracePeriodSeconds: &grace}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"30"`) || !json.Valid(b) {
		t.Errorf("64-bit integers should be numbers: %s", b)
	}
}

// The walk that skips subtrees which cannot hold a timestamp still
// reaches one several messages deep in a list (a container's running
// state), and leaves every other field alone.
func TestTruncateTimesReachesDeepTimes(t *testing.T) {
	pod := &kplanev1.Pod{
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "app", Image: "nginx:1.25"}}},
		Status: &kplanev1.PodStatus{ContainerStatuses: []*kplanev1.ContainerStatus{{Name: "app",
			State: &kplanev1.ContainerState{Running: &kplanev1.ContainerStateRunning{StartedAt: timestamppb.New(at)}}}}},
	}
	want := proto.Clone(pod).(*kplanev1.Pod)
	want.Status.ContainerStatuses[0].State.Running.StartedAt = timestamppb.New(at.Truncate(time.Second))
	TruncateTimes(pod)
	if !proto.Equal(pod, want) {
		t.Fatalf("truncated to %v, want %v", pod, want)
	}
}

// BenchmarkTruncateTimesPod is the walk the apiserver makes over every
// pod it writes.
func BenchmarkTruncateTimesPod(b *testing.B) {
	pod := &kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: "web-1", Namespace: "default", CreationTimestamp: timestamppb.New(at),
			Labels: map[string]string{"app": "web"}},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "app", Image: "nginx:1.25",
			Args: []string{"--port", "8080"}, Ports: []*kplanev1.ContainerPort{{ContainerPort: 8080}},
			Resources: &kplanev1.ResourceRequirements{Requests: map[string]string{"cpu": "100m"}}}}},
		Status: &kplanev1.PodStatus{Phase: "Running", Conditions: []*kplanev1.Condition{{Type: "Ready", Status: "True", LastTransitionTime: timestamppb.New(at)}}},
	}
	for b.Loop() {
		TruncateTimes(pod)
	}
}
