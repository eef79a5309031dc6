// Package tokens is the ServiceAccount and token controller, as
// Kubernetes' serviceaccounts-controller and tokens-controller together:
//
//   - every Namespace has a ServiceAccount named "default", recreated when
//     deleted (pods use it when they name none);
//   - a Secret of type kubernetes.io/service-account-token whose
//     kubernetes.io/service-account.name annotation names an account is
//     filled with a token for it (signed with the service account private
//     key, no expiry: it lives as long as the Secret and the account), the
//     cluster CA and the namespace;
//   - such a Secret is deleted once its account is gone, or was recreated
//     (the uid annotation names an older account): its token is dead.
package tokens

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	sa "github.com/kplane/kplane/pkg/serviceaccount"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	kindNamespace = "Namespace"
	kindAccount   = "ServiceAccount"
	kindSecret    = "Secret"

	// accountIndex indexes token Secrets by "namespace/account".
	accountIndex = "account"
)

type controller struct {
	keyFile, caFile, issuer string

	signer *sa.Signer
	ca     []byte

	api        *client.Client
	log        hclog.Logger
	namespaces *informer.Informer
	accounts   *informer.Informer
	secrets    *informer.Informer

	accountsCreated atomic.Int64
	tokensIssued    atomic.Int64
	secretsDeleted  atomic.Int64
}

// NewService returns tokenctl: the binary's main runs it with app.Main.
func NewService() app.Service { return (&controller{}).service() }

func (r *controller) service() app.Service {
	return app.Service{
		Name:          "tokenctl",
		HealthAddr:    ":10271",
		LeaderElected: true,
		Workers:       2,
		Watches: []app.Watch{
			{Kind: kindNamespace, MapToKey: func(o *kplanev1.Object) []string { return []string{nsKey(o.Meta().GetName())} }},
			{Kind: kindAccount, MapToKey: r.accountKeys},
			{Kind: kindSecret, MapToKey: secretKeys},
		},
		AddFlags: func(fs *flag.FlagSet) {
			fs.StringVar(&r.keyFile, "service-account-private-key-file", "",
				"PEM PKCS#8 private key (ECDSA P-256 or Ed25519) that signs the tokens put in ServiceAccount token Secrets (required); the apiserver's --service-account-key-file must hold its public key")
			fs.StringVar(&r.caFile, "root-ca-file", "", "PEM CA bundle put in each token Secret as ca.crt (optional)")
			fs.StringVar(&r.issuer, "service-account-issuer", sa.DefaultIssuer, "iss claim of the tokens; must equal the apiserver's --service-account-issuer")
		},
		CheckFlags: r.loadKeys,
		Setup:      r.setup,
	}
}

// loadKeys reads the key and CA files once flags are parsed, so a bad
// file is a usage error before anything starts.
func (r *controller) loadKeys() error {
	if r.keyFile == "" {
		return errors.New("--service-account-private-key-file is required")
	}
	key, err := sa.LoadPrivateKeyFile(r.keyFile)
	if err != nil {
		return fmt.Errorf("--service-account-private-key-file: %w", err)
	}
	if r.signer, err = sa.NewSigner(r.issuer, key); err != nil {
		return fmt.Errorf("--service-account-private-key-file: %w", err)
	}
	if r.caFile != "" {
		if r.ca, err = os.ReadFile(r.caFile); err != nil {
			return fmt.Errorf("--root-ca-file: %w", err)
		}
		if !strings.Contains(string(r.ca), "-----BEGIN CERTIFICATE-----") {
			return fmt.Errorf("--root-ca-file: %s holds no PEM certificate", r.caFile)
		}
	}
	return nil
}

