package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/pki"
	sa "github.com/kplane/kplane/pkg/serviceaccount"
	"github.com/kplane/kplane/test/e2e/stack"
)

func init() {
	binaries["tokenctl"] = "services/tokenctl"
	binaries["scheduler"] = "services/scheduler"
	binaries["nodeagent"] = "services/nodeagent"
	binaries["ipamctl"] = "services/ipamctl"
}

// TestTokens runs the apiserver with a ServiceAccount key, tokenctl, the
// scheduler and an exec node agent as processes: the default account
// appears, a pod finds a token bound to it in $KPLANE_TOKEN_FILE, a
// token Secret is filled, and a pod naming a missing account is refused.
func TestTokens(t *testing.T) {
	dir := t.TempDir()
	cluster := netip.MustParsePrefix(fmt.Sprintf("127.%d.0.0/16", 150+os.Getpid()%50))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A secure stack: the apiserver verifies and signs with the stack's
	// ServiceAccount key pair (pkg/pki's sa.key, sa.pub), tokenctl signs
	// with sa.key.
	s := startStack(ctx, t, stack.Options{
		BinDir: binDir, DataDir: t.TempDir(), Nodes: 1, NoProxy: true,
		Controllers: []string{"scheduler", "ipamctl", "tokenctl"},
		Args:        map[string][]string{"ipamctl": {"--cluster-cidr", cluster.String()}},
	})
	keys, err := sa.LoadPublicKeysFiles(s.Options().PKI().File(pki.SAPub))
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := sa.NewVerifier("", keys)
	if err != nil {
		t.Fatal(err)
	}
	c := &epCluster{t: t, s: s, api: dialStack(ctx, t, s)}

	c.eventually("default service account", func() string {
		if _, err := c.get("ServiceAccount", "default"); err != nil {
			return err.Error()
		}
		return ""
	})
	// Admission: a missing account is refused.
	cctx, opt := call(t)
	_, err = c.api.Create(cctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "ghost"},
		Spec:     &kplanev1.PodSpec{ServiceAccountName: "ghost", Containers: []*kplanev1.Container{{Name: "c", Image: "local", Command: []string{"true"}}}},
	})}, opt)
	if err == nil || !strings.Contains(err.Error(), "spec.serviceAccountName") {
		t.Fatalf("pod with a missing account: %v", err)
	}

	out := filepath.Join(dir, "seen")
	c.create(kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "reader"},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "local",
			Env:     []*kplanev1.EnvVar{{Name: "OUT", Value: out}},
			Command: []string{"sh", "-c", `cp "$KPLANE_TOKEN_FILE" "$OUT.tmp" && mv "$OUT.tmp" "$OUT"; exec sleep 300`}}}},
	}))
	pod := c.waitPhase("reader", kplanev1.PodRunning)
	var claims *sa.Claims
	c.eventually("the pod's process read a valid token", func() string {
		b, err := os.ReadFile(out)
		if err != nil {
			return err.Error()
		}
		if claims, err = verifier.Verify(string(b), time.Now()); err != nil {
			return err.Error()
		}
		return ""
	})
	if claims.Subject() != "system:serviceaccount:default:default" || claims.PodName != "reader" || claims.PodUID != pod.GetMetadata().GetUid() {
		t.Fatalf("pod token claims %+v", claims)
	}

	c.create(kplanev1.MustWrap(&kplanev1.Secret{Type: sa.SecretType,
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "default-token", Annotations: map[string]string{sa.NameAnnotation: "default"}}}))
	c.eventually("token secret filled", func() string {
		o, err := c.get("Secret", "default-token")
		if err != nil {
			return err.Error()
		}
		cl, err := verifier.Verify(string(o.GetSecret().GetData()[sa.TokenKey]), time.Now())
		if err != nil {
			return err.Error()
		}
		if cl.SecretName != "default-token" || !cl.Expiry.IsZero() {
			return fmt.Sprintf("claims %+v", cl)
		}
		return ""
	})
}
