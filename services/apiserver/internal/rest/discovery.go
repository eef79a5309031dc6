package rest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

// The Kubernetes API level kplane's REST side implements. kubectl's
// dispatcher picks its client version from the minor.
const (
	kubeMajor = "1"
	kubeMinor = "32"
)

// verbs every resource supports, and those of the status subresource.
var (
	resourceVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	statusVerbs   = []string{"get", "patch", "update"}
)

// virtualResource is a resource served without a kind behind it.
type virtualResource struct {
	group, version, plural, singular, kind string
	verbs                                  []string
}

// virtualResources are listed by discovery next to the kinds, so clients
// (kubectl auth can-i) find them.
var virtualResources = []virtualResource{
	{group: "authorization.k8s.io", version: "v1", plural: "selfsubjectaccessreviews", singular: "selfsubjectaccessreview",
		kind: "SelfSubjectAccessReview", verbs: []string{"create"}},
}

// aggregatedType is the media type of aggregated discovery, which kubectl
// asks for first and which must be answered with exactly this Content-Type.
const aggregatedType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// discovery holds the discovery documents, built once: the kinds served
// never change while the apiserver runs.
type discovery struct {
	groupVersions []string // sorted, core "v1" excluded
	resources     map[string]*metav1.APIResourceList
	groups        map[string]metav1.APIGroup
	// core and apis are the aggregated documents for /api and /apis,
	// with their ETags.
	core, apis         []byte
	coreETag, apisETag string
}

func newDiscovery(byGV map[string]map[string]*resource) *discovery {
	d := &discovery{resources: map[string]*metav1.APIResourceList{}, groups: map[string]metav1.APIGroup{}}
	agg := map[string]*apidiscoveryv2.APIGroupDiscovery{}
	for gv, resources := range byGV {
		var group, ver string
		list := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv}
		av := apidiscoveryv2.APIVersionDiscovery{Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
		for _, plural := range sortedKeys(resources) {
			r := resources[plural]
			group, ver = r.Group, r.Version
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: r.Plural, SingularName: r.Singular, Namespaced: r.info.Namespaced, Kind: r.Kind,
				Verbs: resourceVerbs, ShortNames: r.ShortNames, Categories: r.Categories,
			})
			scope := apidiscoveryv2.ScopeCluster
			if r.info.Namespaced {
				scope = apidiscoveryv2.ScopeNamespace
			}
			gvk := &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
			ar := apidiscoveryv2.APIResourceDiscovery{
				Resource: r.Plural, ResponseKind: gvk, Scope: scope, SingularResource: r.Singular,
				Verbs: resourceVerbs, ShortNames: r.ShortNames, Categories: r.Categories,
			}
			if r.info.HasStatus() {
				list.APIResources = append(list.APIResources, metav1.APIResource{
					Name: r.Plural + "/status", Namespaced: r.info.Namespaced, Kind: r.Kind, Verbs: statusVerbs,
				})
				ar.Subresources = append(ar.Subresources, apidiscoveryv2.APISubresourceDiscovery{
					Subresource: "status", ResponseKind: gvk, Verbs: statusVerbs,
				})
			}
			for _, sub := range subresources {
				if !sub.applies(r.info) {
					continue
				}
				g, v := sub.group, sub.version
				if g == "" && v == "" {
					g, v = r.Group, r.Version
				}
				// Group and version are named only when they differ from
				// the parent's (kubectl drain looks for policy/v1 here).
				list.APIResources = append(list.APIResources, metav1.APIResource{
					Name: r.Plural + "/" + sub.name, Namespaced: r.info.Namespaced, Group: sub.group, Version: sub.version, Kind: sub.kind, Verbs: sub.verbs,
				})
				ar.Subresources = append(ar.Subresources, apidiscoveryv2.APISubresourceDiscovery{
					Subresource: sub.name, ResponseKind: &metav1.GroupVersionKind{Group: g, Version: v, Kind: sub.kind}, Verbs: sub.verbs,
				})
			}
			av.Resources = append(av.Resources, ar)
		}
		av.Version = ver
		d.resources[gv] = list
		if group != "" {
			d.groupVersions = append(d.groupVersions, gv)
			gvd := metav1.GroupVersionForDiscovery{GroupVersion: gv, Version: ver}
			d.groups[group] = metav1.APIGroup{
				TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
				Name:     group, Versions: []metav1.GroupVersionForDiscovery{gvd}, PreferredVersion: gvd,
			}
		}
		g := agg[group]
		if g == nil {
			g = &apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: group}}
			agg[group] = g
		}
		g.Versions = append(g.Versions, av)
	}
	for _, v := range virtualResources {
		gv := v.group + "/" + v.version
		d.resources[gv] = &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv,
			APIResources: []metav1.APIResource{{Name: v.plural, SingularName: v.singular, Kind: v.kind, Verbs: v.verbs}}}
		d.groupVersions = append(d.groupVersions, gv)
		gvd := metav1.GroupVersionForDiscovery{GroupVersion: gv, Version: v.version}
		d.groups[v.group] = metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
			Name: v.group, Versions: []metav1.GroupVersionForDiscovery{gvd}, PreferredVersion: gvd}
		agg[v.group] = &apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: v.group}, Versions: []apidiscoveryv2.APIVersionDiscovery{{
			Version: v.version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
			Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: v.plural, SingularResource: v.singular, Scope: apidiscoveryv2.ScopeCluster,
				ResponseKind: &metav1.GroupVersionKind{Group: v.group, Version: v.version, Kind: v.kind}, Verbs: v.verbs}},
		}}}
	}
	sort.Strings(d.groupVersions)
	aggList := func(groups []string) []byte {
		l := apidiscoveryv2.APIGroupDiscoveryList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"}}
		for _, g := range groups {
			l.Items = append(l.Items, *agg[g])
		}
		b, err := json.Marshal(l)
		if err != nil {
			panic(fmt.Sprintf("discovery: marshal the aggregated document: %v", err)) // fixed types always marshal
		}
		return b
	}
	d.core = aggList([]string{""})
	var groups []string
	for _, gv := range d.groupVersions {
		groups = append(groups, strings.SplitN(gv, "/", 2)[0])
	}
	d.apis = aggList(groups)
	d.coreETag, d.apisETag = etag(d.core), etag(d.apis)
	return d
}