func (r *controller) setup(c *app.Context) (app.Reconciler, error) {
	r.api, r.log = c.Client, c.Logger
	r.namespaces = c.Informers.ForKind(kindNamespace)
	r.accounts = c.Informers.ForKind(kindAccount)
	r.secrets = c.Informers.ForKind(kindSecret)
	if err := r.secrets.AddIndexers(informer.Indexers{accountIndex: func(o *kplanev1.Object) []string {
		if name, ok := tokenSecretAccount(o.GetSecret()); ok {
			return []string{kplanev1.MetaKey(o.Meta().GetNamespace(), name)}
		}
		return nil
	}}); err != nil {
		return nil, fmt.Errorf("secret index: %w", err)
	}
	if err := c.RegisterCounters(
		app.Counter{Name: "kplane_tokenctl_accounts_created_total", Help: "default ServiceAccounts created.", Value: &r.accountsCreated},
		app.Counter{Name: "kplane_tokenctl_tokens_issued_total", Help: "token Secrets filled with a token.", Value: &r.tokensIssued},
		app.Counter{Name: "kplane_tokenctl_secrets_deleted_total", Help: "token Secrets deleted because their account is gone.", Value: &r.secretsDeleted},
	); err != nil {
		return nil, err
	}
	return r, nil
}

// Keys: "Namespace/<name>" and "Secret/<ns>/<name>".
func nsKey(name string) string         { return kindNamespace + "/" + name }
func secretKey(ns, name string) string { return kindSecret + "/" + ns + "/" + name }

func secretKeys(o *kplanev1.Object) []string {
	if _, ok := tokenSecretAccount(o.GetSecret()); !ok {
		return nil
	}
	return []string{secretKey(o.Meta().GetNamespace(), o.Meta().GetName())}
}

// accountKeys wakes the namespace (its default account may be gone) and
// the token Secrets of the account.
func (r *controller) accountKeys(o *kplanev1.Object) []string {
	ns, name := o.Meta().GetNamespace(), o.Meta().GetName()
	var keys []string
	if name == sa.DefaultName {
		keys = append(keys, nsKey(ns))
	}
	if r.secrets != nil {
		objs, _ := r.secrets.Store().ByIndex(accountIndex, kplanev1.MetaKey(ns, name))
		for _, s := range objs {
			keys = append(keys, secretKey(s.Meta().GetNamespace(), s.Meta().GetName()))
		}
	}
	return keys
}

// tokenSecretAccount returns the account a token Secret is for.
func tokenSecretAccount(s *kplanev1.Secret) (string, bool) {
	if s.GetType() != sa.SecretType {
		return "", false
	}
	name := s.GetMetadata().GetAnnotations()[sa.NameAnnotation]
	return name, name != ""
}

// Reconcile implements app.Reconciler.
func (r *controller) Reconcile(ctx context.Context, key string) error {
	kind, rest, _ := strings.Cut(key, "/")
	switch kind {
	case kindNamespace:
		return r.syncNamespace(ctx, rest)
	case kindSecret:
		ns, name := kplanev1.SplitKey(rest)
		return r.syncSecret(ctx, ns, name)
	}
	return fmt.Errorf("malformed key %q", key)
}

// syncNamespace makes sure a live namespace has its default account.
func (r *controller) syncNamespace(ctx context.Context, ns string) error {
	o, ok := r.namespaces.Store().GetByName("", ns)
	if !ok || o.Meta().GetDeletionTimestamp() != nil {
		return nil // a terminating namespace refuses new objects
	}
	if _, ok := r.accounts.Store().GetByName(ns, sa.DefaultName); ok {
		return nil
	}
	_, err := client.ServiceAccounts(r.api).Create(ctx, &kplanev1.ServiceAccount{Metadata: &kplanev1.ObjectMeta{Namespace: ns, Name: sa.DefaultName}})
	switch {
	case client.IsAlreadyExists(err):
		return nil // the cache is behind; its event will come
	case err != nil:
		return fmt.Errorf("create service account %s/%s: %w", ns, sa.DefaultName, err)
	}
	r.accountsCreated.Add(1)
	r.log.Info("created service account", "namespace", ns, "name", sa.DefaultName)
	return nil
}

