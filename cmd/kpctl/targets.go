package main

import (
	"fmt"
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
)

// target is one named object a command acts on.
type target struct {
	kind *kplanev1.KindInfo
	name string
}

// parseTargets reads "KIND [NAME...]" or "KIND/NAME [KIND/NAME...]". kind
// is the kind of the first form (nil for the second); targets lists the
// named objects, empty when only a kind was given.
func parseTargets(args []string) (kind *kplanev1.KindInfo, targets []target, err error) {
	if len(args) == 0 {
		return nil, nil, fmt.Errorf("you must specify the type of resource, one of: %s", strings.Join(kinds.Known(), ", "))
	}
	if strings.Contains(args[0], "/") {
		for _, a := range args {
			k, n, ok := strings.Cut(a, "/")
			if !ok || n == "" {
				return nil, nil, fmt.Errorf("there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (e.g. 'kpctl get pod/web'): %q", a)
			}
			info, err := kinds.Resolve(k)
			if err != nil {
				return nil, nil, err
			}
			targets = append(targets, target{info, n})
		}
		return nil, targets, nil
	}
	kind, err = kinds.Resolve(args[0])
	if err != nil {
		return nil, nil, err
	}
	for _, n := range args[1:] {
		if strings.Contains(n, "/") {
			return nil, nil, fmt.Errorf("arguments in resource/name form must all be in that form: %q", n)
		}
		targets = append(targets, target{kind, n})
	}
	return kind, targets, nil
}

// namespaceFor returns the namespace to address objects of kind in: ""
// for cluster-scoped kinds, else the --namespace value.
func (g *globals) namespaceFor(kind *kplanev1.KindInfo) string {
	if !kind.Namespaced {
		return ""
	}
	return g.ns()
}

// noResourcesFound is kubectl's line (on stderr) for an empty listing:
// "No resources found in <ns> namespace." in one namespace, and
// "No resources found" (no period) across namespaces or for a
// cluster-scoped kind.
func noResourcesFound(kind *kplanev1.KindInfo, ns string) string {
	if !kind.Namespaced || ns == "" {
		return "No resources found\n"
	}
	return "No resources found in " + ns + " namespace.\n"
}
