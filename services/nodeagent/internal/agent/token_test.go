package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	sa "github.com/kplane/kplane/pkg/serviceaccount"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestPodToken: a pod's process finds a token bound to its pod in the
// file KPLANE_TOKEN_FILE names; the agent replaces it before it expires;
// deleting the pod revokes it.
func TestPodToken(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// Refresh almost at once, so the test sees a replacement.
	old := tokenRefreshFraction
	tokenRefreshFraction = 0.002 // of the 1h maximum: about 7s
	t.Cleanup(func() { tokenRefreshFraction = old })
	e := newEnv(t, testserver.WithServiceAccountTokensOpen(key))
	if _, err := client.ServiceAccounts(e.api).Create(e.ctx, &kplanev1.ServiceAccount{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "robot"}}); err != nil {
		t.Fatal(err)
	}
	e.startAgent()
	out := filepath.Join(t.TempDir(), "seen")
	p := e.createPod("tok", "node-a", func(p *kplanev1.Pod) {
		p.Spec.ServiceAccountName = "robot"
		p.Spec.Containers[0].Env = []*kplanev1.EnvVar{{Name: "OUT", Value: out}}
	}, "sh", "-c", `cp "$KPLANE_TOKEN_FILE" "$OUT.tmp" && echo "$KPLANE_TOKEN_FILE" > "$OUT.path" && mv "$OUT.tmp" "$OUT"; exec sleep 300`)
	p = e.waitCreated(p, "Running", phase(kplanev1.PodRunning))
	var seen []byte
	waitFor(t, e.ctx, "the process read its token", func() bool {
		seen, err = os.ReadFile(out)
		return err == nil && len(seen) > 0
	})
	path, err := os.ReadFile(out + ".path")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(e.root, podsDir, p.GetMetadata().GetUid(), tokenFile)
	if string(path) != want+"\n" {
		t.Fatalf("KPLANE_TOKEN_FILE=%q, want %q", path, want)
	}
	fi, err := os.Stat(want)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	auth := e.srv.API().ServiceAccountAuthenticator()
	u, ok, err := auth.AuthenticateToken(e.ctx, string(seen))
	if !ok || err != nil || u.Name != "system:serviceaccount:default:robot" || u.Extra[sa.PodUIDExtra][0] != p.GetMetadata().GetUid() {
		t.Fatalf("pod's token: user %+v ok %v err %v", u, ok, err)
	}
	// Refreshed: the file holds a new token, valid too.
	var fresh []byte
	waitFor(t, e.ctx, "token refresh", func() bool {
		fresh, err = os.ReadFile(want)
		return err == nil && len(fresh) > 0 && string(fresh) != string(seen)
	})
	if _, ok, err := auth.AuthenticateToken(e.ctx, string(fresh)); !ok || err != nil {
		t.Fatalf("refreshed token: ok %v err %v", ok, err)
	}
	zero := int64(0)
	if _, err := client.Pods(e.api).Delete(e.ctx, "default", "tok", client.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, e.ctx, "token revoked with its pod", func() bool {
		_, ok, err := auth.AuthenticateToken(e.ctx, string(fresh))
		return !ok && err != nil
	})
}