// syncSecret fills a token Secret, or deletes it when its account is gone.
func (r *controller) syncSecret(ctx context.Context, ns, name string) error {
	o, ok := r.secrets.Store().GetByName(ns, name)
	if !ok || o.Meta().GetDeletionTimestamp() != nil {
		return nil
	}
	sec := o.GetSecret()
	acctName, ok := tokenSecretAccount(sec)
	if !ok {
		return nil
	}
	wantUID := sec.GetMetadata().GetAnnotations()[sa.UIDAnnotation]
	var acct *kplanev1.ServiceAccount
	if o, ok := r.accounts.Store().GetByName(ns, acctName); ok {
		acct = o.GetServiceAccount()
	}
	if acct == nil || (wantUID != "" && wantUID != acct.GetMetadata().GetUid()) {
		// Confirm with the apiserver before deleting: on a stale cache's
		// word (an account created a moment ago) a valid token would go.
		var err error
		if acct, err = r.liveAccount(ctx, ns, acctName); err != nil {
			return err
		}
		if acct == nil || (wantUID != "" && wantUID != acct.GetMetadata().GetUid()) {
			return r.deleteSecret(ctx, sec, acctName)
		}
	}
	uid := acct.GetMetadata().GetUid()
	if wantUID == uid && len(sec.GetData()[sa.TokenKey]) > 0 && string(sec.GetData()[sa.NamespaceKey]) == ns &&
		(r.ca == nil || string(sec.GetData()[sa.CAKey]) == string(r.ca)) {
		return nil
	}
	up := proto.Clone(sec).(*kplanev1.Secret)
	if up.Metadata.Annotations == nil {
		up.Metadata.Annotations = map[string]string{}
	}
	up.Metadata.Annotations[sa.UIDAnnotation] = uid
	if up.Data == nil {
		up.Data = map[string][]byte{}
	}
	if len(up.Data[sa.TokenKey]) == 0 {
		tok, err := r.signer.Sign(sa.Claims{IssuedAt: time.Now(), Namespace: ns, ServiceAccountName: acctName, ServiceAccountUID: uid, SecretName: name, SecretUID: sec.GetMetadata().GetUid()})
		if err != nil {
			return fmt.Errorf("secret %s/%s: %w", ns, name, err)
		}
		up.Data[sa.TokenKey] = []byte(tok)
		r.tokensIssued.Add(1)
	}
	up.Data[sa.NamespaceKey] = []byte(ns)
	if r.ca != nil {
		up.Data[sa.CAKey] = r.ca
	}
	// The resourceVersion makes this a compare-and-swap: two workers (or
	// a user's write) racing on one Secret cannot both issue a token.
	if _, err := client.Secrets(r.api).Update(ctx, up); err != nil {
		if client.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("fill token secret %s/%s: %w", ns, name, err)
	}
	r.log.Info("filled token secret", "namespace", ns, "secret", name, "account", acctName)
	return nil
}

// liveAccount reads the account from the apiserver; nil means it does
// not exist.
func (r *controller) liveAccount(ctx context.Context, ns, name string) (*kplanev1.ServiceAccount, error) {
	a, err := client.ServiceAccounts(r.api).Get(ctx, ns, name)
	switch {
	case client.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get service account %s/%s: %w", ns, name, err)
	}
	return a, nil
}

func (r *controller) deleteSecret(ctx context.Context, sec *kplanev1.Secret, acct string) error {
	ns, name := sec.GetMetadata().GetNamespace(), sec.GetMetadata().GetName()
	// The uid precondition: a Secret recreated meanwhile is not ours to delete.
	_, err := client.Secrets(r.api).Delete(ctx, ns, name, client.DeleteOptions{Preconditions: &kplanev1.Preconditions{Uid: sec.GetMetadata().GetUid()}})
	if err != nil && !client.IsNotFound(err) {
		return fmt.Errorf("delete token secret %s/%s: %w", ns, name, err)
	}
	if err == nil {
		r.secretsDeleted.Add(1)
		r.log.Info("deleted token secret of a missing service account", "namespace", ns, "secret", name, "account", acct)
	}
	return nil
}
