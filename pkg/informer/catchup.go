package informer

import (
	"context"
	"fmt"
	"time"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// catchUpPoll is how often CatchUp looks at an informer's revision.
const catchUpPoll = 5 * time.Millisecond

// CatchUp waits until each informer has applied the newest write among the
// objects a fresh List of its selection returns (a quorum read: the
// apiserver lists from etcd, not from a cache). A controller taking over
// from another leader waits for it before acting (pkg/app does so at the
// start of every leadership term): its standby cache may lag the writes
// the old leader made just before it let go, and acting on it could do
// those writes twice.
func CatchUp(ctx context.Context, api kplanev1.ResourcesClient, informers ...*Informer) error {
	for _, inf := range informers {
		if err := catchUp(ctx, api, inf); err != nil {
			return err
		}
	}
	return nil
}

func catchUp(ctx context.Context, api kplanev1.ResourcesClient, inf *Informer) error {
	sel := inf.Selection()
	var newest int64
	_, err := client.ListPages(ctx, api, &kplanev1.ListRequest{Kind: sel.Kind, Namespace: sel.Namespace,
		LabelSelector: sel.LabelSelector, FieldSelector: sel.FieldSelector, Limit: 5000}, func(items []*kplanev1.Object) error {
		for _, o := range items {
			rv, err := apiutil.ParseResourceVersion(o.Meta().GetResourceVersion())
			if err != nil {
				return fmt.Errorf("%s %s: %w", sel.Kind, o.Key(), err)
			}
			newest = max(newest, rv)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("catch up %s: %w", sel, err)
	}
	for {
		seen, err := apiutil.ParseResourceVersion(inf.LastSyncResourceVersion())
		if err != nil {
			return fmt.Errorf("catch up %s: informer: %w", sel, err)
		}
		if seen >= newest {
			return nil
		}
		if err := client.Sleep(ctx, catchUpPoll); err != nil {
			return fmt.Errorf("catch up: %s informer at revision %d, apiserver at %d: %w", sel, seen, newest, err)
		}
	}
}
