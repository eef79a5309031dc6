package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// authzServer starts an apiserver with authorization and a context
// bounded by the test.
func authzServer(t *testing.T, opts ...testserver.Option) (*testserver.Server, context.Context) {
	t.Helper()
	srv := testserver.Start(t, opts...)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return srv, ctx
}

// TestRBACOverREST runs the apiserver with Node,RBAC and the audit log
// on. Requests carry no credentials (authentication is not configured
// here), so they are system:anonymous's: denied until a binding grants
// that user something, then granted exactly that, with REST's verbs
// (patch, deletecollection) and REST-only subresources checked too.
func TestRBACOverREST(t *testing.T) {
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	srv, ctx := authzServer(t, testserver.WithAuthorization(auditPath, "Node", "RBAC"))
	cl := srv.Client()
	st := srv.API().Store()
	c := &restClient{t: t, base: "http://" + srv.Addr()}

	// The bootstrap policy exists.
	for _, k := range [][2]string{{"ClusterRole", "cluster-admin"}, {"ClusterRoleBinding", "cluster-admin"},
		{"ClusterRole", "system:node"}, {"ClusterRole", "system:kplane:scheduler"}, {"ClusterRoleBinding", "system:kplane:tokenctl"}} {
		if _, err := st.Get(ctx, k[0], "", k[1]); err != nil {
			t.Errorf("bootstrap %s %s: %v", k[0], k[1], err)
		}
	}

	r := c.do("GET", "/api/v1/namespaces/default/pods", "", nil)
	if r.code != http.StatusForbidden || r.str("reason") != "Forbidden" || r.str("kind") != "Status" ||
		!strings.Contains(r.str("message"), `User "system:anonymous" cannot list resource "pods"`) {
		t.Fatalf("anonymous list: %d %s", r.code, r.raw)
	}
	_, err := cl.Get(ctx, &kplanev1.GetRequest{Kind: "Node", Name: "n"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `User "system:anonymous" cannot get resource "nodes"`) {
		t.Fatalf("gRPC get as anonymous: %v", err)
	}

	// Grant anonymous get, list and patch on pods: not update, not delete.
	for _, o := range []*kplanev1.Object{
		kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: &kplanev1.ObjectMeta{Name: "anon-patch"},
			Rules: []*kplanev1.PolicyRule{{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "patch"}}}}),
		kplanev1.MustWrap(&kplanev1.ClusterRoleBinding{Metadata: &kplanev1.ObjectMeta{Name: "anon-patch"},
			RoleRef:  &kplanev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "anon-patch"},
			Subjects: []*kplanev1.Subject{{Kind: "User", ApiGroup: "rbac.authorization.k8s.io", Name: "system:anonymous"}}}),
		kplanev1.MustWrap(&kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "i"}}}}),
	} {
		if _, err := st.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "anonymous may get pods", func() bool {
		return c.do("GET", "/api/v1/namespaces/default/pods/web", "", nil).code == http.StatusOK
	})
	if r := c.do("PATCH", "/api/v1/namespaces/default/pods/web", "application/merge-patch+json", `{"metadata":{"labels":{"a":"b"}}}`); r.code != http.StatusOK {
		t.Fatalf("PATCH with patch granted: %d %s", r.code, r.raw)
	}
	pod := c.do("GET", "/api/v1/namespaces/default/pods/web", "", nil)
	if r := c.do("PUT", "/api/v1/namespaces/default/pods/web", "application/json", pod.body); r.code != http.StatusForbidden ||
		!strings.Contains(r.str("message"), "cannot update") {
		t.Fatalf("PUT without update: %d %s", r.code, r.raw)
	}
	if r := c.do("DELETE", "/api/v1/namespaces/default/pods", "", nil); r.code != http.StatusForbidden ||
		!strings.Contains(r.str("message"), "cannot deletecollection") {
		t.Fatalf("collection DELETE: %d %s", r.code, r.raw)
	}
	if r := c.do("GET", "/api/v1/namespaces/default/pods/web/log", "", nil); r.code != http.StatusForbidden ||
		!strings.Contains(r.str("message"), `"pods/log"`) {
		t.Fatalf("pods/log: %d %s", r.code, r.raw)
	}
	if r := c.do("POST", "/api/v1/namespaces/default/pods/web/exec?command=ls", "", nil); r.code != http.StatusForbidden ||
		!strings.Contains(r.str("message"), `"pods/exec"`) {
		t.Fatalf("pods/exec: %d %s", r.code, r.raw)
	}
	if r := c.do("GET", "/api/v1/namespaces/default/services/web/proxy/", "", nil); r.code != http.StatusForbidden ||
		!strings.Contains(r.str("message"), `"services/proxy"`) {
		t.Fatalf("services/proxy: %d %s", r.code, r.raw)
	}

	// kubectl auth can-i: discovery lists the review, and it answers.
	if r := c.do("GET", "/apis/authorization.k8s.io/v1", "", nil); r.code != http.StatusOK || !strings.Contains(string(r.raw), `"selfsubjectaccessreviews"`) {
		t.Fatalf("discovery of authorization.k8s.io/v1: %d %s", r.code, r.raw)
	}
	if r := c.do("GET", "/apis", "", nil); !strings.Contains(string(r.raw), "authorization.k8s.io") {
		t.Fatalf("/apis lacks authorization.k8s.io: %s", r.raw)
	}
	review := func(verb string) bool {
		r := c.do("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json", map[string]any{
			"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
			"spec": map[string]any{"resourceAttributes": map[string]any{"verb": verb, "resource": "pods", "namespace": "default"}},
		})
		if r.code != http.StatusCreated {
			t.Fatalf("review: %d %s", r.code, r.raw)
		}
		st, _ := r.body["status"].(map[string]any)
		allowed, _ := st["allowed"].(bool)
		return allowed
	}
	if !review("patch") || review("delete") {
		t.Error("SelfSubjectAccessReview: want patch allowed, delete not")
	}
	if r := c.do("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json", `{"spec":{}}`); r.code != http.StatusUnprocessableEntity {
		t.Errorf("review without resourceAttributes: %d %s", r.code, r.raw)
	}

	// The audit log has the patch (as patch) and the denials.
	f, err := os.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var patched, deniedDelete bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if e["verb"] == "patch" && e["decision"] == "allow" && e["code"] == "OK" && e["name"] == "web" && e["user"] == "system:anonymous" {
			patched = true
		}
		if e["verb"] == "deletecollection" && e["decision"] == "deny" && e["code"] == "PermissionDenied" {
			deniedDelete = true
		}
	}
	if !patched || !deniedDelete {
		t.Errorf("audit: patch line %v, deletecollection denial %v", patched, deniedDelete)
	}
}

