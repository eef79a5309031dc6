package integration_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestBadInputIsRejectedWithoutWriting sends one bad request per row and
// checks its code, its message (the field path at least) and that the
// store did not change at all: same objects, same resourceVersions, same
// store revision.
func TestBadInputIsRejectedWithoutWriting(t *testing.T) {
	const maxObject = 64 << 10
	_, c := start(t, testserver.WithMaxObjectBytes(maxObject))

	// Fixtures the update and delete rows act on.
	create(t, c, newNode("node-1"))
	create(t, c, newNamespace("team"))
	create(t, c, newPod("team", "resident", nil))
	web := create(t, c, newPod("default", "web", map[string]string{"app": "web"}))
	staleWeb := proto.Clone(web).(*kplanev1.Object)
	web.Meta().Labels["v"] = "2"
	web = update(t, c, web)
	bound := create(t, c, newBoundPod("default", "bound", "node-1"))
	rs := create(t, c, newReplicaSet("default", "rs", 1))
	secret := create(t, c, newSecret("default", "s", map[string][]byte{"k": []byte("v")}))
	heldIn := newSecret("default", "held", nil)
	heldIn.Meta().Finalizers = []string{"example.com/hold"}
	create(t, c, heldIn)
	resp, err := c.Delete(testCtx(t), &kplanev1.DeleteRequest{Kind: "Secret", Namespace: "default", Name: "held"})
	must(t, err, "mark held for deletion")
	held := resp.GetObject()

	// Builders for variations of valid objects.
	pod := func(mut func(p *kplanev1.Pod)) *kplanev1.Object {
		o := newPod("default", "new-pod", nil)
		mut(o.GetPod())
		return o
	}
	replicaSet := func(mut func(rs *kplanev1.ReplicaSet)) *kplanev1.Object {
		o := newReplicaSet("default", "new-rs", 1)
		mut(o.GetReplicaSet())
		return o
	}
	cronJob := func(mut func(cj *kplanev1.CronJob)) *kplanev1.Object {
		cj := &kplanev1.CronJob{Metadata: meta("default", "new-cron", nil), Spec: &kplanev1.CronJobSpec{
			Schedule: "*/5 * * * *", JobTemplate: &kplanev1.JobTemplateSpec{Spec: &kplanev1.JobSpec{
				Template: &kplanev1.PodTemplateSpec{Spec: &kplanev1.PodSpec{RestartPolicy: "Never", Containers: podSpec().Containers}},
			}},
		}}
		mut(cj)
		return kplanev1.MustWrap(cj)
	}
	changed := func(base *kplanev1.Object, mut func(o *kplanev1.Object)) *kplanev1.Object {
		o := proto.Clone(base).(*kplanev1.Object)
		mut(o)
		return o
	}
	createReq := func(o *kplanev1.Object) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.Create(ctx, &kplanev1.CreateRequest{Object: o})
			return err
		}
	}
	updateReq := func(o *kplanev1.Object) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.Update(ctx, &kplanev1.UpdateRequest{Object: o})
			return err
		}
	}
	deleteReq := func(req *kplanev1.DeleteRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.Delete(ctx, req)
			return err
		}
	}
	listReq := func(req *kplanev1.ListRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.List(ctx, req)
			return err
		}
	}
	watchReq := func(req *kplanev1.WatchRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			stream, err := c.Watch(ctx, req)
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}
	}

	cases := []struct {
		name string
		run  func(context.Context) error
		code codes.Code
		msg  []string
	}{
		// CronJob
		{"cron schedule", createReq(cronJob(func(cj *kplanev1.CronJob) { cj.Spec.Schedule = "every minute" })), codes.InvalidArgument,
			[]string{`CronJob "new-cron" is invalid`, `spec.schedule: Invalid value: "every minute": expected exactly 5 fields, found 2`}},
		{"cron time zone", createReq(cronJob(func(cj *kplanev1.CronJob) { cj.Spec.TimeZone = proto.String("Moon/Base") })), codes.InvalidArgument,
			[]string{`spec.timeZone: Invalid value: "Moon/Base": unknown time zone Moon/Base`}},
		{"cron policy", createReq(cronJob(func(cj *kplanev1.CronJob) { cj.Spec.ConcurrencyPolicy = "Never" })), codes.InvalidArgument,
			[]string{`spec.concurrencyPolicy: Unsupported value: "Never"`}},
		{"cron history", createReq(cronJob(func(cj *kplanev1.CronJob) { cj.Spec.FailedJobsHistoryLimit = proto.Int32(-1) })), codes.InvalidArgument,
			[]string{"spec.failedJobsHistoryLimit: must be greater than or equal to 0"}},
		{"cron restart policy", createReq(cronJob(func(cj *kplanev1.CronJob) { cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = "Always" })), codes.InvalidArgument,
			[]string{`spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"`}},
		// names
		{"uppercase name", createReq(newPod("default", "Web", nil)), codes.InvalidArgument,
			[]string{`Pod "Web" is invalid`, `metadata.name: Invalid value: "Web"`, "lowercase RFC 1123 subdomain"}},
		{"name too long", createReq(newPod("default", strings.Repeat("a", 254), nil)), codes.InvalidArgument,
			[]string{"metadata.name", "must be no more than 253 characters"}},
		{"leading dash", createReq(newPod("default", "-web", nil)), codes.InvalidArgument,
			[]string{`metadata.name: Invalid value: "-web"`, "must start and end with an alphanumeric character"}},
		{"no name or generateName", createReq(newPod("default", "", nil)), codes.InvalidArgument,
			[]string{"metadata.name: Required value: name or generateName is required"}},
		{"bad generateName", createReq(pod(func(p *kplanev1.Pod) { p.Metadata.Name, p.Metadata.GenerateName = "", "Web-" })), codes.InvalidArgument,
			[]string{`metadata.generateName: Invalid value: "Web-"`}},
		{"service name not DNS-1035", createReq(kplanev1.MustWrap(&kplanev1.Service{Metadata: meta("default", "1svc", nil),
			Spec: &kplanev1.ServiceSpec{Ports: []*kplanev1.ServicePort{{Port: 80}}}})), codes.InvalidArgument,
			[]string{`metadata.name: Invalid value: "1svc"`, "DNS-1035"}},
		{"namespaced kind without namespace", createReq(newPod("", "web2", nil)), codes.InvalidArgument,
			[]string{"metadata.namespace: Required value"}},
		// numbers and quantities
		{"negative replicas", createReq(replicaSet(func(rs *kplanev1.ReplicaSet) { rs.Spec.Replicas = proto.Int32(-1) })), codes.InvalidArgument,
			[]string{"spec.replicas: must be greater than or equal to 0"}},
		{"bad cpu quantity", createReq(pod(func(p *kplanev1.Pod) {
			p.Spec.Containers[0].Resources = &kplanev1.ResourceRequirements{Limits: map[string]string{"cpu": "lots"}}
		})), codes.InvalidArgument, []string{`spec.containers[0].resources.limits["cpu"]: Invalid value: "lots"`}},
		{"negative memory quantity", createReq(pod(func(p *kplanev1.Pod) {
			p.Spec.Containers[0].Resources = &kplanev1.ResourceRequirements{Requests: map[string]string{"memory": "-1Gi"}}
		})), codes.InvalidArgument, []string{`spec.containers[0].resources.requests["memory"]`, "must be greater than or equal to 0"}},
		{"request above limit", createReq(pod(func(p *kplanev1.Pod) {
			p.Spec.Containers[0].Resources = &kplanev1.ResourceRequirements{
				Requests: map[string]string{"cpu": "2"}, Limits: map[string]string{"cpu": "1"}}
		})), codes.InvalidArgument, []string{`spec.containers[0].resources.requests["cpu"]`, "must be less than or equal to cpu limit"}},
		{"negative grace period in spec", createReq(pod(func(p *kplanev1.Pod) { p.Spec.TerminationGracePeriodSeconds = proto.Int64(-5) })),
			codes.InvalidArgument, []string{"spec.terminationGracePeriodSeconds", "must be greater than or equal to 0"}},
		{"bad container port", createReq(pod(func(p *kplanev1.Pod) {
			p.Spec.Containers[0].Ports = []*kplanev1.ContainerPort{{ContainerPort: 70000}}
		})), codes.InvalidArgument, []string{"spec.containers[0].ports[0].containerPort", "must be between 1 and 65535"}},
		// selectors
		{"bad selector operator in ReplicaSet", createReq(replicaSet(func(rs *kplanev1.ReplicaSet) {
			rs.Spec.Selector.MatchExpressions = []*kplanev1.LabelSelectorRequirement{{Key: "app", Operator: "Like", Values: []string{"x"}}}
		})), codes.InvalidArgument, []string{"spec.selector.matchExpressions[0].operator", "Like"}},
		{"bad selector key in ReplicaSet", createReq(replicaSet(func(rs *kplanev1.ReplicaSet) {
			rs.Spec.Selector.MatchLabels = map[string]string{"bad key!": "x"}
		})), codes.InvalidArgument, []string{"spec.selector.matchLabels", "bad key!"}},
		{"selector does not match template", createReq(replicaSet(func(rs *kplanev1.ReplicaSet) {
			rs.Spec.Selector.MatchLabels = map[string]string{"app": "other"}
		})), codes.InvalidArgument, []string{"spec.template.metadata.labels", "selector does not match template labels"}},
		{"empty ReplicaSet selector", createReq(replicaSet(func(rs *kplanev1.ReplicaSet) { rs.Spec.Selector = &kplanev1.LabelSelector{} })),
			codes.InvalidArgument, []string{"spec.selector", "empty selector is invalid"}},
		{"bad label key", createReq(newPod("default", "new-pod", map[string]string{"bad key!": "x"})), codes.InvalidArgument,
			[]string{`metadata.labels: Invalid value: "bad key!"`}},
		{"bad label value", createReq(newPod("default", "new-pod", map[string]string{"app": "no spaces"})), codes.InvalidArgument,
			[]string{`metadata.labels["app"]: Invalid value: "no spaces"`}},
		{"label value too long", createReq(newPod("default", "new-pod", map[string]string{"app": strings.Repeat("x", 64)})), codes.InvalidArgument,
			[]string{`metadata.labels["app"]`, "must be no more than 63 characters"}},
		// required fields and enums
		{"missing containers", createReq(pod(func(p *kplanev1.Pod) { p.Spec.Containers = nil })), codes.InvalidArgument,
			[]string{"spec.containers: Required value"}},
		{"missing image", createReq(pod(func(p *kplanev1.Pod) { p.Spec.Containers[0].Image = "" })), codes.InvalidArgument,
			[]string{"spec.containers[0].image: Required value"}},
		{"missing spec", createReq(kplanev1.MustWrap(&kplanev1.Pod{Metadata: meta("default", "nospec", nil)})), codes.InvalidArgument,
			[]string{"spec"}},
		{"bad restartPolicy", createReq(pod(func(p *kplanev1.Pod) { p.Spec.RestartPolicy = "Sometimes" })), codes.InvalidArgument,
			[]string{`spec.restartPolicy: Unsupported value: "Sometimes"`, `"Always"`}},
		{"bad taint effect", createReq(kplanev1.MustWrap(&kplanev1.Node{Metadata: meta("", "node-2", nil),
			Spec: &kplanev1.NodeSpec{Taints: []*kplanev1.Taint{{Key: "k", Effect: "NoWay"}}}})), codes.InvalidArgument,
			[]string{`spec.taints[0].effect: Unsupported value: "NoWay"`}},
		{"bad env var name", createReq(pod(func(p *kplanev1.Pod) {
			p.Spec.Containers[0].Env = []*kplanev1.EnvVar{{Name: "1=bad", Value: "x"}}
		})), codes.InvalidArgument, []string{"spec.containers[0].env[0].name"}},
		// kinds and shapes
		{"unknown kind", func(ctx context.Context) error {
			_, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "HorizontalPodAutoscaler", Namespace: "default", Name: "x"})
			return err
		}, codes.InvalidArgument, []string{`unknown kind "HorizontalPodAutoscaler"`, "known kinds:", "ReplicaSet"}},
		{"kind in wrong case", listReq(&kplanev1.ListRequest{Kind: "pod"}), codes.InvalidArgument, []string{`unknown kind "pod"`}},
		{"empty object", createReq(&kplanev1.Object{}), codes.InvalidArgument, []string{"exactly one kind must be set"}},
		{"no object", func(ctx context.Context) error {
			_, err := c.Create(ctx, &kplanev1.CreateRequest{})
			return err
		}, codes.InvalidArgument, []string{"object: required"}},
		{"update of an empty object", updateReq(&kplanev1.Object{}), codes.InvalidArgument, []string{"exactly one kind must be set"}},
		{"UpdateStatus of a kind without status", func(ctx context.Context) error {
			_, err := c.UpdateStatus(ctx, &kplanev1.UpdateStatusRequest{Object: secret})
			return err
		}, codes.InvalidArgument, []string{"kind Secret has no status"}},
		// sizes
		{"oversize object", createReq(newSecret("default", "big", map[string][]byte{"blob": make([]byte, maxObject+1)})),
			codes.InvalidArgument, []string{`Secret "big" is too large`, "the limit is 65536"}},
		{"request over the gRPC limit", createReq(newSecret("default", "huge", map[string][]byte{"blob": make([]byte, 4<<20)})),
			codes.ResourceExhausted, []string{"larger than max"}},
		// creates that collide or point nowhere
		{"resourceVersion on create", createReq(changed(newPod("default", "new-pod", nil), func(o *kplanev1.Object) { o.Meta().ResourceVersion = "5" })),
			codes.InvalidArgument, []string{"metadata.resourceVersion: must not be set on create"}},
		{"missing namespace", createReq(newPod("nope", "web", nil)), codes.NotFound, []string{`namespace "nope" not found`}},
		{"name taken", createReq(newPod("default", "web", nil)), codes.AlreadyExists, []string{`Pod "default/web" already exists`}},
		// updates
		{"stale resourceVersion", updateReq(changed(staleWeb, func(o *kplanev1.Object) { o.Meta().Labels["v"] = "3" })), codes.Aborted,
			[]string{"the object has been modified", "resourceVersion " + staleWeb.Meta().GetResourceVersion()}},
		{"malformed resourceVersion", updateReq(changed(web, func(o *kplanev1.Object) { o.Meta().ResourceVersion = "abc" })), codes.InvalidArgument,
			[]string{`resourceVersion "abc": must be a non-negative integer`}},
		{"status sent to conditional Update", updateReq(changed(web, func(o *kplanev1.Object) { o.GetPod().Status.Phase = "Running" })),
			codes.InvalidArgument, []string{"status: may not be changed by Update; use UpdateStatus"}},
		{"invalid spec on update", updateReq(changed(web, func(o *kplanev1.Object) { o.GetPod().Spec.Containers[0].Image = "" })),
			codes.InvalidArgument, []string{"spec.containers[0].image: Required value"}},
		{"nodeName changed once set", updateReq(changed(bound, func(o *kplanev1.Object) { o.GetPod().Spec.NodeName = "node-2" })),
			codes.InvalidArgument, []string{`spec.nodeName: Invalid value: "node-2"`, "immutable"}},
		{"pod spec field other than image", updateReq(changed(web, func(o *kplanev1.Object) { o.GetPod().Spec.RestartPolicy = "Never" })),
			codes.InvalidArgument, []string{"spec: Forbidden: pod updates may not change fields other than"}},
		{"ReplicaSet selector changed", updateReq(changed(rs, func(o *kplanev1.Object) {
			r := o.GetReplicaSet()
			r.Spec.Selector.MatchLabels["tier"] = "x"
			r.Spec.Template.Metadata.Labels["tier"] = "x"
		})), codes.InvalidArgument, []string{"spec.selector", "field is immutable"}},
		{"Secret type changed", updateReq(changed(secret, func(o *kplanev1.Object) { o.GetSecret().Type = "example.com/custom" })),
			codes.InvalidArgument, []string{"type: Invalid value", "field is immutable"}},
		{"name changed on update", updateReq(changed(web, func(o *kplanev1.Object) { o.Meta().Name = "renamed" })),
			codes.NotFound, []string{`Pod "renamed" not found`}},
		{"finalizer added while deleting", updateReq(changed(held, func(o *kplanev1.Object) {
			o.Meta().Finalizers = append(o.Meta().Finalizers, "example.com/late")
		})), codes.InvalidArgument, []string{"no new finalizers can be added while the object is being deleted"}},
		{"update of an absent object", updateReq(newPod("default", "absent", nil)), codes.NotFound, []string{`Pod "absent" not found`}},
		// deletes
		{"negative gracePeriodSeconds", deleteReq(&kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "bound", GracePeriodSeconds: proto.Int64(-1)}),
			codes.InvalidArgument, []string{"gracePeriodSeconds: must be greater than or equal to 0"}},
		{"bad propagationPolicy", deleteReq(&kplanev1.DeleteRequest{Kind: "ReplicaSet", Namespace: "default", Name: "rs", PropagationPolicy: "Sideways"}),
			codes.InvalidArgument, []string{`propagationPolicy: unsupported value "Sideways"`, `"Orphan"`}},
		{"stale delete precondition", deleteReq(&kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "web",
			Preconditions: &kplanev1.Preconditions{ResourceVersion: staleWeb.Meta().GetResourceVersion()}}),
			codes.Aborted, []string{"precondition failed: resourceVersion " + staleWeb.Meta().GetResourceVersion()}},
		{"wrong uid precondition", deleteReq(&kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "web",
			Preconditions: &kplanev1.Preconditions{Uid: "00000000-0000-0000-0000-000000000000"}}),
			codes.Aborted, []string{"precondition failed: uid 00000000-0000-0000-0000-000000000000"}},
		{"delete without name", deleteReq(&kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default"}), codes.InvalidArgument, []string{"name: required"}},
		{"delete of an absent object", deleteReq(&kplanev1.DeleteRequest{Kind: "Pod", Namespace: "default", Name: "absent"}),
			codes.NotFound, []string{`Pod "absent" not found in namespace "default"`}},
		{"non-empty namespace", deleteReq(&kplanev1.DeleteRequest{Kind: "Namespace", Name: "team"}), codes.FailedPrecondition,
			[]string{`namespace "team" is not empty`, "1 Pod"}},
		{"system namespace", deleteReq(&kplanev1.DeleteRequest{Kind: "Namespace", Name: "kplane-system"}), codes.FailedPrecondition,
			[]string{`namespace "kplane-system" is a system namespace`}},
		// lists and watches
		{"bad label selector in List", listReq(&kplanev1.ListRequest{Kind: "Pod", LabelSelector: "app in (web"}), codes.InvalidArgument,
			[]string{"labelSelector: unable to parse requirement"}},
		{"bad label key in List selector", listReq(&kplanev1.ListRequest{Kind: "Pod", LabelSelector: "bad key!=x"}), codes.InvalidArgument,
			[]string{"labelSelector:"}},
		{"bad field selector path", listReq(&kplanev1.ListRequest{Kind: "Pod", FieldSelector: "spec.nope=1"}), codes.InvalidArgument,
			[]string{"fieldSelector:", "Pod has no field spec.nope"}},
		{"field selector on a list field", listReq(&kplanev1.ListRequest{Kind: "Pod", FieldSelector: "spec.containers=x"}), codes.InvalidArgument,
			[]string{"fieldSelector:", "only scalar fields can be selected"}},
		{"negative limit", listReq(&kplanev1.ListRequest{Kind: "Pod", Limit: -1}), codes.InvalidArgument,
			[]string{"limit: must be greater than or equal to 0"}},
		{"malformed continue token", listReq(&kplanev1.ListRequest{Kind: "Pod", Limit: 1, Continue: "not a token"}), codes.InvalidArgument,
			[]string{`continue: malformed token "not a token"`}},
		{"watch from a malformed resourceVersion", watchReq(&kplanev1.WatchRequest{Kind: "Pod", ResourceVersion: "-3"}), codes.InvalidArgument,
			[]string{`resourceVersion "-3": must be a non-negative integer`}},
		{"watch with a bad selector", watchReq(&kplanev1.WatchRequest{Kind: "Pod", LabelSelector: "=x"}), codes.InvalidArgument,
			[]string{"labelSelector:"}},
		{"get with namespace on cluster-scoped kind", func(ctx context.Context) error {
			_, err := c.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Namespace: "default", Name: "node-1"})
			return err
		}, codes.InvalidArgument, []string{"namespace: must be empty for cluster-scoped kind Node"}},
	}
	if len(cases) < 30 {
		t.Fatalf("only %d bad inputs; the issue asks for at least 30", len(cases))
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, c)
			requireCode(t, tc.run(testCtx(t)), tc.code, tc.msg...)
			if d := before.diff(snapshot(t, c)); d != "" {
				t.Fatalf("the rejected request changed the store: %s", d)
			}
		})
	}
}
