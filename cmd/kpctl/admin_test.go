package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestAdminEtcd: member list shows the single member as leader; a
// snapshot saved by kpctl restores into a new apiserver with every
// object's resourceVersion; bad usage is named before any connection.
func TestAdminEtcd(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := kpctl(ctx, srv.Addr(), "", "admin", "etcd", "member", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "kplane") || !strings.Contains(r.stdout, "*") {
		t.Fatalf("member list: %+v", r)
	}
	resp, err := srv.Client().Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(&kplanev1.Secret{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "kept"}})})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	r = kpctl(ctx, srv.Addr(), "", "admin", "etcd", "snapshot", "save", file)
	if r.code != 0 || !strings.Contains(r.stdout, "Snapshot saved to "+file) {
		t.Fatalf("snapshot save: %+v", r)
	}
	restored := testserver.Start(t, testserver.WithEtcdRestoreFrom(file))
	got, err := restored.Client().Get(ctx, &kplanev1.GetRequest{Kind: "Secret", Namespace: "default", Name: "kept"})
	if err != nil || got.GetObject().Meta().GetResourceVersion() != resp.GetObject().Meta().GetResourceVersion() {
		t.Fatalf("restored secret: %v %v, want resourceVersion %s", got, err, resp.GetObject().Meta().GetResourceVersion())
	}
	r = kpctl(ctx, srv.Addr(), "", "admin", "etcd", "member", "remove", "kplane")
	if r.code == 0 || !strings.Contains(r.stderr, "FailedPrecondition") {
		t.Fatalf("removing the only member: %+v", r)
	}
	for _, args := range [][]string{
		{"admin"}, {"admin", "etcd"}, {"admin", "etcd", "member"}, {"admin", "etcd", "member", "add", "x"}, {"admin", "etcd", "snapshot", "load", "f"},
	} {
		r := kpctl(ctx, unreachable, "", args...)
		if r.code == 0 || !strings.Contains(r.stderr, "admin") {
			t.Errorf("%v: %+v, want a usage error", args, r)
		}
	}
}
