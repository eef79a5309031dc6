package authz

import (
	"sort"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// Bootstrap object names.
const (
	// ClusterAdmin is the ClusterRole of every permission, bound to
	// system:masters by ClusterAdmin's binding of the same name.
	ClusterAdmin = "cluster-admin"
	// NodeRole is the ClusterRole bound to group system:nodes (binding of
	// the same name); the Node authorizer confines each node further.
	NodeRole = "system:node"
	// ControllerPrefix prefixes each control-plane binary's user, its
	// ClusterRole and ClusterRoleBinding ("system:kplane:replicactl"),
	// and its leader-election Role and RoleBinding in kplane-system
	// ("system:kplane:replicactl:leader-election").
	ControllerPrefix = "system:kplane:"
	// LeaderElectionSuffix ends the leader-election Role's name.
	LeaderElectionSuffix = ":leader-election"
)

// BootstrapAnnotation marks objects the apiserver owns: it rewrites them
// on every start to the built-in policy (set it to "false" to keep an
// edited copy as is).
const BootstrapAnnotation = "rbac.authorization.kubernetes.io/autoupdate"

// BootstrapLabel is Kubernetes' label on its bootstrap policy objects.
const BootstrapLabel = "kubernetes.io/bootstrapping"

func rule(groups []string, resources []string, verbs ...string) *kplanev1.PolicyRule {
	return &kplanev1.PolicyRule{ApiGroups: groups, Resources: resources, Verbs: verbs}
}

var (
	core        = []string{""}
	apps        = []string{"apps"}
	batch       = []string{"batch"}
	storage     = []string{"storage.k8s.io"}
	policy      = []string{"policy"}
	read        = []string{"get", "list", "watch"}
	informerRWs = []string{"list", "watch"}
)

func res(r ...string) []string { return r }

func readRule(groups []string, resources ...string) *kplanev1.PolicyRule {
	return rule(groups, resources, read...)
}

// events lets a binary record Events (the recorder creates them and
// updates repeats).
var events = rule(core, res("events"), "create", "update", "patch")

// controllerRules are, per binary, the rules its loop needs: the kinds
// its informers list and watch, the objects it reads directly, and what
// it writes (pkg/controller's Update/UpdateStatus read the object again
// on a conflict, hence get with each update). Leader election is granted
// apart, in kplane-system only. Derived from each service's Watches,
// Informers.ForKind calls and client writes.
var controllerRules = map[string][]*kplanev1.PolicyRule{
	"scheduler": {
		rule(core, res("pods"), "get", "list", "watch", "update", "delete"),
		rule(core, res("pods/status"), "get", "update", "patch"),
		readRule(core, "nodes", "namespaces", "persistentvolumes"),
		rule(core, res("persistentvolumeclaims"), "get", "list", "watch", "update"),
		readRule(storage, "storageclasses"),
		readRule(policy, "poddisruptionbudgets"),
		// PodTopologySpread's default constraints select a pod's group
		// by its Services and controller.
		readRule(core, "services", "replicationcontrollers"),
		readRule(apps, "replicasets", "statefulsets"),
		events,
	},
	"replicactl": {
		rule(apps, res("replicasets"), read...),
		rule(apps, res("replicasets/status"), "get", "update"),
		rule(core, res("replicationcontrollers"), read...),
		rule(core, res("replicationcontrollers/status"), "get", "update"),
		rule(core, res("pods"), "get", "list", "watch", "create", "update", "delete"),
		events,
	},
	"nodectl": {
		rule(core, res("nodes"), "get", "list", "watch", "update"),
		rule(core, res("nodes/status"), "get", "update"),
		rule(core, res("pods"), "get", "list", "watch", "delete"),
		rule(core, res("pods/status"), "get", "update"),
		rule([]string{"coordination.k8s.io"}, res("leases"), read...),
		events,
	},
	"ipamctl": {
		rule(core, res("nodes"), "get", "list", "watch", "update"),
		rule(core, res("nodes/status"), "get", "update"),
		events,
	},
	"gcctl": {
		// The collector follows owner references of every kind: it reads
		// all, deletes dependents and strips owner references and the
		// orphan/foreground finalizers.
		rule([]string{"*"}, res("*"), "get", "list", "watch", "update", "patch", "delete"),
		events,
	},
	"endpointsctl": {
		readRule(core, "services", "pods"),
		rule(core, res("endpoints"), "get", "list", "watch", "create", "update", "delete"),
		events,
	},
	"jobctl": {
		rule(batch, res("jobs"), "get", "list", "watch", "delete"),
		rule(batch, res("jobs/status"), "get", "update"),
		rule(core, res("pods"), "get", "list", "watch", "create", "update", "delete"),
		events,
	},
	"cronjobctl": {
		rule(batch, res("cronjobs"), read...),
		rule(batch, res("cronjobs/status"), "get", "update"),
		rule(batch, res("jobs"), "get", "list", "watch", "create", "delete"),
		events,
	},
	"pvctl": {
		rule(core, res("persistentvolumeclaims"), "get", "list", "watch", "update"),
		rule(core, res("persistentvolumeclaims/status"), "get", "update"),
		rule(core, res("persistentvolumes"), "get", "list", "watch", "create", "update", "delete"),
		rule(core, res("persistentvolumes/status"), "get", "update"),
		readRule(storage, "storageclasses"),
		readRule(core, "pods", "nodes"),
		events,
	},
	"deploymentctl": {
		rule(apps, res("deployments"), "get", "list", "watch", "update"),
		rule(apps, res("deployments/status"), "get", "update"),
		rule(apps, res("replicasets"), "get", "list", "watch", "create", "update", "delete"),
		readRule(core, "pods"),
		events,
	},
	"statefulsetctl": {
		rule(apps, res("statefulsets"), read...),
		rule(apps, res("statefulsets/status"), "get", "update"),
		rule(core, res("pods"), "get", "list", "watch", "create", "update", "delete"),
		rule(core, res("persistentvolumeclaims"), "get", "list", "watch", "create", "update", "delete"),
		rule(apps, res("controllerrevisions"), "get", "list", "watch", "create", "update", "delete"),
		events,
	},
	"daemonsetctl": {
		rule(apps, res("daemonsets"), read...),
		rule(apps, res("daemonsets/status"), "get", "update"),
		readRule(core, "nodes"),
		rule(core, res("pods"), "get", "list", "watch", "create", "update", "delete"),
		rule(apps, res("controllerrevisions"), "get", "list", "watch", "create", "update", "delete"),
		events,
	},
	"proxy": {
		rule(core, res("services", "endpoints"), informerRWs...),
	},
	"disruptionctl": {
		rule(policy, res("poddisruptionbudgets"), read...),
		rule(policy, res("poddisruptionbudgets/status"), "get", "update"),
		readRule(core, "pods", "replicationcontrollers"),
		readRule(apps, "replicasets", "deployments", "statefulsets"),
	},
	"cloudctl": {
		// The node loop initialises Nodes and deletes those whose
		// instance is gone; the route loop writes NetworkUnavailable; the
		// service loop holds LoadBalancer Services by a finalizer and
		// writes their status.loadBalancer.
		rule(core, res("nodes"), "get", "list", "watch", "update", "delete"),
		rule(core, res("nodes/status"), "get", "update"),
		rule(core, res("services"), "get", "list", "watch", "update"),
		rule(core, res("services/status"), "get", "update"),
		events,
	},
	"tokenctl": {
		rule(core, res("namespaces"), informerRWs...),
		rule(core, res("serviceaccounts"), "get", "list", "watch", "create", "update"),
		rule(core, res("secrets"), "get", "list", "watch", "create", "update", "delete"),
		events,
	},
}

// leaderElected lists the binaries that hold a Lease in kplane-system.
var leaderElected = map[string]bool{
	"scheduler": true, "replicactl": true, "nodectl": true, "ipamctl": true, "gcctl": true,
	"endpointsctl": true, "jobctl": true, "cronjobctl": true, "pvctl": true, "deploymentctl": true,
	"statefulsetctl": true, "daemonsetctl": true, "tokenctl": true, "disruptionctl": true, "cloudctl": true,
}

// loopLeases are the Leases of binaries that run several loops, each
// elected on its own Lease (the rest hold one, named as the binary).
var loopLeases = map[string][]string{
	"cloudctl": {"cloudctl-node", "cloudctl-route", "cloudctl-service"},
}

// KCM is the binary that hosts several controllers in one process
// (services/kcm). It has no role of its own: its user is a subject of the
// ClusterRoleBinding and leader-election RoleBinding of every controller
// it can host, so its permissions are exactly their union.
const KCM = "kcm"

// kcmHosted are the controllers kcm can host (services/kcm/kcm.Services).
var kcmHosted = map[string]bool{
	"tokenctl": true, "replicactl": true, "nodectl": true, "ipamctl": true, "gcctl": true, "endpointsctl": true,
	"jobctl": true, "cronjobctl": true, "pvctl": true, "deploymentctl": true, "statefulsetctl": true,
	"daemonsetctl": true, "disruptionctl": true,
}

// ControllerBinaries are the binaries with a bootstrap role, sorted.
func ControllerBinaries() []string {
	out := make([]string, 0, len(controllerRules))
	for b := range controllerRules {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}

// ControllerUser is a binary's identity: system:kplane:<binary>.
func ControllerUser(binary string) string { return ControllerPrefix + binary }

// nodeRules are what any node agent needs cluster-wide (the Node
// authorizer narrows them to the node's own objects when it decides).
var nodeRules = []*kplanev1.PolicyRule{
	rule(core, res("nodes"), "get", "list", "watch", "create", "update", "patch"),
	rule(core, res("nodes/status"), "get", "update", "patch"),
	rule(core, res("pods"), "get", "list", "watch", "delete"),
	rule(core, res("pods/status"), "get", "update", "patch"),
	readRule(core, "services", "endpoints"),
	rule(core, res("persistentvolumeclaims"), read...),
	rule(core, res("persistentvolumes", "secrets"), "get"),
	rule(core, res("serviceaccounts"), "get"),
	rule(core, res("serviceaccounts/token"), "create"),
	rule([]string{"coordination.k8s.io"}, res("leases"), "get", "create", "update", "patch"),
	events,
}

func meta(ns, name string) *kplanev1.ObjectMeta {
	return &kplanev1.ObjectMeta{Name: name, Namespace: ns,
		Labels:      map[string]string{BootstrapLabel: "rbac-defaults"},
		Annotations: map[string]string{BootstrapAnnotation: "true"}}
}

func clusterBinding(name, role string, subjects ...*kplanev1.Subject) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.ClusterRoleBinding{Metadata: meta("", name),
		RoleRef: &kplanev1.RoleRef{ApiGroup: RBACGroup, Kind: "ClusterRole", Name: role}, Subjects: subjects})
}