func etag(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// wantsAggregated reports whether the client accepts aggregated discovery
// (kubectl lists it first in Accept; a client that does not gets the
// legacy documents).
func wantsAggregated(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		params := map[string]string{}
		fields := strings.Split(part, ";")
		for _, f := range fields[1:] {
			if k, v, ok := strings.Cut(strings.TrimSpace(f), "="); ok {
				params[k] = v
			}
		}
		if strings.TrimSpace(fields[0]) == "application/json" && params["g"] == "apidiscovery.k8s.io" && params["v"] == "v2" && params["as"] == "APIGroupDiscoveryList" {
			return true
		}
	}
	return false
}

// serveAggregated answers with an aggregated document, or 304 when the
// client's copy (If-None-Match) is current.
func serveAggregated(w http.ResponseWriter, r *http.Request, body []byte, tag string) {
	w.Header().Set("ETag", tag)
	w.Header().Set("Vary", "Accept")
	if r.Header.Get("If-None-Match") == tag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", aggregatedType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body) // a gone client is not an error of ours
}

func (d *discovery) serveCoreVersions(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeStatus(w, methodNotAllowed(r))
		return
	}
	if wantsAggregated(r) {
		serveAggregated(w, r, d.core, d.coreETag)
		return
	}
	writeJSON(w, http.StatusOK, &metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
		Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
			{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host},
		},
	})
}

func (d *discovery) serveGroups(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeStatus(w, methodNotAllowed(r))
		return
	}
	if wantsAggregated(r) {
		serveAggregated(w, r, d.apis, d.apisETag)
		return
	}
	l := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	for _, g := range sortedKeys(d.groups) {
		l.Groups = append(l.Groups, d.groups[g])
	}
	writeJSON(w, http.StatusOK, l)
}

func (d *discovery) serveGroup(w http.ResponseWriter, r *http.Request, group string) {
	g, ok := d.groups[group]
	if !ok || r.Method != http.MethodGet {
		writeNotFoundPath(w, r)
		return
	}
	writeJSON(w, http.StatusOK, g)
}

func (d *discovery) serveResources(w http.ResponseWriter, r *http.Request, gv string) {
	if r.Method != http.MethodGet {
		writeStatus(w, methodNotAllowed(r))
		return
	}
	writeJSON(w, http.StatusOK, d.resources[gv])
}

// serveVersion is GET /version.
func (h *Handler) serveVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, version.Info{
		Major: kubeMajor, Minor: kubeMinor, GitVersion: h.version.GitVersion,
		GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH,
	})
}
