package authz

import (
	"context"
	"fmt"
	"sync"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// NodeKinds are the kinds the Node authorizer's graph follows.
var NodeKinds = []string{"Pod", "PersistentVolumeClaim"}

// podInfo is what the graph keeps of a pod.
type podInfo struct {
	node string
	sa   string
	refs []string // ref keys "Kind/ns/name" the pod uses
}

// Node is the Node authorizer: a node agent's identity
// (system:node:<n>, group system:nodes) may write only its own Node and
// Lease, the status of (and delete) pods bound to it, and read only the
// Secrets, claims and volumes those pods use. It decides every request of
// a node identity (Allow or Deny) and has no opinion on anyone else's.
//
// Its graph, fed from the Pod and PersistentVolumeClaim watch caches, maps
// a node to the objects its pods reference, with counts, so a decision
// is a map lookup.
type Node struct {
	mu sync.RWMutex
	// pods: "ns/name" → what the graph took from it.
	pods map[string]*podInfo
	// refs: node → ref key → number of the node's pods using it.
	refs map[string]map[string]int
	// claimVolume: "ns/claim" → bound PV name; volumeClaims the reverse.
	claimVolume  map[string]string
	volumeClaims map[string]map[string]bool
}

// NewNode returns an empty Node authorizer; feed it with Apply.
func NewNode() *Node {
	return &Node{
		pods:         map[string]*podInfo{},
		refs:         map[string]map[string]int{},
		claimVolume:  map[string]string{},
		volumeClaims: map[string]map[string]bool{},
	}
}

func refKey(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// podRefs lists the Secrets, claims and ServiceAccount a pod references.
func podRefs(p *kplanev1.Pod) []string {
	ns := p.GetMetadata().GetNamespace()
	seen := map[string]bool{}
	var refs []string
	add := func(kind, name string) {
		if name == "" {
			return
		}
		k := refKey(kind, ns, name)
		if !seen[k] {
			seen[k] = true
			refs = append(refs, k)
		}
	}
	spec := p.GetSpec()
	for _, v := range spec.GetVolumes() {
		add("Secret", v.GetSecret().GetSecretName())
		add("PersistentVolumeClaim", v.GetPersistentVolumeClaim().GetClaimName())
	}
	for _, cs := range [][]*kplanev1.Container{spec.GetContainers(), spec.GetInitContainers()} {
		for _, c := range cs {
			for _, e := range c.GetEnv() {
				add("Secret", e.GetValueFrom().GetSecretKeyRef().GetName())
			}
			for _, e := range c.GetEnvFrom() {
				add("Secret", e.GetSecretRef().GetName())
			}
		}
	}
	add("ServiceAccount", spec.GetServiceAccountName())
	return refs
}

// Reset replaces what the graph holds of kind with objs.
func (n *Node) Reset(kind string, objs []*kplanev1.Object) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch kind {
	case "Pod":
		for k := range n.pods {
			n.removePod(k)
		}
	case "PersistentVolumeClaim":
		clear(n.claimVolume)
		clear(n.volumeClaims)
	}
	for _, o := range objs {
		n.apply(o, false)
	}
}

// Apply records one object's new state, or its deletion.
func (n *Node) Apply(o *kplanev1.Object, deleted bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.apply(o, deleted)
}

func (n *Node) apply(o *kplanev1.Object, deleted bool) {
	m := o.Meta()
	key := m.GetNamespace() + "/" + m.GetName()
	switch x := o.GetKind().(type) {
	case *kplanev1.Object_Pod:
		n.removePod(key)
		node := x.Pod.GetSpec().GetNodeName()
		if deleted || node == "" {
			return
		}
		info := &podInfo{node: node, sa: x.Pod.GetSpec().GetServiceAccountName(), refs: podRefs(x.Pod)}
		n.pods[key] = info
		byRef := n.refs[node]
		if byRef == nil {
			byRef = map[string]int{}
			n.refs[node] = byRef
		}
		for _, r := range info.refs {
			byRef[r]++
		}
	case *kplanev1.Object_PersistentVolumeClaim:
		if old, ok := n.claimVolume[key]; ok {
			delete(n.volumeClaims[old], key)
			if len(n.volumeClaims[old]) == 0 {
				delete(n.volumeClaims, old)
			}
			delete(n.claimVolume, key)
		}
		v := x.PersistentVolumeClaim.GetSpec().GetVolumeName()
		if deleted || v == "" {
			return
		}
		n.claimVolume[key] = v
		if n.volumeClaims[v] == nil {
			n.volumeClaims[v] = map[string]bool{}
		}
		n.volumeClaims[v][key] = true
	}
}

func (n *Node) removePod(key string) {
	info, ok := n.pods[key]
	if !ok {
		return
	}
	delete(n.pods, key)
	byRef := n.refs[info.node]
	for _, r := range info.refs {
		if byRef[r]--; byRef[r] <= 0 {
			delete(byRef, r)
		}
	}
	if len(byRef) == 0 {
		delete(n.refs, info.node)
	}
}

// podOnNode reports whether pod ns/name is bound to node.
func (n *Node) podOnNode(node, ns, name string) (*podInfo, bool) {
	info, ok := n.pods[ns+"/"+name]
	return info, ok && info.node == node
}

func (n *Node) referenced(node, kind, ns, name string) bool {
	return n.refs[node][refKey(kind, ns, name)] > 0
}

// volumeReferenced: a PV is the node's when a claim of one of its pods is
// bound to it.
func (n *Node) volumeReferenced(node, pv string) bool {
	for claim := range n.volumeClaims[pv] {
		ns, name, _ := cut(claim)
		if n.referenced(node, "PersistentVolumeClaim", ns, name) {
			return true
		}
	}
	return false
}

func cut(key string) (string, string, bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}

var readVerbs = map[string]bool{"get": true, "list": true, "watch": true}

// Authorize implements Authorizer.
func (n *Node) Authorize(_ context.Context, a *Attributes) (Decision, string) {
	if a.User == nil {
		return NoOpinion, ""
	}
	node, ok := a.User.NodeName()
	if !ok {
		return NoOpinion, ""
	}
	if n.allowed(node, a) {
		return Allow, "node " + node + " may " + a.Verb + " " + a.ResourceString()
	}
	return Deny, fmt.Sprintf("node %s may not %s %s %q in namespace %q: the Node authorizer allows a node only its own Node, Lease and pods and what they use", node, a.Verb, a.ResourceString(), a.Name, a.Namespace)
}

func (n *Node) allowed(node string, a *Attributes) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	read := readVerbs[a.Verb]
	switch a.APIGroup + "|" + a.Resource {
	case "|nodes":
		if a.Subresource == "" && read {
			return true // the agent watches its Node; nodes are not secret
		}
		if a.Name != node {
			return false
		}
		switch a.Subresource {
		case "":
			return a.Verb == "create" || a.Verb == "update" || a.Verb == "patch"
		case "status":
			return a.Verb == "get" || a.Verb == "update" || a.Verb == "patch"
		}
		return false
	case "coordination.k8s.io|leases":
		return a.Namespace == kplanev1.NamespaceNodeLease && a.Name == node && a.Subresource == "" &&
			(a.Verb == "get" || a.Verb == "create" || a.Verb == "update" || a.Verb == "patch")
	case "|pods":
		switch {
		case a.Subresource == "" && read:
			return true
		case a.Subresource == "" && a.Verb == "delete":
			_, ok := n.podOnNode(node, a.Namespace, a.Name)
			return ok
		case a.Subresource == "status" && (a.Verb == "get" || a.Verb == "update" || a.Verb == "patch"):
			_, ok := n.podOnNode(node, a.Namespace, a.Name)
			return ok
		}
		return false
	case "|events":
		return a.Verb == "create" || a.Verb == "update" || a.Verb == "patch"
	case "|services", "|endpoints":
		return a.Subresource == "" && read
	case "|secrets":
		return a.Verb == "get" && a.Subresource == "" && n.referenced(node, "Secret", a.Namespace, a.Name)
	case "|persistentvolumeclaims":
		if a.Subresource == "" && (a.Verb == "list" || a.Verb == "watch") {
			return true // the agent's claim informer wakes pods waiting for a bind
		}
		return a.Verb == "get" && a.Subresource == "" && n.referenced(node, "PersistentVolumeClaim", a.Namespace, a.Name)
	case "|persistentvolumes":
		return a.Verb == "get" && a.Subresource == "" && n.volumeReferenced(node, a.Name)
	case "|serviceaccounts":
		switch {
		case a.Subresource == "" && a.Verb == "get":
			return n.referenced(node, "ServiceAccount", a.Namespace, a.Name)
		case a.Subresource == "token" && a.Verb == "create":
			p, ok := n.podOnNode(node, a.Namespace, a.BoundPod)
			return ok && a.BoundPod != "" && p.sa == a.Name
		}
	}
	return false
}
