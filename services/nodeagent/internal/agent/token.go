package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	// TokenFileEnv names, in a container's environment, the file holding
	// its pod's ServiceAccount token (kept fresh by the agent).
	TokenFileEnv = "KPLANE_TOKEN_FILE"
	// tokenFile is the token's file in the pod directory.
	tokenFile = "token"
	// tokenRetry is how soon a failed token request is tried again.
	tokenRetry = 5 * time.Second
)

// tokenRefreshFraction of a token's lifetime passes before it is
// replaced, so a process reading the file never holds an expired one.
// A variable so that a test can watch a refresh happen.
var tokenRefreshFraction = 0.8

// podToken is a pod's current token file.
type podToken struct {
	path      string
	refreshAt time.Time
}

// ensureToken gives the pod a token bound to it (TokenRequest for its
// ServiceAccount) in a file of its directory, and replaces it once 80%
// of its lifetime has passed. The refresh rides on the pod's own
// reconcile (the returned time is when the pod next needs a look), so no
// goroutine or timer outlives the pod. With the fake runtime there is no
// process to hand a token to, and none is requested. An apiserver
// without a signing key answers Unimplemented: pods then run without a
// token (logged once).
func (a *Agent) ensureToken(ctx context.Context, pod *kplanev1.Pod, st *podState, now time.Time) (time.Time, error) {
	if a.exec == nil || a.tokensOff.Load() {
		return time.Time{}, nil
	}
	if st.token != nil && now.Before(st.token.refreshAt) {
		return st.token.refreshAt, nil
	}
	md := pod.GetMetadata()
	account := pod.GetSpec().GetServiceAccountName()
	if account == "" {
		account = "default"
	}
	resp, err := kplanev1.NewResourcesClient(a.api.Conn()).CreateToken(ctx, &kplanev1.CreateTokenRequest{
		Namespace:          md.GetNamespace(),
		ServiceAccountName: account,
		BoundObject:        &kplanev1.BoundObjectReference{Kind: "Pod", Name: md.GetName(), Uid: md.GetUid()},
	})
	switch status.Code(err) {
	case codes.OK:
	case codes.Unimplemented, codes.FailedPrecondition:
		if a.tokensOff.CompareAndSwap(false, true) {
			a.log.Warn("the apiserver issues no ServiceAccount tokens; pods run without one", "error", err)
		}
		return time.Time{}, nil
	default:
		if st.token != nil {
			// The old token is still valid for a while: keep it and retry.
			a.log.Warn("could not refresh pod token", "pod", md.GetNamespace()+"/"+md.GetName(), "error", err)
			st.token.refreshAt = now.Add(tokenRetry)
			return st.token.refreshAt, nil
		}
		return now.Add(tokenRetry), fmt.Errorf("request token for pod %s/%s (service account %s): %w", md.GetNamespace(), md.GetName(), account, err)
	}
	path := filepath.Join(a.exec.podDir(md.GetUid()), tokenFile)
	if err := writeFileAtomic(path, []byte(resp.GetToken()), 0o600); err != nil {
		return now.Add(tokenRetry), fmt.Errorf("write token of pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	life := resp.GetExpirationTimestamp().AsTime().Sub(now)
	st.token = &podToken{path: path, refreshAt: now.Add(time.Duration(float64(life) * tokenRefreshFraction))}
	return st.token.refreshAt, nil
}

// writeFileAtomic replaces path with b: a reader sees the old token or
// the new one, never a partial write.
func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := firstErr(werr, cerr, os.Chmod(tmp, mode)); err != nil {
		_ = os.Remove(tmp) // the write already failed; this only tidies up
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
