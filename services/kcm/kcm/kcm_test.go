package kcm_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
	"github.com/kplane/kplane/services/kcm/kcm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServicesAreTheControllers(t *testing.T) {
	want := "tokenctl,replicactl,nodectl,ipamctl,gcctl,endpointsctl,jobctl,cronjobctl,pvctl,deploymentctl,statefulsetctl,daemonsetctl,disruptionctl"
	if got := strings.Join(kcm.Names(), ","); got != want {
		t.Fatalf("kcm hosts %s, want %s", got, want)
	}
	for _, s := range kcm.Services() {
		if !s.LeaderElected {
			t.Errorf("%s is not leader elected: it would run in every kcm replica", s.Name)
		}
	}
	sel, err := app.SelectControllers("*,-jobctl", kcm.Names())
	if err != nil || len(sel) != len(kcm.Names())-1 {
		t.Fatalf("*,-jobctl: %v %v", sel, err)
	}
}

// TestDeploymentThroughOneProcess: deploymentctl and replicactl in one
// kcm turn a Deployment into pods, through one shared Pod informer.
func TestDeploymentThroughOneProcess(t *testing.T) {
	srv := testserver.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	health := ln.Addr().String()
	_ = ln.Close() // the host binds it again at once
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.RunHost(ctx, kcm.NewHost(), []string{"--controllers=deploymentctl,replicactl", "--apiserver", srv.Addr(),
			"--health-addr", health, "--log-level", "warn", "--leader-elect-lease-duration", "2s"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("kcm: %v", err)
		}
	}()
	c, err := client.Dial(ctx, client.Options{Address: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	l := map[string]string{"app": "web"}
	d := &kplanev1.Deployment{
		Metadata: &kplanev1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: &kplanev1.DeploymentSpec{Replicas: proto.Int32(3), Selector: &kplanev1.LabelSelector{MatchLabels: l},
			Template: &kplanev1.PodTemplateSpec{Metadata: &kplanev1.ObjectMeta{Labels: l},
				Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
	if _, err := client.Deployments(c).Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "3 pods of the Deployment", func() bool {
		pods, _, err := client.Pods(c).List(ctx, "default", client.ListOptions{})
		return err == nil && len(pods) == 3
	})
	for _, n := range []string{"deploymentctl", "replicactl"} {
		l, err := client.Leases(c).Get(ctx, "kplane-system", n)
		if err != nil || l.GetSpec().GetHolderIdentity() == "" {
			t.Errorf("lease %s: %v %v", n, l, err)
		}
	}
	// One Pod informer for both loops: it saw each pod added once.
	testutil.Eventually(t, 10*time.Second, "the Pod informer's added events", func() bool {
		return metric(t, "http://"+health+"/metrics", `kplane_informer_events_total{kind="Pod",type="added"}`) == 3
	})
}

func metric(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
