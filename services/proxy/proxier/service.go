// Package proxier is kplane's kube-proxy: for every Service port with a
// cluster IP it listens on clusterIP:port (TCP or UDP) (and, for type NodePort or
// LoadBalancer, on the node's nodePort) and forwards each new TCP
// connection to one of the port's ready endpoints, from the Endpoints
// object of the same name. Round robin per connection, or sticky per
// client IP with sessionAffinity ClientIP (10800 s idle timeout, as in
// Kubernetes). It follows Endpoints changes live without touching
// established connections, resets new connections while a port has no
// ready endpoint, and closes a port's listeners when the port or its
// Service goes away.
//
// The forwarding is in user space (FROM-scratch images have no iptables)
// but costs no per-byte work: io.Copy between two *net.TCPConn is
// splice(2) on Linux. The default service range of the apiserver lies in
// 127.0.0.0/8, so the proxy binds cluster IPs on the loopback of its
// network namespace without privileges, and every process in that
// namespace (the node's pods) reaches them.
//
// UDP ports are relayed per client address: a session (a connected
// socket to the endpoint the balancer picked) that ends after
// UDPSessionTimeout without traffic. SCTP ports are skipped (logged).
//
// One proxy runs per node and every replica is active: it is not leader
// elected.
package proxier

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/informer"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Name is the binary's name.
const Name = "proxy"

// DefaultDialTimeout bounds a dial to one endpoint.
const DefaultDialTimeout = 5 * time.Second

// config holds the proxy's own flags.
type config struct {
	nodeIP      netip.Addr
	dialTimeout time.Duration
	// nodeIPCheck is how often the proxy checks that nodeIP is still an
	// address of its network namespace (0: never).
	nodeIPCheck time.Duration
}

func (c *config) addFlags(fs *flag.FlagSet) {
	c.dialTimeout = DefaultDialTimeout
	fs.Func("node-ip", "address to accept nodePort connections on (default: every address of the node)", func(s string) error {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("not an IP address: %q", s)
		}
		c.nodeIP = ip.Unmap()
		return nil
	})
	fs.Func("dial-timeout", fmt.Sprintf("how long a dial to one endpoint may take before the next is tried (default %v)", DefaultDialTimeout), func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("not a duration: %q", s)
		}
		if d <= 0 {
			return fmt.Errorf("must be positive, not %v", d)
		}
		c.dialTimeout = d
		return nil
	})
	fs.Func("node-ip-check-interval", "how often to check that --node-ip is still an address of this network namespace; once it is gone the proxy exits, "+
		"so that its supervisor restarts it in the node's new namespace (for a proxy that shares the network namespace of a node container, which a restart replaces; default 0: never)", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("not a duration: %q", s)
		}
		if d < 0 {
			return fmt.Errorf("must not be negative, not %v", d)
		}
		c.nodeIPCheck = d
		return nil
	})
}

// validate checks the flags together.
func (c *config) validate() error {
	if c.nodeIPCheck > 0 && !c.nodeIP.IsValid() {
		return fmt.Errorf("--node-ip-check-interval needs --node-ip: the address to check for")
	}
	return nil
}

// proxy is the service: informers feed Reconcile with Service keys
// (an Endpoints object has its Service's key), Reconcile plans the ports
// and hands them to the Proxier.
type proxy struct {
	cfg       config
	c         *app.Context
	services  *informer.Informer
	endpoints *informer.Informer
	proxier   *Proxier
}

// NewService returns the proxy's app.Service.
func NewService() app.Service {
	svc, _ := newService()
	return svc
}

// newService also returns the proxy, whose proxier tests inspect.
func newService() (app.Service, *proxy) {
	p := &proxy{}
	return app.Service{
		Name: Name,
		// kube-proxy's health port.
		HealthAddr:    ":10256",
		LeaderElected: false,
		Workers:       4,
		// Endpoints share their Service's name, so both map to one key.
		Watches:    []app.Watch{{Kind: "Service"}, {Kind: "Endpoints"}},
		AddFlags:   p.cfg.addFlags,
		CheckFlags: p.cfg.validate,
		Setup:      p.setup,
		Run:        p.run,
	}, p
}

func (p *proxy) setup(c *app.Context) (app.Reconciler, error) {
	p.c = c
	p.services = c.Informers.ForKind("Service")
	p.endpoints = c.Informers.ForKind("Endpoints")
	var err error
	if p.proxier, err = NewProxier(c.Logger, c.Registry, p.cfg.dialTimeout); err != nil {
		return nil, err
	}
	return p, nil
}

// run holds the listeners open for the life of the process and closes
// them, with every forwarded connection, when it ends, or when the node's
// address left the network namespace (see watchNodeIP).
func (p *proxy) run(ctx context.Context, _ *app.Context) error {
	defer p.proxier.Close()
	if p.cfg.nodeIPCheck > 0 {
		return watchNodeIP(ctx, p.c.Logger, p.cfg.nodeIP, p.cfg.nodeIPCheck, net.InterfaceAddrs)
	}
	<-ctx.Done()
	return nil
}

// Reconcile brings the Service key's listeners and endpoints up to date.
func (p *proxy) Reconcile(_ context.Context, key string) error {
	var svc *kplanev1.Service
	if o, ok := p.services.Store().Get(key); ok {
		svc = o.GetService()
	}
	var ep *kplanev1.Endpoints
	if o, ok := p.endpoints.Store().Get(key); ok {
		ep = o.GetEndpoints()
	}
	var plans []PortPlan
	if svc != nil {
		var ignored []string
		plans, ignored = Plan(svc, ep, p.cfg.nodeIP)
		for _, why := range ignored {
			p.c.Logger.Debug("service port not proxied", "port", why)
		}
	}
	if err := p.proxier.Sync(key, plans); err != nil {
		return fmt.Errorf("sync %s: %w", key, err)
	}
	return nil
}
