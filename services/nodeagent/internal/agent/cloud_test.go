package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/apiutil"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TestCloudProviderExternal: the Node registers with the uninitialized
// taint and NetworkUnavailable (NoRouteCreated), and addresses the cloud
// controller writes survive the agent's status updates.
func TestCloudProviderExternal(t *testing.T) {
	e := newEnv(t)
	e.startAgent("--runtime", "fake", "--cloud-provider", "external")
	nodes := client.For[*kplanev1.Node](e.api)
	testutil.Eventually(t, 30*time.Second, "node-a registered tainted, NetworkUnavailable True", func() bool {
		n, err := nodes.Get(e.ctx, "", "node-a")
		if err != nil {
			return false
		}
		c := apiutil.FindCondition(n.GetStatus().GetConditions(), kplanev1.NodeNetworkUnavailable)
		return slices.ContainsFunc(n.GetSpec().GetTaints(), func(t *kplanev1.Taint) bool {
			return t.Key == kplanev1.TaintNodeUninitialized && t.Effect == kplanev1.TaintEffectNoSchedule
		}) && c.GetStatus() == kplanev1.ConditionTrue && c.GetReason() == "NoRouteCreated"
	})
	// The cloud controller's addresses, written as cloudctl does.
	cloud := []*kplanev1.NodeAddress{{Type: kplanev1.NodeInternalIP, Address: "127.9.9.9"}, {Type: kplanev1.NodeHostName, Address: "node-a"}}
	for {
		n, err := nodes.Get(e.ctx, "", "node-a")
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = cloud
		if _, err = nodes.UpdateStatus(e.ctx, n); err == nil {
			break
		} else if !client.IsConflict(err) {
			t.Fatal(err)
		}
	}
	// Several heartbeats later (100ms each, a full status write every few)
	// the addresses are still the cloud's.
	start, _ := nodes.Get(e.ctx, "", "node-a")
	testutil.Eventually(t, 30*time.Second, "the agent writes its status again", func() bool {
		n, err := nodes.Get(e.ctx, "", "node-a")
		return err == nil && n.GetMetadata().GetResourceVersion() != start.GetMetadata().GetResourceVersion()
	})
	n, _ := nodes.Get(e.ctx, "", "node-a")
	if a := n.GetStatus().GetAddresses(); len(a) != 2 || a[0].Address != "127.9.9.9" {
		t.Fatalf("addresses %v, want the cloud's kept", a)
	}
}

func TestCloudFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cloud-provider", "aws"}, "--cloud-provider"},
		{[]string{"--runtime", "fake", "--fake-nodes", "2", "--cloud-routes-from", "127.0.0.1:1"}, "--cloud-routes-from"},
		{[]string{"--cloud-routes-from", "127.0.0.1:1", "--cloud-routes-interval", "0s"}, "--cloud-routes-from"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := runService(ctx, append([]string{"--apiserver", "127.0.0.1:1", "--health-addr", "", "--root-dir", t.TempDir()}, tc.args...))
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
