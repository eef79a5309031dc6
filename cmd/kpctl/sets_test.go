package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/rollout"
)

const statefulSetManifest = `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: 3
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: db
        image: db:2
`

const daemonSetManifest = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: logs
spec:
  selector:
    matchLabels: {app: logs}
  template:
    metadata:
      labels: {app: logs}
    spec:
      containers:
      - name: tail
        image: tail:2
`

// addRevision writes what the set's controller would: a ControllerRevision
// of the owner's template with the given image.
func (c *cluster) addRevision(cl *client.Client, kind string, owner *kplanev1.ObjectMeta, tmpl *kplanev1.PodTemplateSpec, image string, n int64) {
	c.t.Helper()
	t := proto.Clone(tmpl).(*kplanev1.PodTemplateSpec)
	t.Spec.Containers[0].Image = image
	if _, err := client.ControllerRevisions(cl).Create(c.ctx, rollout.NewRevision(kind, owner, t, n, nil)); err != nil {
		c.t.Fatal(err)
	}
}

// TestStatefulSetAndDaemonSetCommands: get with kubectl's columns, scale
// sts through the scale subresource, rollout status/history/undo from
// the ControllerRevisions, against a real apiserver.
func TestStatefulSetAndDaemonSetCommands(t *testing.T) {
	c := newCluster(t)
	cl := c.client()
	c.must(statefulSetManifest, "apply", "-f", "-")
	c.must(daemonSetManifest, "apply", "-f", "-")
	ss, err := client.StatefulSets(cl).Get(c.ctx, "default", "db")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := client.DaemonSets(cl).Get(c.ctx, "default", "logs")
	if err != nil {
		t.Fatal(err)
	}
	c.addRevision(cl, "StatefulSet", ss.Metadata, ss.Spec.Template, "db:1", 1)
	c.addRevision(cl, "StatefulSet", ss.Metadata, ss.Spec.Template, "db:2", 2)
	c.addRevision(cl, "DaemonSet", ds.Metadata, ds.Spec.Template, "tail:1", 1)
	c.addRevision(cl, "DaemonSet", ds.Metadata, ds.Spec.Template, "tail:2", 2)
	rev2 := rollout.RevisionName("db", ss.Spec.Template, nil)
	ss.Status = &kplanev1.StatefulSetStatus{ObservedGeneration: ss.Metadata.Generation, Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 3,
		CurrentReplicas: 3, CurrentRevision: rev2, UpdateRevision: rev2}
	if _, err := client.StatefulSets(cl).UpdateStatus(c.ctx, ss); err != nil {
		t.Fatal(err)
	}
	ds.Status = &kplanev1.DaemonSetStatus{ObservedGeneration: ds.Metadata.Generation, DesiredNumberScheduled: 4, CurrentNumberScheduled: 4,
		NumberReady: 4, UpdatedNumberScheduled: 2, NumberAvailable: 4}
	if _, err := client.DaemonSets(cl).UpdateStatus(c.ctx, ds); err != nil {
		t.Fatal(err)
	}

	out := c.must("", "get", "sts,ds")
	for _, want := range []string{"NAME   READY   AGE", "db     2/3", "NAME   DESIRED   CURRENT   READY   UP-TO-DATE   AVAILABLE   NODE SELECTOR   AGE",
		"logs   4         4         4       2            4           <none>"} {
		if !strings.Contains(out, want) {
			t.Errorf("get sts,ds: no %q in\n%s", want, out)
		}
	}

	if out := c.must("", "rollout", "status", "sts/db", "--watch=false"); out != "Waiting for 1 pods to be ready...\n" {
		t.Errorf("rollout status sts: %q", out)
	}
	if out := c.must("", "rollout", "status", "ds/logs", "--watch=false"); out != "Waiting for daemon set \"logs\" rollout to finish: 2 out of 4 new pods have been updated...\n" {
		t.Errorf("rollout status ds: %q", out)
	}
	if out := c.must("", "rollout", "history", "sts/db"); !strings.Contains(out, "statefulset/db \nREVISION  CHANGE-CAUSE\n1         <none>\n2         <none>\n") {
		t.Errorf("rollout history: %q", out)
	}
	if out := c.must("", "rollout", "history", "ds/logs", "--revision=1"); !strings.Contains(out, "daemonset/logs with revision #1") || !strings.Contains(out, "tail:1") {
		t.Errorf("rollout history --revision: %q", out)
	}
	if out := c.must("", "rollout", "undo", "sts/db"); out != "statefulset/db rolled back\n" {
		t.Errorf("undo: %q", out)
	}
	if got, _ := client.StatefulSets(cl).Get(c.ctx, "default", "db"); got.Spec.Template.Spec.Containers[0].Image != "db:1" {
		t.Errorf("undo wrote image %s", got.Spec.Template.Spec.Containers[0].Image)
	}
	if out := c.must("", "rollout", "undo", "ds/logs", "--to-revision=2"); out != "daemonset/logs skipped rollback (current template already matches revision)\n" {
		t.Errorf("undo to the current template: %q", out)
	}
	if e := c.fails("", "rollout", "undo", "ds/logs", "--to-revision=7"); !strings.Contains(e, "unable to find specified revision 7 in history") {
		t.Errorf("undo to a missing revision: %q", e)
	}
	if e := c.fails("", "rollout", "pause", "sts/db"); !strings.Contains(e, "statefulsets are not supported") {
		t.Errorf("pause sts: %q", e)
	}

	if out := c.must("", "scale", "sts", "db", "--replicas=5"); out != "statefulset/db scaled\n" {
		t.Errorf("scale: %q", out)
	}
	if got, _ := client.StatefulSets(cl).Get(c.ctx, "default", "db"); got.Spec.GetReplicas() != 5 {
		t.Errorf("scale wrote %d replicas", got.Spec.GetReplicas())
	}
	if e := c.fails("", "scale", "ds", "logs", "--replicas=2"); !strings.Contains(e, "cannot scale daemonsets") {
		t.Errorf("scale ds: %q", e)
	}
}