func userSubject(name string) *kplanev1.Subject {
	return &kplanev1.Subject{Kind: "User", ApiGroup: RBACGroup, Name: name}
}

func groupSubject(name string) *kplanev1.Subject {
	return &kplanev1.Subject{Kind: "Group", ApiGroup: RBACGroup, Name: name}
}

// BootstrapPolicy is the built-in policy: cluster-admin for
// system:masters, system:node for system:nodes, and per control-plane
// binary a ClusterRole and ClusterRoleBinding, plus a leader-election
// Role and RoleBinding in kplane-system. Roles come before the bindings
// naming them.
func BootstrapPolicy() []*kplanev1.Object {
	var roles, bindings []*kplanev1.Object
	roles = append(roles,
		kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: meta("", ClusterAdmin), Rules: []*kplanev1.PolicyRule{
			rule([]string{"*"}, res("*"), "*"),
			{Verbs: []string{"*"}, NonResourceUrls: []string{"*"}},
		}}),
		kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: meta("", NodeRole), Rules: nodeRules}),
	)
	bindings = append(bindings,
		clusterBinding(ClusterAdmin, ClusterAdmin, groupSubject(user.SystemPrivilegedGroup)),
		clusterBinding(NodeRole, NodeRole, groupSubject(user.NodesGroup)),
	)
	for _, b := range ControllerBinaries() {
		name := ControllerUser(b)
		roles = append(roles, kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: meta("", name), Rules: controllerRules[b]}))
		subjects := []*kplanev1.Subject{userSubject(name)}
		if kcmHosted[b] {
			subjects = append(subjects, userSubject(ControllerUser(KCM)))
		}
		bindings = append(bindings, clusterBinding(name, name, subjects...))
		if !leaderElected[b] {
			continue
		}
		leases := []string{b}
		if ls, ok := loopLeases[b]; ok {
			leases = ls
		}
		le := name + LeaderElectionSuffix
		roles = append(roles, kplanev1.MustWrap(&kplanev1.Role{Metadata: meta(kplanev1.NamespaceSystem, le), Rules: []*kplanev1.PolicyRule{
			// Create cannot be confined by name; get and update can.
			rule([]string{"coordination.k8s.io"}, res("leases"), "create"),
			{ApiGroups: []string{"coordination.k8s.io"}, Resources: res("leases"), ResourceNames: leases, Verbs: []string{"get", "update"}},
		}}))
		bindings = append(bindings, kplanev1.MustWrap(&kplanev1.RoleBinding{Metadata: meta(kplanev1.NamespaceSystem, le),
			RoleRef: &kplanev1.RoleRef{ApiGroup: RBACGroup, Kind: "Role", Name: le}, Subjects: subjects}))
	}
	return append(roles, bindings...)
}
