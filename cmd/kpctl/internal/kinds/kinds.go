// Package kinds resolves the kind names a kpctl user types ("po", "pods",
// "ReplicaSet", "rs") to the kinds the apiserver serves, and knows the
// Kubernetes group/version each kind belongs to.
package kinds

import (
	"fmt"
	"sort"
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// shortNames are the kubectl abbreviations. Kinds not listed here are still
// reachable by their singular and plural names.
var shortNames = map[string]string{
	"Namespace":             "ns",
	"Node":                  "no",
	"Pod":                   "po",
	"ReplicaSet":            "rs",
	"ReplicationController": "rc",
	"Service":               "svc",
	"Endpoints":             "ep",
	"PersistentVolume":      "pv",
	"PersistentVolumeClaim": "pvc",
	"StorageClass":          "sc",
	"ServiceAccount":        "sa",
	"Event":                 "ev",
	"CronJob":               "cj",
	"PriorityClass":         "pc",
}

// aliases maps every lower-case name a user may type to the kind name.
var aliases = map[string]string{}

func init() {
	for _, k := range kplanev1.KindNames() {
		aliases[strings.ToLower(k)] = k
		aliases[Plural(k)] = k
		if s, ok := shortNames[k]; ok {
			aliases[s] = k
		}
	}
}

// Plural returns the lower-case plural resource name of a kind ("pods",
// "storageclasses", "endpoints"), as used in messages and URLs.
func Plural(kind string) string {
	l := strings.ToLower(kind)
	switch {
	case kind == "Endpoints":
		return l
	case strings.HasSuffix(l, "s"):
		return l + "es"
	default:
		return l + "s"
	}
}

// Resolve returns the kind a user-typed name refers to, case-insensitively.
func Resolve(name string) (*kplanev1.KindInfo, error) {
	if k, ok := aliases[strings.ToLower(name)]; ok {
		return kplanev1.LookupKind(k), nil
	}
	return nil, fmt.Errorf("the server doesn't have a resource type %q; known types: %s", name, strings.Join(Known(), ", "))
}

// Known lists the kinds with their short names, e.g. "pods (po)", sorted.
func Known() []string {
	var out []string
	for _, k := range kplanev1.KindNames() {
		n := Plural(k)
		if s, ok := shortNames[k]; ok {
			n += " (" + s + ")"
		}
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// APIVersion returns the Kubernetes apiVersion of a kind ("v1", "apps/v1").
func APIVersion(kind string) string { return kplanev1.APIVersion(kind) }

// Ref formats an object reference the way kubectl prints it after a
// write: "pod/web", "replicaset/frontend".
func Ref(kind, name string) string {
	return strings.ToLower(kind) + "/" + name
}

// ShortNames returns the abbreviations of a kind ("po" for Pod), if any.
func ShortNames(kind string) []string {
	if s, ok := shortNames[kind]; ok {
		return []string{s}
	}
	return nil
}
