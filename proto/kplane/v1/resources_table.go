package kplanev1

import "strings"

// Resource is how Kubernetes names a kind on its REST API and in kubectl:
// the group/version it is served under, its resource (plural) and
// singular names, kubectl's abbreviations and the categories ("all")
// that `kubectl get all` expands.
type Resource struct {
	Kind       string
	Group      string // "" for the core group
	Version    string
	Plural     string
	Singular   string
	ShortNames []string
	Categories []string
}

// GroupVersion is the resource's apiVersion: "v1" or "apps/v1".
func (r *Resource) GroupVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// GroupResource is the resource as Kubernetes' messages name it:
// "pods", "replicasets.apps".
func (r *Resource) GroupResource() string {
	if r.Group == "" {
		return r.Plural
	}
	return r.Plural + "." + r.Group
}

var all = []string{"all"}

// resourceTable names every kind of the Object oneof the way Kubernetes
// does. A kind added to the oneof gets one line here (TestResourceTable
// fails until it has one).
var resourceTable = []Resource{
	{Kind: "Namespace", Version: "v1", Plural: "namespaces", Singular: "namespace", ShortNames: []string{"ns"}},
	{Kind: "Node", Version: "v1", Plural: "nodes", Singular: "node", ShortNames: []string{"no"}},
	{Kind: "Pod", Version: "v1", Plural: "pods", Singular: "pod", ShortNames: []string{"po"}, Categories: all},
	{Kind: "ReplicationController", Version: "v1", Plural: "replicationcontrollers", Singular: "replicationcontroller", ShortNames: []string{"rc"}, Categories: all},
	{Kind: "Service", Version: "v1", Plural: "services", Singular: "service", ShortNames: []string{"svc"}, Categories: all},
	{Kind: "Endpoints", Version: "v1", Plural: "endpoints", Singular: "endpoints", ShortNames: []string{"ep"}},
	{Kind: "PersistentVolume", Version: "v1", Plural: "persistentvolumes", Singular: "persistentvolume", ShortNames: []string{"pv"}},
	{Kind: "PersistentVolumeClaim", Version: "v1", Plural: "persistentvolumeclaims", Singular: "persistentvolumeclaim", ShortNames: []string{"pvc"}},
	{Kind: "ServiceAccount", Version: "v1", Plural: "serviceaccounts", Singular: "serviceaccount", ShortNames: []string{"sa"}},
	{Kind: "Secret", Version: "v1", Plural: "secrets", Singular: "secret"},
	{Kind: "Event", Version: "v1", Plural: "events", Singular: "event", ShortNames: []string{"ev"}},
	{Kind: "ReplicaSet", Group: "apps", Version: "v1", Plural: "replicasets", Singular: "replicaset", ShortNames: []string{"rs"}, Categories: all},
	{Kind: "Deployment", Group: "apps", Version: "v1", Plural: "deployments", Singular: "deployment", ShortNames: []string{"deploy"}, Categories: all},
	{Kind: "StatefulSet", Group: "apps", Version: "v1", Plural: "statefulsets", Singular: "statefulset", ShortNames: []string{"sts"}, Categories: all},
	{Kind: "DaemonSet", Group: "apps", Version: "v1", Plural: "daemonsets", Singular: "daemonset", ShortNames: []string{"ds"}, Categories: all},
	{Kind: "ControllerRevision", Group: "apps", Version: "v1", Plural: "controllerrevisions", Singular: "controllerrevision"},
	{Kind: "Job", Group: "batch", Version: "v1", Plural: "jobs", Singular: "job", Categories: all},
	{Kind: "CronJob", Group: "batch", Version: "v1", Plural: "cronjobs", Singular: "cronjob", ShortNames: []string{"cj"}, Categories: all},
	{Kind: "StorageClass", Group: "storage.k8s.io", Version: "v1", Plural: "storageclasses", Singular: "storageclass", ShortNames: []string{"sc"}},
	{Kind: "PriorityClass", Group: "scheduling.k8s.io", Version: "v1", Plural: "priorityclasses", Singular: "priorityclass", ShortNames: []string{"pc"}},
	{Kind: "PodDisruptionBudget", Group: "policy", Version: "v1", Plural: "poddisruptionbudgets", Singular: "poddisruptionbudget", ShortNames: []string{"pdb"}},
	{Kind: "Role", Group: "rbac.authorization.k8s.io", Version: "v1", Plural: "roles", Singular: "role"},
	{Kind: "ClusterRole", Group: "rbac.authorization.k8s.io", Version: "v1", Plural: "clusterroles", Singular: "clusterrole"},
	{Kind: "RoleBinding", Group: "rbac.authorization.k8s.io", Version: "v1", Plural: "rolebindings", Singular: "rolebinding"},
	{Kind: "ClusterRoleBinding", Group: "rbac.authorization.k8s.io", Version: "v1", Plural: "clusterrolebindings", Singular: "clusterrolebinding"},
	{Kind: "Lease", Group: "coordination.k8s.io", Version: "v1", Plural: "leases", Singular: "lease"},
}

var resourcesByKind = map[string]*Resource{}

func init() {
	for i := range resourceTable {
		resourcesByKind[resourceTable[i].Kind] = &resourceTable[i]
	}
}

// ResourceOf returns the REST naming of kind. A kind of the oneof missing
// from the table (a mistake TestResourceTable catches) is served as a
// core-group kind named by the usual English plural rather than not at all.
func ResourceOf(kind string) *Resource {
	if r, ok := resourcesByKind[kind]; ok {
		return r
	}
	l := strings.ToLower(kind)
	plural := l + "s"
	if strings.HasSuffix(l, "s") {
		plural = l + "es"
	}
	return &Resource{Kind: kind, Version: "v1", Plural: plural, Singular: l}
}

// Resource returns the REST naming of the kind.
func (k *KindInfo) Resource() *Resource { return ResourceOf(k.Name) }

// APIVersion returns the apiVersion Kubernetes serves kind under, e.g.
// "apps/v1" for ReplicaSet and "v1" for Pod.
func APIVersion(kind string) string { return ResourceOf(kind).GroupVersion() }
