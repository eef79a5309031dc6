package authz

import (
	"context"
	"fmt"
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/strategy"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// call is "verb resource[/sub] [ns/]name" with the group taken from the
// resource table, e.g. "update pods/status default/p".
func call(u *user.Info, s string) *Attributes {
	f := strings.Fields(s)
	res, sub, _ := strings.Cut(f[1], "/")
	a := &Attributes{User: u, Verb: f[0], Resource: res, Subresource: sub}
	if r := lookupResource("", res); r != nil {
		a.APIGroup = r.Group
	}
	if len(f) > 2 {
		if ns, name, ok := strings.Cut(f[2], "/"); ok {
			a.Namespace, a.Name = ns, name
		} else {
			a.Name = f[2]
		}
	}
	return a
}

func bootstrapRBAC(t testing.TB) *RBAC {
	r := NewRBAC()
	for _, o := range BootstrapPolicy() {
		s := strategy.For(o.KindName())
		s.Default(o)
		if errs := s.Validate(o); len(errs) != 0 {
			t.Fatalf("bootstrap %s %s invalid: %v", o.KindName(), o.Meta().GetName(), errs)
		}
		r.Apply(o, false)
	}
	return r
}

// TestControllerRoles checks each binary's role against the calls its
// loop makes (its informers' list/watch, its reads and writes, its
// leader-election Lease, its Events) and against writes outside it.
func TestControllerRoles(t *testing.T) {
	r := bootstrapRBAC(t)
	lease := func(b string) []string {
		return []string{"create leases kplane-system/" + b, "get leases kplane-system/" + b, "update leases kplane-system/" + b}
	}
	ev := "create events default/e"
	allowed := map[string][]string{
		"scheduler": {"list pods", "watch pods", "list nodes", "watch nodes", "list namespaces", "list persistentvolumeclaims",
			"list persistentvolumes", "list storageclasses", "update pods default/p", "update pods/status default/p",
			"delete pods default/victim", "update persistentvolumeclaims default/c", ev},
		"replicactl": {"list replicasets", "watch replicasets", "list replicationcontrollers", "get replicasets default/rs",
			"update replicasets/status default/rs", "update replicationcontrollers/status default/rc",
			"list pods", "watch pods", "list pods default", "create pods default/p", "delete pods default/p", "update pods default/p", ev},
		"nodectl": {"list nodes", "update nodes node-1", "update nodes/status node-1", "get nodes node-1",
			"list leases", "watch leases kplane-node-lease/", "list pods", "update pods/status default/p", "delete pods default/p", ev},
		"ipamctl": {"list nodes", "watch nodes", "update nodes node-1", "update nodes/status node-1", ev},
		"cloudctl": {"list nodes", "watch nodes", "update nodes node-1", "update nodes/status node-1", "delete nodes node-1",
			"list services", "watch services", "update services default/s", "update services/status default/s", ev},
		"gcctl":        {"list deployments", "watch secrets", "get roles default/r", "delete pods default/p", "update replicasets default/rs", "delete clusterrolebindings x", ev},
		"endpointsctl": {"list services", "list pods", "list endpoints", "create endpoints default/s", "update endpoints default/s", "delete endpoints default/s", "get endpoints default/s", ev},
		"jobctl": {"list jobs", "watch jobs", "update jobs/status default/j", "delete jobs default/j", "get jobs default/j",
			"list pods", "create pods default/p", "delete pods default/p", "update pods default/p", ev},
		"cronjobctl": {"list cronjobs", "update cronjobs/status default/c", "list jobs", "get jobs default/j", "create jobs default/j", "delete jobs default/j", ev},
		"pvctl": {"list persistentvolumeclaims", "list persistentvolumes", "list storageclasses", "list pods", "list nodes",
			"update persistentvolumeclaims default/c", "update persistentvolumeclaims/status default/c",
			"create persistentvolumes pv", "update persistentvolumes pv", "update persistentvolumes/status pv", "delete persistentvolumes pv",
			"get persistentvolumeclaims default/c", "list pods default", ev},
		"deploymentctl": {"list deployments", "update deployments default/d", "update deployments/status default/d", "get deployments default/d",
			"list replicasets", "create replicasets default/rs", "update replicasets default/rs", "delete replicasets default/rs", "get replicasets default/rs", "list pods", ev},
		"statefulsetctl": {"list statefulsets", "update statefulsets/status default/s", "get statefulsets default/s", "list pods", "create pods default/p",
			"delete pods default/p", "update pods default/p", "list persistentvolumeclaims", "create persistentvolumeclaims default/c",
			"delete persistentvolumeclaims default/c", "update persistentvolumeclaims default/c", "list controllerrevisions",
			"create controllerrevisions default/r", "get controllerrevisions default/r", "delete controllerrevisions default/r", ev},
		"daemonsetctl": {"list daemonsets", "update daemonsets/status default/d", "get daemonsets default/d", "list nodes", "list pods",
			"create pods default/p", "delete pods default/p", "update pods default/p", "list controllerrevisions", "create controllerrevisions default/r", ev},
		"disruptionctl": {"list poddisruptionbudgets", "watch poddisruptionbudgets", "get poddisruptionbudgets default/b", "update poddisruptionbudgets/status default/b",
			"list pods", "list replicasets", "list deployments", "list statefulsets", "list replicationcontrollers"},
		"proxy":    {"list services", "watch services", "list endpoints", "watch endpoints"},
		"tokenctl": {"list namespaces", "list serviceaccounts", "create serviceaccounts default/default", "list secrets", "create secrets default/s", "update secrets default/s", "delete secrets default/s", ev},
	}
	forbidden := map[string][]string{
		"scheduler":      {"delete nodes node-1", "create pods default/p", "get secrets default/s", "update nodes node-1"},
		"replicactl":     {"delete nodes node-1", "update deployments default/d", "get secrets default/s", "update leases kplane-system/nodectl"},
		"nodectl":        {"create pods default/p", "delete nodes node-1", "update leases kplane-node-lease/node-1", "get secrets default/s"},
		"ipamctl":        {"delete nodes node-1", "update pods/status default/p", "list pods"},
		"cloudctl":       {"delete services default/s", "create services default/s", "list pods", "update endpoints default/e", "update leases kplane-system/cloudctl"},
		"gcctl":          {"create pods default/p", "create clusterroles x", "escalate clusterroles x", "bind clusterroles cluster-admin", "deletecollection pods default"},
		"endpointsctl":   {"update services default/s", "delete pods default/p"},
		"jobctl":         {"create jobs default/j", "update cronjobs default/c", "delete nodes n"},
		"cronjobctl":     {"create pods default/p", "update jobs default/j"},
		"pvctl":          {"delete persistentvolumeclaims default/c", "create pods default/p", "update nodes n"},
		"deploymentctl":  {"create pods default/p", "delete deployments default/d"},
		"statefulsetctl": {"update statefulsets default/s", "create replicasets default/r"},
		"daemonsetctl":   {"update nodes n", "create deployments default/d"},
		"proxy":          {"get secrets default/s", "update endpoints default/e", "create events default/e", "create leases kplane-system/proxy"},
		"disruptionctl":  {"update poddisruptionbudgets default/b", "delete pods default/p", "create pods/eviction default/p", "update replicasets default/r"},
		"tokenctl":       {"delete serviceaccounts default/default", "create pods default/p", "list nodes"},
	}
	for _, b := range ControllerBinaries() {
		t.Run(b, func(t *testing.T) {
			u := &user.Info{Name: ControllerUser(b), Groups: []string{user.AllAuthenticated}}
			calls := allowed[b]
			if leaderElected[b] && loopLeases[b] == nil {
				calls = append(calls, lease(b)...)
			}
			for _, l := range loopLeases[b] {
				calls = append(calls, lease(l)...)
			}
			if len(calls) == 0 || len(forbidden[b]) == 0 {
				t.Fatalf("no calls listed for %s", b)
			}
			for _, c := range calls {
				if d, _ := r.Authorize(context.Background(), call(u, c)); d != Allow {
					t.Errorf("%s may not %q", b, c)
				}
			}
			for _, c := range forbidden[b] {
				if d, why := r.Authorize(context.Background(), call(u, c)); d == Allow {
					t.Errorf("%s may %q (%s)", b, c, why)
				}
			}
		})
	}
	if len(allowed) != len(ControllerBinaries()) {
		t.Errorf("table covers %d binaries, the policy %d", len(allowed), len(ControllerBinaries()))
	}
}

func TestBootstrapAdminAndNodes(t *testing.T) {
	r := bootstrapRBAC(t)
	admin := &user.Info{Name: "kplane-admin", Groups: []string{user.SystemPrivilegedGroup}}
	for _, c := range []string{"delete nodes n", "escalate clusterroles x", "create secrets ns/x", "deletecollection pods ns"} {
		if d, _ := r.Authorize(context.Background(), call(admin, c)); d != Allow {
			t.Errorf("cluster-admin binding does not allow %q", c)
		}
	}
	node := &user.Info{Name: "system:node:n1", Groups: []string{user.NodesGroup}}
	for _, c := range []string{"update nodes/status n1", "update pods/status default/p", "create events default/e", "get secrets default/s"} {
		if d, _ := r.Authorize(context.Background(), call(node, c)); d != Allow {
			t.Errorf("system:node role does not allow %q", c)
		}
	}
	if d, _ := r.Authorize(context.Background(), call(node, "list secrets")); d == Allow {
		t.Error("system:node lists secrets")
	}
	names := map[string]bool{}
	for _, o := range BootstrapPolicy() {
		k := fmt.Sprintf("%s/%s/%s", o.KindName(), o.Meta().GetNamespace(), o.Meta().GetName())
		if names[k] {
			t.Errorf("duplicate bootstrap object %s", k)
		}
		names[k] = true
	}
	for _, want := range []string{"ClusterRole//cluster-admin", "ClusterRoleBinding//cluster-admin", "ClusterRole//system:node",
		"ClusterRoleBinding//system:node", "ClusterRole//system:kplane:replicactl", "Role/kplane-system/system:kplane:replicactl:leader-election"} {
		if !names[want] {
			t.Errorf("bootstrap policy lacks %s", want)
		}
	}
	_ = kplanev1.NamespaceSystem
}

// TestKCMRoleIsTheUnion: kcm may make every call of every rule of the
// controllers it hosts and hold each of their Leases, and no more.
func TestKCMRoleIsTheUnion(t *testing.T) {
	r := bootstrapRBAC(t)
	u := &user.Info{Name: ControllerUser(KCM), Groups: []string{user.AllAuthenticated}}
	for b := range kcmHosted {
		if controllerRules[b] == nil || !leaderElected[b] {
			t.Fatalf("kcm hosts %s, which has no bootstrap role or lease", b)
		}
		for _, rl := range controllerRules[b] {
			for _, g := range rl.GetApiGroups() {
				for _, res := range rl.GetResources() {
					for _, v := range rl.GetVerbs() {
						if g == "*" {
							g = ""
						}
						if res == "*" {
							res = "pods"
						}
						resource, sub, _ := strings.Cut(res, "/")
						a := &Attributes{User: u, Verb: v, APIGroup: g, Resource: resource, Subresource: sub, Namespace: "default", Name: "x"}
						if d, why := r.Authorize(context.Background(), a); d != Allow {
							t.Errorf("kcm may not %s %s/%s of %s (%s)", v, g, res, b, why)
						}
					}
				}
			}
		}
		for _, c := range []string{"get leases kplane-system/" + b, "update leases kplane-system/" + b, "create leases kplane-system/" + b} {
			if d, _ := r.Authorize(context.Background(), call(u, c)); d != Allow {
				t.Errorf("kcm may not %q", c)
			}
		}
	}
	// gcctl may update and delete anything, so the union's limits are
	// what no hosted controller creates or escalates.
	for _, c := range []string{"create nodes n", "create clusterroles x", "create serviceaccounts/token default/s",
		"escalate clusterroles x", "bind clusterroles cluster-admin", "create pods/eviction default/p"} {
		if d, why := r.Authorize(context.Background(), call(u, c)); d == Allow {
			t.Errorf("kcm may %q (%s)", c, why)
		}
	}
}
