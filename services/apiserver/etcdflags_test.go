package main

import (
	"reflect"
	"strings"
	"testing"
)

// TestEtcdClusterFlagsRejectBadCombinations: the stacked-etcd flags are
// checked together before anything starts, each error naming its flag.
func TestEtcdClusterFlagsRejectBadCombinations(t *testing.T) {
	ic := "a=http://127.0.0.1:2380,b=http://127.0.0.1:2381,c=http://127.0.0.1:2382"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--etcd-initial-cluster", ic}, "--etcd-name: required"},
		{[]string{"--etcd-name", "a"}, "--etcd-initial-cluster: required"},
		{[]string{"--etcd-name", "d", "--etcd-initial-cluster", ic}, `has no entry for this member's --etcd-name "d"`},
		{[]string{"--etcd-name", "a", "--etcd-initial-cluster", "a=127.0.0.1:2380"}, "not a URL"},
		{[]string{"--etcd-name", "a", "--etcd-initial-cluster", "a=unix://h:1"}, "scheme must be http or https"},
		{[]string{"--etcd-name", "a", "--etcd-initial-cluster", "a"}, "want name=peerURL"},
		{[]string{"--etcd-name", "a", "--etcd-initial-cluster", "a=http://h"}, "want scheme://host:port"},
		{[]string{"--etcd-name", "a", "--etcd-initial-cluster", ic, "--etcd-initial-cluster-state", "joining"}, `--etcd-initial-cluster-state: "joining" is neither`},
		{[]string{"--etcd-name", "a", "--etcd-initial-cluster", ic, "--etcd-advertise-peer", "http://127.0.0.1:9999"}, "--etcd-advertise-peer http://127.0.0.1:9999 differs"},
		{[]string{"--etcd-name", "a", "--etcd-initial-cluster", ic, "--etcd-listen-peer", "ftp://x:1"}, "--etcd-listen-peer"},
		{[]string{"--etcd-name", "a", "--etcd-initial-cluster", ic, "--etcd-advertise-client", "http://127.0.0.1:2379"}, "--etcd-advertise-client needs --etcd-listen-client"},
		{[]string{"--etcd-name", "a", "--etcd-initial-cluster", ic, "--etcd-endpoints", "http://127.0.0.1:2379"}, "--etcd-endpoints selects an external etcd cluster"},
		{[]string{"--etcd-restore-from", "snap.db", "--etcd-endpoints", "http://127.0.0.1:2379"}, "--etcd-restore-from restores the embedded etcd"},
	} {
		_, err := parseFlags(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// TestEtcdClusterFlagsDefaults: peer URLs default from the member's own
// entries in --etcd-initial-cluster, the state to new; no flag at all is
// a single member.
func TestEtcdClusterFlagsDefaults(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.EtcdCluster.Enabled() {
		t.Fatalf("no flags: cluster %+v, want none", cfg.EtcdCluster)
	}
	cfg, err = parseFlags([]string{"--etcd-name", "b", "--etcd-initial-cluster", "a=http://10.0.0.1:2380,b=http://10.0.0.2:2380",
		"--etcd-listen-peer", "http://0.0.0.0:2380"})
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.EtcdCluster
	if c.State != "new" || c.Token != "kplane" || !reflect.DeepEqual(c.AdvertisePeerURLs, []string{"http://10.0.0.2:2380"}) ||
		!reflect.DeepEqual(c.ListenPeerURLs, []string{"http://0.0.0.0:2380"}) {
		t.Fatalf("cluster %+v", c)
	}
}
