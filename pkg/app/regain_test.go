package app_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/controller"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// cutMidCreate passes every call through, except the first Pod create:
// that one waits until its context ends (the loop lost its lease and
// stopped its work) and then fails with Unavailable without writing, as a
// create does when the apiserver goes away under it.
type cutMidCreate struct {
	kplanev1.ResourcesClient
	once    sync.Once
	started chan struct{}
}

func (c *cutMidCreate) Create(ctx context.Context, req *kplanev1.CreateRequest, opts ...grpc.CallOption) (*kplanev1.CreateResponse, error) {
	first := false
	if req.GetObject().KindName() == "Pod" {
		c.once.Do(func() { first = true })
	}
	if !first {
		return c.ResourcesClient.Create(ctx, req, opts...)
	}
	close(c.started)
	<-ctx.Done()
	return nil, status.Error(codes.Unavailable, "connection refused")
}

// TestHostLoopRegainsLeaseAndReconciles: a hosted loop whose lease is
// lost in the middle of a pod create (the call fails with an unknown
// outcome as its term ends) and that wins the lease back in the same
// process reconciles again: the create's expectation, which no revision
// could be read for while the term was ending, does not hold the owner
// until the expectations' TTL (the stalled replicactl of the seed-7
// kcm chaos run).
func TestHostLoopRegainsLeaseAndReconciles(t *testing.T) {
	srv := testserver.Start(t)
	c := dial(t, srv)
	ctx := context.Background()
	cut := &cutMidCreate{started: make(chan struct{})}
	exp := controller.NewExpectations(0)
	owner := func(o *kplanev1.Object) (string, bool) {
		name, ok := o.Meta().GetLabels()["owner"]
		return "default/" + name, ok
	}
	ctxs := make(chan *app.Context, 4)
	svc := app.Service{
		Name: "podctl", LeaderElected: true, Workers: 2,
		Watches: []app.Watch{{Kind: "Secret"}},
		Setup: func(ac *app.Context) (app.Reconciler, error) {
			cut.ResourcesClient = ac.Client
			oc := &controller.ObjectControl{API: cut, Expectations: exp, OwnerKey: owner}
			pods := ac.Informers.ForKind("Pod")
			pods.AddEventHandler(oc.Handler(func(o *kplanev1.Object) []string {
				k, ok := owner(o)
				if !ok {
					return nil
				}
				return []string{k}
			}, ac.Enqueue, nil))
			secrets := ac.Informers.ForKind("Secret")
			ctxs <- ac
			return app.ReconcileFunc(func(ctx context.Context, key string) error {
				ns, name := kplanev1.SplitKey(key)
				if _, ok := secrets.Store().GetByName(ns, name); !ok {
					exp.Delete(key)
					return nil
				}
				manage, err := oc.SatisfiedAt(ctx, key, pods)
				if err != nil || !manage {
					return err
				}
				for _, p := range pods.Store().List() {
					if k, ok := owner(p); ok && k == key {
						return nil
					}
				}
				_, err = oc.Create(ctx, key, 1, func() (*kplanev1.Object, error) {
					return kplanev1.Wrap(&kplanev1.Pod{
						Metadata: &kplanev1.ObjectMeta{GenerateName: name + "-", Namespace: ns, Labels: map[string]string{"owner": name}},
						Spec:     &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}},
					})
				})
				return err
			}), nil
		},
	}
	h := app.Host{Name: "testkcm", Services: []app.Service{svc, hosted("bctl", newRecorder(), ctxs)}}
	got, _, _ := startHost(t, h, 2, ctxs, append([]string{"--controllers=podctl,bctl", "--apiserver", srv.Addr(), "--health-addr", "", "--id", "kcm-1"}, fastElection...)...)
	eventually(t, 20*time.Second, "podctl to lead", func() bool { return got["podctl"].IsLeader() })

	if _, err := client.Secrets(c).Create(ctx, secret("s1")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cut.started:
	case <-time.After(30 * time.Second):
		t.Fatal("podctl did not try to create the pod")
	}

	// Another candidate takes podctl's lease while the create hangs: the
	// term ends and the create fails with an unknown outcome.
	l, err := client.Leases(c).Get(ctx, "kplane-system", "podctl")
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = "thief"
	l.Spec.LeaseDurationSeconds = 3600
	if _, err := client.Leases(c).Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "podctl to stop leading", func() bool { return !got["podctl"].IsLeader() })

	// The thief goes away; the hosted loop wins the lease back.
	if _, err := client.Leases(c).Delete(ctx, "kplane-system", "podctl", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "podctl to lead again", func() bool { return got["podctl"].IsLeader() })
	eventually(t, 30*time.Second, "podctl to create s1's pod in its new term", func() bool {
		pods, _, err := client.Pods(c).List(ctx, "default", client.ListOptions{LabelSelector: "owner=s1"})
		return err == nil && len(pods) == 1
	})
	if !got["bctl"].IsLeader() {
		t.Fatal("bctl stopped leading")
	}
}