// TestBootstrapPolicyReensured: on restart a bootstrap object is put back
// to its built-in content, unless its autoupdate annotation is "false";
// objects of the user's are left alone.
func TestBootstrapPolicyReensured(t *testing.T) {
	srv, ctx := authzServer(t, testserver.WithAuthorization("", "RBAC"))
	st := srv.API().Store()
	edit := func(name string, keep bool) *kplanev1.Object {
		o, err := st.Get(ctx, "ClusterRole", "", name)
		if err != nil {
			t.Fatal(err)
		}
		o.GetClusterRole().Rules = []*kplanev1.PolicyRule{{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}
		if keep {
			o.Meta().Annotations["rbac.authorization.kubernetes.io/autoupdate"] = "false"
		}
		out, err := st.Update(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	builtin, err := st.Get(ctx, "ClusterRole", "", "system:kplane:gcctl")
	if err != nil {
		t.Fatal(err)
	}
	edit("system:kplane:gcctl", false)
	kept := edit("system:kplane:proxy", true)
	mine := kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: &kplanev1.ObjectMeta{Name: "mine"},
		Rules: []*kplanev1.PolicyRule{{ApiGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get"}}}})
	mine, err = st.Create(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	st = srv.API().Store()
	got, err := st.Get(ctx, "ClusterRole", "", "system:kplane:gcctl")
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&kplanev1.ClusterRole{Rules: got.GetClusterRole().GetRules()}, &kplanev1.ClusterRole{Rules: builtin.GetClusterRole().GetRules()}) {
		t.Errorf("edited bootstrap role not restored: %v", got.GetClusterRole().GetRules())
	}
	for _, want := range []*kplanev1.Object{kept, mine} {
		got, err := st.Get(ctx, "ClusterRole", "", want.Meta().GetName())
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("%s changed by the restart:\n got %v\nwant %v", want.Meta().GetName(), got, want)
		}
	}
}

// TestKubectlAuthCanI runs the real kubectl's auth can-i, which finds the
// SelfSubjectAccessReview through discovery and posts one.
func TestKubectlAuthCanI(t *testing.T) {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on the PATH")
	}
	srv, ctx := authzServer(t, testserver.WithAuthorization("", "RBAC"))
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster: {server: \"http://" + srv.Addr() + "\"}\n" +
		"contexts:\n- name: k\n  context: {cluster: k, namespace: default}\ncurrent-context: k\n"
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	canI := func(args ...string) (string, error) {
		c := exec.CommandContext(ctx, bin, append([]string{"auth", "can-i"}, args...)...)
		c.Env = append(os.Environ(), "KUBECONFIG="+kc, "HOME="+dir)
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil && stderr.Len() > 0 {
			t.Logf("kubectl auth can-i %v: %s", args, stderr.String())
		}
		return strings.TrimSpace(string(out)), err
	}
	if out, err := canI("list", "pods"); out != "no" || err == nil {
		t.Fatalf("before the grant: %q %v, want no and exit 1", out, err)
	}
	for _, o := range []*kplanev1.Object{
		kplanev1.MustWrap(&kplanev1.ClusterRole{Metadata: &kplanev1.ObjectMeta{Name: "anon-list"},
			Rules: []*kplanev1.PolicyRule{{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}}}),
		kplanev1.MustWrap(&kplanev1.RoleBinding{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "anon-list"},
			RoleRef:  &kplanev1.RoleRef{Kind: "ClusterRole", Name: "anon-list"},
			Subjects: []*kplanev1.Subject{{Kind: "User", Name: "system:anonymous"}}}),
	} {
		if _, err := srv.API().Store().Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "kubectl auth can-i list pods says yes", func() bool {
		out, err := canI("list", "pods")
		return out == "yes" && err == nil
	})
	if out, _ := canI("list", "pods", "-n", "kplane-system"); out != "no" {
		t.Errorf("other namespace: %q, want no", out)
	}
	if out, _ := canI("delete", "pods"); out != "no" {
		t.Errorf("delete: %q, want no", out)
	}
}
