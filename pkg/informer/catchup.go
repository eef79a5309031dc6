package informer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// catchUpPoll is how often CatchUp looks at an informer's revision.
const catchUpPoll = 5 * time.Millisecond

// CatchUp waits until each informer has applied the newest write among the
// objects a fresh List of its selection returns (a quorum read). A
// controller taking over from another leader calls it before acting: its
// standby cache may lag the writes the old leader made just before it let
// go, and acting on it could do those writes twice.
func CatchUp(ctx context.Context, api kplanev1.ResourcesClient, informers ...*Informer) error {
	for _, inf := range informers {
		sel := inf.Selection()
		var newest int64
		_, err := client.ListPages(ctx, api, &kplanev1.ListRequest{Kind: sel.Kind, Namespace: sel.Namespace,
			LabelSelector: sel.LabelSelector, FieldSelector: sel.FieldSelector, Limit: 5000}, func(items []*kplanev1.Object) error {
			for _, o := range items {
				rv, _ := strconv.ParseInt(o.Meta().GetResourceVersion(), 10, 64)
				newest = max(newest, rv)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("catch up: %w", err)
		}
		for {
			seen, _ := strconv.ParseInt(inf.LastSyncResourceVersion(), 10, 64)
			if seen >= newest {
				break
			}
			if err := client.Sleep(ctx, catchUpPoll); err != nil {
				return fmt.Errorf("catch up: %s informer at revision %d, apiserver at %d: %w", sel, seen, newest, err)
			}
		}
	}
	return nil
}
