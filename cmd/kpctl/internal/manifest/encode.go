package manifest

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/apijson"
)

// ToMap renders an object in manifest form: apiVersion and kind next to the
// kind message's own fields (metadata, spec, status, ...).
func ToMap(obj *kplanev1.Object) (map[string]any, error) { return apijson.ObjectToMap(obj) }

// listOf renders objects as a single manifest, or as a List when asked to
// (a List is what kubectl prints for a listing, even of one item).
func listOf(objs []*kplanev1.Object, asList bool) (any, error) {
	items := make([]any, 0, len(objs))
	for _, o := range objs {
		m, err := ToMap(o)
		if err != nil {
			return nil, err
		}
		items = append(items, m)
	}
	if !asList && len(items) == 1 {
		return items[0], nil
	}
	return map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, nil
}

// WriteJSON prints objects as indented JSON. Keys are sorted, so output is
// stable.
func WriteJSON(w io.Writer, objs []*kplanev1.Object, asList bool) error {
	v, err := listOf(objs, asList)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// WriteYAML prints objects as YAML. Keys are sorted, so output is stable.
func WriteYAML(w io.Writer, objs []*kplanev1.Object, asList bool) error {
	v, err := listOf(objs, asList)
	if err != nil {
		return err
	}
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode YAML: %w", err)
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		return fmt.Errorf("encode YAML: %w", err)
	}
	_, err = w.Write(y)
	return err
}

// Desired strips what the server owns from an object read from a manifest
// (uid, resourceVersion, generation, timestamps, status), so output of
// "get -o yaml" can be applied or created again as desired state.
func Desired(obj *kplanev1.Object) {
	m := obj.Meta()
	m.Uid = ""
	m.ResourceVersion = ""
	m.Generation = 0
	m.CreationTimestamp = nil
	m.DeletionTimestamp = nil
	m.DeletionGracePeriodSeconds = nil
	ClearStatus(obj)
}

// ClearStatus removes the status of an object, for kinds that have one.
func ClearStatus(obj *kplanev1.Object) {
	r := obj.Message().ProtoReflect()
	if f := r.Descriptor().Fields().ByName("status"); f != nil {
		r.Clear(f)
	}
}
