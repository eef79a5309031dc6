package manifest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestDecodeMultiDocumentYAML(t *testing.T) {
	src := `# leading comment
apiVersion: v1
kind: Pod
metadata:
  name: a
spec:
  containers:
  - name: c
    image: busybox
    resources:
      requests:
        cpu: 1        # unquoted quantities are numbers in YAML
        memory: 0.5
---
# only a comment: skipped
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: b, labels: {app: b}}
spec:
  replicas: 2
`
	docs, err := Decode("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 {
		t.Fatalf("got %d documents, want 2", len(docs))
	}
	pod := docs[0].Object.GetPod()
	if pod.GetMetadata().GetName() != "a" || pod.GetSpec().GetContainers()[0].GetImage() != "busybox" {
		t.Errorf("pod decoded wrong: %v", pod)
	}
	if got := pod.GetSpec().GetContainers()[0].GetResources().GetRequests(); got["cpu"] != "1" || got["memory"] != "0.5" {
		t.Errorf("quantities = %v, want cpu 1 and memory 0.5 as strings", got)
	}
	rs := docs[1].Object.GetReplicaSet()
	if rs.GetSpec().GetReplicas() != 2 || rs.GetMetadata().GetLabels()["app"] != "b" {
		t.Errorf("replica set decoded wrong: %v", rs)
	}
	if docs[1].Where() != "f.yaml: document 3" {
		t.Errorf("Where() = %q, want the index counted over all documents", docs[1].Where())
	}
}

