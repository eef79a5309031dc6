package authz

import (
	"context"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

func pod(ns, name, node string, mut func(*kplanev1.PodSpec)) *kplanev1.Object {
	spec := &kplanev1.PodSpec{NodeName: node, ServiceAccountName: "default", Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}
	if mut != nil {
		mut(spec)
	}
	return kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec})
}

func claim(ns, name, volume string) *kplanev1.Object {
	return kplanev1.MustWrap(&kplanev1.PersistentVolumeClaim{Metadata: &kplanev1.ObjectMeta{Namespace: ns, Name: name},
		Spec: &kplanev1.PersistentVolumeClaimSpec{VolumeName: volume}})
}

func nodeUser(n string) *user.Info {
	return &user.Info{Name: user.NodeUserPrefix + n, Groups: []string{user.NodesGroup, user.AllAuthenticated}}
}

func nodeFixture() *Node {
	n := NewNode()
	n.Apply(pod("default", "web-1", "node-1", func(s *kplanev1.PodSpec) {
		s.Volumes = []*kplanev1.Volume{
			{Name: "creds", Secret: &kplanev1.SecretVolumeSource{SecretName: "web-creds"}},
			{Name: "data", PersistentVolumeClaim: &kplanev1.PersistentVolumeClaimVolumeSource{ClaimName: "web-data"}},
		}
		s.Containers[0].Env = []*kplanev1.EnvVar{{Name: "K", ValueFrom: &kplanev1.EnvVarSource{SecretKeyRef: &kplanev1.SecretKeySelector{Name: "env-secret", Key: "k"}}}}
		s.InitContainers = []*kplanev1.Container{{Name: "init", Image: "i", EnvFrom: []*kplanev1.EnvFromSource{{SecretRef: &kplanev1.SecretEnvSource{Name: "init-secret"}}}}}
	}), false)
	n.Apply(pod("default", "db-1", "node-2", func(s *kplanev1.PodSpec) {
		s.ServiceAccountName = "db"
		s.Volumes = []*kplanev1.Volume{{Name: "creds", Secret: &kplanev1.SecretVolumeSource{SecretName: "db-creds"}},
			{Name: "data", PersistentVolumeClaim: &kplanev1.PersistentVolumeClaimVolumeSource{ClaimName: "db-data"}}}
	}), false)
	n.Apply(pod("default", "pending", "", func(s *kplanev1.PodSpec) {
		s.Volumes = []*kplanev1.Volume{{Name: "creds", Secret: &kplanev1.SecretVolumeSource{SecretName: "pending-creds"}}}
	}), false)
	n.Apply(claim("default", "web-data", "pv-web"), false)
	n.Apply(claim("default", "db-data", "pv-db"), false)
	return n
}

