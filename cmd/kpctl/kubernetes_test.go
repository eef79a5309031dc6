package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
	"github.com/kplane/kplane/cmd/kpctl/internal/manifest"
)

// TestKubernetesManifests applies the manifests of Kubernetes'
// documentation in testdata/kubernetes unchanged and reads each back as
// YAML and as JSON: every field path of the input must come back with the
// same name and value (the server may add fields: defaults, metadata).
func TestKubernetesManifests(t *testing.T) {
	c := newCluster(t)
	files, err := filepath.Glob("testdata/kubernetes/*.yaml")
	if err != nil || len(files) < 10 {
		t.Fatalf("want the ten kinds' manifests in testdata/kubernetes, got %v (%v)", files, err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := manifest.Decode(f, data)
		if err != nil || len(docs) != 1 {
			t.Fatalf("%s: want one object, got %d (%v)", f, len(docs), err)
		}
		kind, name := docs[0].Object.KindName(), docs[0].Object.Meta().GetName()
		seen[kind] = true
		in := parseOne(t, f, data)

		if got := c.must("", "apply", "-f", f); got != kinds.Ref(kind, name)+" created\n" {
			t.Errorf("apply %s: %q", f, got)
		}
		for _, format := range []string{"yaml", "json"} {
			out := parseOne(t, f+" read back as "+format, []byte(c.must("", "get", strings.ToLower(kind), name, "-o", format)))
			for _, d := range contains(in, out, "") {
				t.Errorf("%s, get -o %s: %s", f, format, d)
			}
		}
	}
	for _, kind := range []string{"Pod", "ReplicaSet", "ReplicationController", "Service", "Namespace",
		"Secret", "ServiceAccount", "Job", "PersistentVolumeClaim", "PersistentVolume"} {
		if !seen[kind] {
			t.Errorf("testdata/kubernetes has no %s", kind)
		}
	}
	// The headless service keeps its "None".
	if ip := c.get("Service", "default", "nginx").GetService().GetSpec().GetClusterIp(); ip != "None" {
		t.Errorf("headless service: clusterIP %q, want None", ip)
	}
}

// parseOne reads the one object of a YAML or JSON stream (comments and
// empty documents aside) with numbers kept as written.
func parseOne(t *testing.T, what string, data []byte) map[string]any {
	t.Helper()
	var obj map[string]any
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if m == nil {
			continue
		}
		if obj != nil {
			t.Fatalf("%s: more than one object", what)
		}
		obj = m
	}
	if obj == nil {
		t.Fatalf("%s: no object", what)
	}
	return obj
}

// contains reports every field of want (a decoded manifest) that got lacks
// or holds with another value. Lists must have the same length, element
// by element.
func contains(want, got any, path string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, got %v", path, got)}
		}
		var out []string
		for k, wv := range w {
			p := strings.TrimPrefix(path+"."+k, ".")
			gv, ok := g[k]
			if !ok {
				out = append(out, fmt.Sprintf("%s: missing", p))
				continue
			}
			out = append(out, contains(wv, gv, p)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %d list elements, got %v", path, len(w), got)}
		}
		var out []string
		for i := range w {
			out = append(out, contains(w[i], g[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: want %v, got %v", path, want, got)}
		}
		return nil
	}
}