func TestDecodeJSONAndList(t *testing.T) {
	src := `{"apiVersion": "v1", "kind": "List", "items": [
	  {"kind": "Namespace", "metadata": {"name": "a"}},
	  {"kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dmFsdWU="}, "type": "Opaque"}
	]}`
	docs, err := Decode("l.json", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[0].Object.GetNamespace() == nil || docs[1].Item != 1 {
		t.Fatalf("unexpected documents: %v", docs)
	}
	if got := string(docs[1].Object.GetSecret().GetData()["k"]); got != "value" {
		t.Errorf("secret data = %q, want base64-decoded %q", got, "value")
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"missing kind", "metadata: {name: a}\n", "f.yaml: document 1: kind: Required value"},
		{"unknown kind", "kind: HorizontalPodAutoscaler\n", `f.yaml: document 1: kind: unknown kind "HorizontalPodAutoscaler"; known kinds: ClusterRole, ClusterRoleBinding, ControllerRevision, CronJob, DaemonSet, Deployment, Endpoints,`},
		{"kind in wrong case", "kind: pod\n", `kind: unknown kind "pod" (did you mean "Pod"?)`},
		{"unknown field", "kind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    imagee: x\n",
			`f.yaml: document 1: spec.containers[0].imagee: unknown field "imagee"`},
		{"snake case", "kind: Pod\nspec:\n  restart_policy: Never\n", `spec.restart_policy: unknown field "restart_policy" (did you mean "restartPolicy"?)`},
		{"wrong type", "kind: Pod\nspec:\n  containers: {}\n", "spec.containers: expected a list, got an object"},
		{"bool for string", "kind: Pod\nmetadata:\n  labels:\n    enabled: true\n", `metadata.labels["enabled"]: expected a string, got true`},
		{"int overflow", "kind: ReplicaSet\nspec:\n  replicas: 3000000000\n", "spec.replicas: 3000000000 is not a 32-bit integer"},
		{"fraction for int", "kind: ReplicaSet\nspec:\n  replicas: 1.5\n", "spec.replicas: 1.5 is not a 32-bit integer"},
		{"bad base64", "kind: Secret\ndata:\n  k: '%%%'\n", `data["k"]: invalid base64 data`},
		{"bad timestamp", "kind: Lease\nspec:\n  renewTime: yesterday\n", `spec.renewTime: invalid timestamp "yesterday"`},
		{"not an object", "- a\n- b\n", "f.yaml: document 1: expected an object"},
		{"bad yaml line", "kind: Pod\n---\nkind: Pod\nmetadata:\n  name: a\n   bad: indent\n", "f.yaml: document 2: invalid YAML: line 6:"},
		{"duplicate key", "kind: Pod\nkind: Pod\n", "f.yaml: document 1: invalid YAML:"},
		{"apiVersion type", "apiVersion: 1\nkind: Pod\n", "apiVersion: expected a string"},
		{"port of the wrong type", "kind: Service\nspec:\n  ports:\n  - port: 80\n    targetPort: true\n",
			"spec.ports[0].targetPort: expected a 32-bit integer or a string, got true"},
		{"port overflow", "kind: Service\nspec:\n  ports:\n  - port: 80\n    targetPort: 5000000000\n",
			"spec.ports[0].targetPort: expected a 32-bit integer or a string, got the number 5000000000"},
		{"list item", "kind: List\nitems:\n- kind: Pod\n  bogus: 1\n", `f.yaml: document 1, items[0]: bogus: unknown field "bogus"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode("f.yaml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %v, want it to contain %q", err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestNullMeansUnset(t *testing.T) {
	docs, err := Decode("f.yaml", []byte("kind: Pod\nmetadata:\n  name: a\n  labels: null\nspec: ~\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := docs[0].Object.GetPod(); p.Spec != nil || p.Metadata.Labels != nil {
		t.Errorf("nulls should leave fields unset: %v", p)
	}
}

func TestToMapRendersManifestForm(t *testing.T) {
	obj := kplanev1.MustWrap(&kplanev1.Job{
		Metadata: &kplanev1.ObjectMeta{Name: "j", Namespace: "default", Generation: 3, CreationTimestamp: timestamppb.New(timestamppb.Now().AsTime().Truncate(1e9))},
		Spec:     &kplanev1.JobSpec{ActiveDeadlineSeconds: proto.Int64(60)},
	})
	m, err := ToMap(obj)
	if err != nil {
		t.Fatal(err)
	}
	if m["apiVersion"] != "batch/v1" || m["kind"] != "Job" {
		t.Errorf("apiVersion/kind = %v/%v", m["apiVersion"], m["kind"])
	}
	if g := m["metadata"].(map[string]any)["generation"]; g != json.Number("3") {
		t.Errorf("generation = %#v, want the number 3 (not protojson's string)", g)
	}
	if d := m["spec"].(map[string]any)["activeDeadlineSeconds"]; d != json.Number("60") {
		t.Errorf("activeDeadlineSeconds = %#v, want the number 60", d)
	}
}

// An IntOrString reads and prints as a bare number or string, as in
// Kubernetes, and keeps which one it was.
func TestIntOrStringIsANumberOrAString(t *testing.T) {
	src := "kind: Service\nmetadata: {name: s}\nspec:\n  ports:\n  - {name: a, port: 80, targetPort: 8080}\n  - {name: b, port: 81, targetPort: http}\n"
	docs, err := Decode("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	ports := docs[0].Object.GetService().GetSpec().GetPorts()
	if !proto.Equal(ports[0].TargetPort, kplanev1.IntOrStringFromInt32(8080)) || !proto.Equal(ports[1].TargetPort, kplanev1.IntOrStringFromString("http")) {
		t.Fatalf("decoded target ports %v, %v", ports[0].TargetPort, ports[1].TargetPort)
	}
	m, err := ToMap(docs[0].Object)
	if err != nil {
		t.Fatal(err)
	}
	out := m["spec"].(map[string]any)["ports"].([]any)
	if a, b := out[0].(map[string]any)["targetPort"], out[1].(map[string]any)["targetPort"]; a != json.Number("8080") || b != "http" {
		t.Errorf("printed target ports %#v, %#v; want the number 8080 and the string http", a, b)
	}
}

// TestExamplesRoundTrip checks that every example decodes, and that the
// manifest form printed for it decodes to the same object again: what
// "get -o yaml" prints, "apply -f" accepts.
func TestExamplesRoundTrip(t *testing.T) {
	files, err := filepath.Glob("../../../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		docs, err := ReadPaths([]string{f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var objs []*kplanev1.Object
		for _, d := range docs {
			seen[d.Object.KindName()] = true
			objs = append(objs, d.Object)
		}
		for _, asList := range []bool{false, true} {
			var y, j bytes.Buffer
			if err := WriteYAML(&y, objs, asList); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&j, objs, asList); err != nil {
				t.Fatal(err)
			}
			for _, out := range []*bytes.Buffer{&y, &j} {
				back, err := Decode("out", out.Bytes())
				if err != nil {
					t.Fatalf("%s: printed form does not decode: %v\n%s", f, err, out)
				}
				if len(back) != len(objs) {
					t.Fatalf("%s: %d objects came back, want %d", f, len(back), len(objs))
				}
				for i := range objs {
					if !proto.Equal(back[i].Object, objs[i]) {
						t.Errorf("%s: round trip changed the object:\n got %v\nwant %v", f, back[i].Object, objs[i])
					}
				}
			}
		}
	}
	for _, k := range kplanev1.KindNames() {
		if !seen[k] {
			t.Errorf("examples/ has no manifest of kind %s", k)
		}
	}
}

func TestReadPaths(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yaml", "kind: Namespace\nmetadata: {name: b}\n")
	write("a.json", `{"kind": "Namespace", "metadata": {"name": "a"}}`)
	write("notes.txt", "not a manifest")
	docs, err := ReadPaths([]string{dir, "-"}, strings.NewReader("kind: Namespace\nmetadata: {name: c}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var names, sources []string
	for _, d := range docs {
		names = append(names, d.Object.Meta().GetName())
		sources = append(sources, filepath.Base(d.Source))
	}
	if !reflect.DeepEqual(names, []string{"a", "b", "c"}) || sources[2] != Stdin {
		t.Errorf("names %v from %v; want a, b (directory in name order, .txt skipped), then c from stdin", names, sources)
	}
	if _, err := ReadPaths([]string{filepath.Join(dir, "missing.yaml")}, nil); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestDesiredStripsServerFields(t *testing.T) {
	obj := kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: "p", Uid: "u", ResourceVersion: "7", Generation: 2,
			CreationTimestamp: timestamppb.Now(), Labels: map[string]string{"a": "b"}},
		Status: &kplanev1.PodStatus{Phase: "Running"},
	})
	Desired(obj)
	want := kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}}})
	if !proto.Equal(obj, want) {
		t.Errorf("Desired left %v, want %v", obj, want)
	}
}

func TestMerge(t *testing.T) {
	current := map[string]any{
		"metadata": map[string]any{"name": "p", "uid": "u", "labels": map[string]any{"a": "1", "added-by-hand": "x", "old": "y"}},
		"spec":     map[string]any{"nodeName": "n1", "containers": []any{"c1"}, "restartPolicy": "Always"},
		"status":   map[string]any{"phase": "Running"},
	}
	last := map[string]any{
		"metadata": map[string]any{"name": "p", "labels": map[string]any{"a": "1", "old": "y"}},
		"spec":     map[string]any{"containers": []any{"c1"}, "restartPolicy": "Always"},
	}
	desired := map[string]any{
		"metadata": map[string]any{"name": "p", "labels": map[string]any{"a": "2"}},
		"spec":     map[string]any{"containers": []any{"c2"}},
	}
	got := Merge(current, last, desired)
	want := map[string]any{
		"metadata": map[string]any{"name": "p", "uid": "u", "labels": map[string]any{"a": "2", "added-by-hand": "x"}},
		"spec":     map[string]any{"nodeName": "n1", "containers": []any{"c2"}},
		"status":   map[string]any{"phase": "Running"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Merge =\n%v\nwant\n%v", got, want)
	}
	if current["spec"].(map[string]any)["restartPolicy"] != "Always" {
		t.Error("Merge modified its input")
	}
	// A map that only apply had set disappears entirely.
	got = Merge(map[string]any{"a": map[string]any{"k": "v"}}, map[string]any{"a": map[string]any{"k": "v"}}, nil)
	if len(got) != 0 {
		t.Errorf("Merge kept %v, want the field removed", got)
	}
}
