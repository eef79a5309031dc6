package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/client"
)

const deploymentManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    kubernetes.io/change-cause: first
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: web:1
`

// addSet writes what deploymentctl would: a ReplicaSet of the deployment
// with a revision and the given template image.
func (c *cluster) addSet(cl *client.Client, d *kplanev1.Deployment, name, rev, image string, replicas int32) {
	c.t.Helper()
	tmpl := proto.Clone(d.Spec.Template).(*kplanev1.PodTemplateSpec)
	tmpl.Spec.Containers[0].Image = image
	tmpl.Metadata.Labels["pod-template-hash"] = name
	_, err := client.ReplicaSets(cl).Create(c.ctx, &kplanev1.ReplicaSet{
		Metadata: &kplanev1.ObjectMeta{Name: "web-" + name, Namespace: "default", Labels: tmpl.Metadata.Labels,
			Annotations:     map[string]string{kplanev1.AnnotationDeploymentRevision: rev, kplanev1.AnnotationChangeCause: "cause " + rev},
			OwnerReferences: []*kplanev1.OwnerReference{{ApiVersion: "apps/v1", Kind: "Deployment", Name: "web", Uid: d.Metadata.Uid, Controller: true}}},
		Spec: &kplanev1.ReplicaSetSpec{Replicas: proto.Int32(replicas),
			Selector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web", "pod-template-hash": name}}, Template: tmpl},
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

func TestDeploymentCommands(t *testing.T) {
	c := newCluster(t)
	cl := c.client()
	c.must(deploymentManifest, "apply", "-f", "-")
	d, err := client.Deployments(cl).Get(c.ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}

	// get: kubectl's columns.
	d.Status = &kplanev1.DeploymentStatus{ObservedGeneration: d.Metadata.Generation, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2}
	if _, err = client.Deployments(cl).UpdateStatus(c.ctx, d); err != nil {
		t.Fatal(err)
	}
	out := c.must("", "get", "deploy")
	if !strings.Contains(out, "NAME   READY   UP-TO-DATE   AVAILABLE   AGE") || !strings.Contains(out, "web    2/3     3            2") {
		t.Fatalf("get deploy:\n%s", out)
	}
	if out := c.must("", "get", "deployments", "-o", "wide"); !strings.Contains(out, "web:1") || !strings.Contains(out, "app=web") {
		t.Fatalf("get -o wide:\n%s", out)
	}

	// scale through the scale subresource.
	if out := c.must("", "scale", "deploy/web", "--replicas=5"); out != "deployment/web scaled\n" {
		t.Fatalf("scale: %q", out)
	}
	if n := c.get("Deployment", "default", "web").GetDeployment().GetSpec().GetReplicas(); n != 5 {
		t.Fatalf("replicas %d after scale", n)
	}
	if e := c.fails("", "scale", "deploy/web", "--current-replicas=3", "--replicas=1"); !strings.Contains(e, "expected replicas to be 3, was 5") {
		t.Fatalf("current-replicas: %q", e)
	}

	// set image.
	if out := c.must("", "set", "image", "deploy/web", "web=web:2"); out != "deployment/web image updated\n" {
		t.Fatalf("set image: %q", out)
	}
	if img := c.get("Deployment", "default", "web").GetDeployment().GetSpec().GetTemplate().GetSpec().GetContainers()[0].GetImage(); img != "web:2" {
		t.Fatalf("image %q", img)
	}
	if e := c.fails("", "set", "image", "deploy/web", "nope=x"); !strings.Contains(e, `unable to find container named "nope"`) {
		t.Fatalf("set image bad container: %q", e)
	}

	// pause, resume, restart.
	c.must("", "rollout", "pause", "deploy/web")
	if !c.get("Deployment", "default", "web").GetDeployment().GetSpec().GetPaused() {
		t.Fatal("not paused")
	}
	if e := c.fails("", "rollout", "pause", "deploy/web"); !strings.Contains(e, "already paused") {
		t.Fatalf("second pause: %q", e)
	}
	if e := c.fails("", "rollout", "restart", "deploy/web"); !strings.Contains(e, "can't restart paused deployment") {
		t.Fatalf("restart paused: %q", e)
	}
	if out := c.must("", "rollout", "resume", "deploy/web"); out != "deployment/web resumed\n" {
		t.Fatalf("resume: %q", out)
	}
	c.must("", "rollout", "restart", "deploy/web")
	cur := c.get("Deployment", "default", "web").GetDeployment()
	if cur.GetSpec().GetTemplate().GetMetadata().GetAnnotations()[kplanev1.AnnotationRestartedAt] == "" {
		t.Fatal("restart did not set restartedAt")
	}

	// history and undo over the sets a controller would have made.
	c.addSet(cl, cur, "aaa", "1", "web:1", 0)
	c.addSet(cl, cur, "bbb", "2", "web:2", 5)
	cur.Metadata.Annotations[kplanev1.AnnotationDeploymentRevision] = "2"
	if _, err := client.Deployments(cl).Update(c.ctx, cur); err != nil {
		t.Fatal(err)
	}
	out = c.must("", "rollout", "history", "deploy/web")
	if !strings.Contains(out, "REVISION  CHANGE-CAUSE\n1         cause 1\n2         cause 2\n") {
		t.Fatalf("history:\n%s", out)
	}
	if out := c.must("", "rollout", "history", "deploy/web", "--revision=1"); !strings.Contains(out, "with revision #1") || !strings.Contains(out, "web:1") ||
		strings.Contains(out, "pod-template-hash") {
		t.Fatalf("history --revision:\n%s", out)
	}
	if e := c.fails("", "rollout", "undo", "deploy/web", "--to-revision=7"); !strings.Contains(e, "unable to find specified revision 7 in history") {
		t.Fatalf("undo missing revision: %q", e)
	}
	if out := c.must("", "rollout", "undo", "deploy/web"); out != "deployment/web rolled back\n" {
		t.Fatalf("undo: %q", out)
	}
	back := c.get("Deployment", "default", "web").GetDeployment()
	if img := back.GetSpec().GetTemplate().GetSpec().GetContainers()[0].GetImage(); img != "web:1" {
		t.Fatalf("undo wrote image %q", img)
	}
	if _, ok := back.GetSpec().GetTemplate().GetMetadata().GetLabels()["pod-template-hash"]; ok {
		t.Fatal("undo copied the pod-template-hash label")
	}

	// describe shows the strategy and the sets.
	out = c.must("", "describe", "deploy", "web")
	for _, want := range []string{"StrategyType:", "RollingUpdate", "25% max unavailable, 25% max surge", "NewReplicaSet:", "web-aaa (0/0 replicas created)", "OldReplicaSets:", "web-bbb"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe lacks %q:\n%s", want, out)
		}
	}

	// rollout status follows the status by watch until done.
	wait := c.backgroundWatching("Deployment", "rollout", "status", "deploy/web", "--timeout=60s")
	st := c.get("Deployment", "default", "web").GetDeployment()
	st.Status = &kplanev1.DeploymentStatus{ObservedGeneration: st.Metadata.Generation, Replicas: 5, UpdatedReplicas: 5, ReadyReplicas: 5, AvailableReplicas: 5}
	if _, err := client.Deployments(cl).UpdateStatus(c.ctx, st); err != nil {
		t.Fatal(err)
	}
	r := wait()
	if r.code != 0 || !strings.HasSuffix(r.stdout, "deployment \"web\" successfully rolled out\n") {
		t.Fatalf("rollout status: %d %q %q", r.code, r.stdout, r.stderr)
	}
	st = c.get("Deployment", "default", "web").GetDeployment()
	st.Status.Conditions = []*kplanev1.Condition{{Type: "Progressing", Status: "False", Reason: "ProgressDeadlineExceeded"}}
	if _, err := client.Deployments(cl).UpdateStatus(c.ctx, st); err != nil {
		t.Fatal(err)
	}
	if e := c.fails("", "rollout", "status", "deploy/web"); !strings.Contains(e, `deployment "web" exceeded its progress deadline`) {
		t.Fatalf("status past deadline: %q", e)
	}
	if e := c.fails("", "rollout", "status", "rs/web-aaa"); !strings.Contains(e, "only deployments") {
		t.Fatalf("rollout of a rs: %q", e)
	}
}
