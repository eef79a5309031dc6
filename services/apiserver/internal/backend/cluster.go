package backend

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Cluster states an embedded member starts in (etcd's own words).
const (
	// StateNew bootstraps a new cluster from InitialCluster.
	StateNew = "new"
	// StateExisting joins a cluster the member was added to first
	// (kpctl admin etcd member add).
	StateExisting = "existing"
)

// Cluster makes the embedded etcd one member of a multi-member etcd
// cluster (stacked etcd: each apiserver embeds one member). The zero
// Cluster is today's single member on free loopback ports.
type Cluster struct {
	// Name is this member's name (--etcd-name); it must appear in
	// InitialCluster.
	Name string
	// InitialCluster is every member as name=peerURL, comma-separated
	// (--etcd-initial-cluster); a name may repeat for several URLs.
	InitialCluster string
	// State is StateNew or StateExisting (--etcd-initial-cluster-state).
	State string
	// Token tells clusters apart on a shared network
	// (--etcd-initial-cluster-token).
	Token string
	// ListenPeerURLs are where the member accepts peers
	// (--etcd-listen-peer); default: AdvertisePeerURLs.
	ListenPeerURLs []string
	// AdvertisePeerURLs are how peers reach it (--etcd-advertise-peer);
	// default: its own entries in InitialCluster.
	AdvertisePeerURLs []string
	// ListenClientURLs serve etcd's client API to outside tools such as
	// etcdctl (--etcd-listen-client); the apiserver itself reaches its
	// member in process. Default: a free loopback port.
	ListenClientURLs []string
	// AdvertiseClientURLs are announced to the cluster
	// (--etcd-advertise-client); default: ListenClientURLs.
	AdvertiseClientURLs []string
}

// Enabled reports whether any cluster setting is given.
func (c Cluster) Enabled() bool {
	return c.Name != "" || c.InitialCluster != "" || c.State != "" || c.Token != "" ||
		len(c.ListenPeerURLs) > 0 || len(c.AdvertisePeerURLs) > 0 ||
		len(c.ListenClientURLs) > 0 || len(c.AdvertiseClientURLs) > 0
}

// member is one name=URL entry of an initial cluster.
type member struct {
	name string
	url  string
}

// parseInitialCluster splits "a=http://h1:2380,b=http://h2:2380".
func parseInitialCluster(s string) ([]member, error) {
	var out []member
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, u, ok := strings.Cut(part, "=")
		if !ok || name == "" || u == "" {
			return nil, fmt.Errorf("entry %d %q: want name=peerURL", i+1, part)
		}
		if err := checkURL(u); err != nil {
			return nil, fmt.Errorf("entry %d %q: %w", i+1, part, err)
		}
		out = append(out, member{name: name, url: u})
	}
	return out, nil
}

// checkURL accepts http(s)://host:port with nothing else.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL %q: scheme must be http or https", s)
	}
	if u.Port() == "" || u.Hostname() == "" {
		return fmt.Errorf("URL %q: want scheme://host:port", s)
	}
	if u.Path != "" && u.Path != "/" {
		return fmt.Errorf("URL %q: must not have a path", s)
	}
	return nil
}

func checkURLs(flag string, urls []string) error {
	for _, u := range urls {
		if err := checkURL(u); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	return nil
}

// Validate checks the settings together and fills the defaults (the
// flags' names are in the errors). With external endpoints no cluster
// setting is allowed: the external cluster is configured on its own.
func (c *Cluster) Validate(external bool) error {
	if !c.Enabled() {
		return nil
	}
	if external {
		return errors.New("--etcd-endpoints selects an external etcd cluster; the embedded member's --etcd-name, --etcd-initial-cluster*, --etcd-listen-* and --etcd-advertise-* flags do not apply to it")
	}
	if c.Name == "" {
		return errors.New("--etcd-name: required when the embedded etcd is a cluster member (--etcd-initial-cluster and friends are set)")
	}
	if c.InitialCluster == "" {
		return fmt.Errorf("--etcd-initial-cluster: required with --etcd-name %q (every member as name=peerURL, comma-separated)", c.Name)
	}
	members, err := parseInitialCluster(c.InitialCluster)
	if err != nil {
		return fmt.Errorf("--etcd-initial-cluster: %w", err)
	}
	var own []string
	for _, m := range members {
		if m.name == c.Name {
			own = append(own, m.url)
		}
	}
	if len(own) == 0 {
		return fmt.Errorf("--etcd-initial-cluster: has no entry for this member's --etcd-name %q", c.Name)
	}
	switch c.State {
	case "":
		c.State = StateNew
	case StateNew, StateExisting:
	default:
		return fmt.Errorf("--etcd-initial-cluster-state: %q is neither %q nor %q", c.State, StateNew, StateExisting)
	}
	if c.Token == "" {
		c.Token = "kplane"
	}
	if err := checkURLs("--etcd-advertise-peer", c.AdvertisePeerURLs); err != nil {
		return err
	}
	if err := checkURLs("--etcd-listen-peer", c.ListenPeerURLs); err != nil {
		return err
	}
	if err := checkURLs("--etcd-listen-client", c.ListenClientURLs); err != nil {
		return err
	}
	if err := checkURLs("--etcd-advertise-client", c.AdvertiseClientURLs); err != nil {
		return err
	}
	if len(c.AdvertisePeerURLs) == 0 {
		c.AdvertisePeerURLs = own
	} else if !sameSet(c.AdvertisePeerURLs, own) {
		return fmt.Errorf("--etcd-advertise-peer %s differs from this member's entries in --etcd-initial-cluster (%s): they must be the same URLs",
			strings.Join(c.AdvertisePeerURLs, ","), strings.Join(own, ","))
	}
	if len(c.ListenPeerURLs) == 0 {
		c.ListenPeerURLs = c.AdvertisePeerURLs
	}
	if len(c.AdvertiseClientURLs) > 0 && len(c.ListenClientURLs) == 0 {
		return errors.New("--etcd-advertise-client needs --etcd-listen-client (where those URLs are served)")
	}
	if len(c.AdvertiseClientURLs) == 0 {
		c.AdvertiseClientURLs = c.ListenClientURLs
	}
	return nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		if seen[s] == 0 {
			return false
		}
		seen[s]--
	}
	return true
}

func parseURLs(ss []string) ([]url.URL, error) {
	out := make([]url.URL, 0, len(ss))
	for _, s := range ss {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", s, err)
		}
		out = append(out, *u)
	}
	return out, nil
}