func TestNodeAuthorizer(t *testing.T) {
	n := nodeFixture()
	lease := "coordination.k8s.io"
	cases := []struct {
		name string
		a    Attributes
		want Decision
	}{
		{"own node update", Attributes{Verb: "update", Resource: "nodes", Name: "node-1"}, Allow},
		{"own node create", Attributes{Verb: "create", Resource: "nodes", Name: "node-1"}, Allow},
		{"own node status", Attributes{Verb: "update", Resource: "nodes", Subresource: "status", Name: "node-1"}, Allow},
		{"other node update", Attributes{Verb: "update", Resource: "nodes", Name: "node-2"}, Deny},
		{"other node status", Attributes{Verb: "patch", Resource: "nodes", Subresource: "status", Name: "node-2"}, Deny},
		{"other node create", Attributes{Verb: "create", Resource: "nodes", Name: "node-2"}, Deny},
		{"own node delete", Attributes{Verb: "delete", Resource: "nodes", Name: "node-1"}, Deny},
		{"read nodes", Attributes{Verb: "watch", Resource: "nodes"}, Allow},
		{"own lease", Attributes{Verb: "update", APIGroup: lease, Resource: "leases", Namespace: kplanev1.NamespaceNodeLease, Name: "node-1"}, Allow},
		{"own lease create", Attributes{Verb: "create", APIGroup: lease, Resource: "leases", Namespace: kplanev1.NamespaceNodeLease, Name: "node-1"}, Allow},
		{"other lease", Attributes{Verb: "update", APIGroup: lease, Resource: "leases", Namespace: kplanev1.NamespaceNodeLease, Name: "node-2"}, Deny},
		{"lease elsewhere", Attributes{Verb: "update", APIGroup: lease, Resource: "leases", Namespace: kplanev1.NamespaceSystem, Name: "node-1"}, Deny},
		{"own pod status", Attributes{Verb: "update", Resource: "pods", Subresource: "status", Namespace: "default", Name: "web-1"}, Allow},
		{"other node's pod status", Attributes{Verb: "update", Resource: "pods", Subresource: "status", Namespace: "default", Name: "db-1"}, Deny},
		{"unbound pod status", Attributes{Verb: "update", Resource: "pods", Subresource: "status", Namespace: "default", Name: "pending"}, Deny},
		{"own pod delete", Attributes{Verb: "delete", Resource: "pods", Namespace: "default", Name: "web-1"}, Allow},
		{"other pod delete", Attributes{Verb: "delete", Resource: "pods", Namespace: "default", Name: "db-1"}, Deny},
		{"pod spec update", Attributes{Verb: "update", Resource: "pods", Namespace: "default", Name: "web-1"}, Deny},
		{"pod create", Attributes{Verb: "create", Resource: "pods", Namespace: "default", Name: "x"}, Deny},
		{"watch pods", Attributes{Verb: "watch", Resource: "pods"}, Allow},
		{"volume secret", Attributes{Verb: "get", Resource: "secrets", Namespace: "default", Name: "web-creds"}, Allow},
		{"env secret", Attributes{Verb: "get", Resource: "secrets", Namespace: "default", Name: "env-secret"}, Allow},
		{"init envFrom secret", Attributes{Verb: "get", Resource: "secrets", Namespace: "default", Name: "init-secret"}, Allow},
		{"secret of a pod on node-2", Attributes{Verb: "get", Resource: "secrets", Namespace: "default", Name: "db-creds"}, Deny},
		{"secret of an unscheduled pod", Attributes{Verb: "get", Resource: "secrets", Namespace: "default", Name: "pending-creds"}, Deny},
		{"secret in another namespace", Attributes{Verb: "get", Resource: "secrets", Namespace: "other", Name: "web-creds"}, Deny},
		{"list secrets", Attributes{Verb: "list", Resource: "secrets", Namespace: "default"}, Deny},
		{"own claim", Attributes{Verb: "get", Resource: "persistentvolumeclaims", Namespace: "default", Name: "web-data"}, Allow},
		{"other claim", Attributes{Verb: "get", Resource: "persistentvolumeclaims", Namespace: "default", Name: "db-data"}, Deny},
		{"watch claims", Attributes{Verb: "watch", Resource: "persistentvolumeclaims"}, Allow},
		{"own volume", Attributes{Verb: "get", Resource: "persistentvolumes", Name: "pv-web"}, Allow},
		{"other volume", Attributes{Verb: "get", Resource: "persistentvolumes", Name: "pv-db"}, Deny},
		{"events", Attributes{Verb: "create", Resource: "events", Namespace: "default"}, Allow},
		{"services", Attributes{Verb: "list", Resource: "services"}, Allow},
		{"endpoints write", Attributes{Verb: "update", Resource: "endpoints", Namespace: "default", Name: "s"}, Deny},
		{"token for own pod", Attributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "default", Name: "default", BoundPod: "web-1"}, Allow},
		{"token for another node's pod", Attributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "default", Name: "db", BoundPod: "db-1"}, Deny},
		{"token of another account for own pod", Attributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "default", Name: "db", BoundPod: "web-1"}, Deny},
		{"token without pod", Attributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "default", Name: "default"}, Deny},
		{"deployments", Attributes{Verb: "list", APIGroup: "apps", Resource: "deployments"}, Deny},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.a.User = nodeUser("node-1")
			d, why := n.Authorize(context.Background(), &c.a)
			if d != c.want {
				t.Fatalf("decision %v (%s), want %v", d, why, c.want)
			}
		})
	}
	// Not a node: no opinion. A node user outside system:nodes is not a node.
	for _, u := range []*user.Info{{Name: "alice"}, {Name: "system:node:node-1"}} {
		if d, _ := n.Authorize(context.Background(), &Attributes{User: u, Verb: "get", Resource: "secrets", Namespace: "default", Name: "web-creds"}); d != NoOpinion {
			t.Errorf("%+v: decision %v, want NoOpinion", u, d)
		}
	}
}

// TestNodeGraphFollowsPods: a pod moving off (deleted) takes its secrets'
// access with it; a secret used by two pods stays readable until both go.
func TestNodeGraphFollowsPods(t *testing.T) {
	n := nodeFixture()
	get := &Attributes{User: nodeUser("node-1"), Verb: "get", Resource: "secrets", Namespace: "default", Name: "web-creds"}
	decide := func() Decision { d, _ := n.Authorize(context.Background(), get); return d }
	second := pod("default", "web-2", "node-1", func(s *kplanev1.PodSpec) {
		s.Volumes = []*kplanev1.Volume{{Name: "c", Secret: &kplanev1.SecretVolumeSource{SecretName: "web-creds"}}}
	})
	n.Apply(second, false)
	n.Apply(pod("default", "web-1", "node-1", nil), true)
	if decide() != Allow {
		t.Fatal("secret still used by web-2 became unreadable")
	}
	n.Apply(second, true)
	if decide() != Deny {
		t.Fatal("secret readable after every pod using it was deleted")
	}
	if len(n.refs) != 1 { // node-2's db-1 remains
		t.Fatalf("graph kept refs of gone pods: %v", n.refs)
	}
	// A claim rebound to another volume moves the volume's access.
	n.Apply(claim("default", "db-data", "pv-other"), false)
	if d, _ := n.Authorize(context.Background(), &Attributes{User: nodeUser("node-2"), Verb: "get", Resource: "persistentvolumes", Name: "pv-db"}); d != Deny {
		t.Fatal("old volume still readable after its claim was rebound")
	}
	if d, _ := n.Authorize(context.Background(), &Attributes{User: nodeUser("node-2"), Verb: "get", Resource: "persistentvolumes", Name: "pv-other"}); d != Allow {
		t.Fatal("new volume not readable")
	}
	n.Reset("Pod", nil)
	if len(n.pods) != 0 || len(n.refs) != 0 {
		t.Fatalf("reset left pods %v refs %v", n.pods, n.refs)
	}
}
