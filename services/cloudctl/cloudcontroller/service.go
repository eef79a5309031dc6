// Package cloudcontroller is cloudctl: the cloud controller manager's
// node, route and service loops against cloudsim's API. Each loop is an
// app.Loop elected on a Lease of its own (kplane-system/cloudctl-node,
// cloudctl-route, cloudctl-service), so one process may run all three, or
// three processes one each (--controllers).
package cloudcontroller

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/pkg/leaderelection"
	"github.com/kplane/kplane/pkg/record"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
)

// Names of the loops, as --controllers takes them.
const (
	LoopNode    = "node"
	LoopRoute   = "route"
	LoopService = "service"
)

// AllLoops are every loop, in the order they start.
var AllLoops = []string{LoopNode, LoopRoute, LoopService}

// LeaseName is the Lease (and queue) name of a loop.
func LeaseName(loop string) string { return "cloudctl-" + loop }

type config struct {
	cloudAddr     string
	controllers   string
	loops         []string
	clusterName   string
	nodePeriod    time.Duration
	routePeriod   time.Duration
	servicePeriod time.Duration
	leader        leaderelection.Options
	fs            *flag.FlagSet
}

func (c *config) addFlags(fs *flag.FlagSet) {
	c.fs = fs
	fs.StringVar(&c.cloudAddr, "cloud", "127.0.0.1:7070", "address of cloudsim's gRPC API")
	fs.StringVar(&c.controllers, "controllers", strings.Join(AllLoops, ","), "loops this process runs, comma-separated: node, route, service (each elected on its own Lease kplane-system/cloudctl-<loop>)")
	fs.StringVar(&c.clusterName, "cluster-name", "kplane", "prefix of the names of the routes this cluster owns in the cloud")
	fs.DurationVar(&c.nodePeriod, "node-monitor-period", 5*time.Second, "how often every Node is checked against its instance (terminated: the Node is deleted; shut down: tainted)")
	fs.DurationVar(&c.routePeriod, "route-reconcile-period", 10*time.Second, "how often the cloud's routes are compared with the Nodes' pod CIDRs")
	fs.DurationVar(&c.servicePeriod, "load-balancer-reconcile-period", 30*time.Second, "how often every LoadBalancer Service's load balancer is compared with the cloud's")
	c.leader.AddFlags(fs)
}

func (c *config) check() error {
	c.loops = nil
	for _, l := range strings.Split(c.controllers, ",") {
		l = strings.TrimSpace(l)
		if l == "*" {
			c.loops = append([]string(nil), AllLoops...)
			continue
		}
		if !slices.Contains(AllLoops, l) {
			return fmt.Errorf("--controllers: %q is not one of %s", l, strings.Join(AllLoops, ", "))
		}
		if !slices.Contains(c.loops, l) {
			c.loops = append(c.loops, l)
		}
	}
	if len(c.loops) == 0 {
		return errors.New("--controllers: at least one loop is required")
	}
	if c.cloudAddr == "" {
		return errors.New("--cloud is required")
	}
	if c.clusterName == "" || strings.ContainsAny(c.clusterName, " /") {
		return fmt.Errorf("--cluster-name %q: want a non-empty name without spaces or slashes", c.clusterName)
	}
	if c.nodePeriod <= 0 || c.routePeriod <= 0 || c.servicePeriod <= 0 {
		return errors.New("--node-monitor-period, --route-reconcile-period and --load-balancer-reconcile-period must be positive")
	}
	if c.leader.LeaderElect {
		if err := c.leader.Complete(c.fs); err != nil {
			return err
		}
	}
	return nil
}

type manager struct {
	cfg   config
	conn  *grpc.ClientConn
	cloud cloudsimv1.CloudClient
	loops []app.Loop
}

// NewService returns cloudctl: the binary's main runs it with app.Main.
func NewService() app.Service {
	m := &manager{}
	return app.Service{
		Name:       "cloudctl",
		HealthAddr: ":10258",
		AddFlags:   m.cfg.addFlags,
		CheckFlags: m.cfg.check,
		Setup:      m.setup,
		Run:        m.run,
	}
}

func (m *manager) setup(ac *app.Context) (app.Reconciler, error) {
	conn, err := grpc.NewClient(m.cfg.cloudAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("--cloud %s: %w", m.cfg.cloudAddr, err)
	}
	m.conn, m.cloud = conn, cloudsimv1.NewCloudClient(conn)
	rec := record.New(ac.Client, "cloudctl", ac.Identity, ac.Logger)
	for _, l := range m.cfg.loops {
		switch l {
		case LoopNode:
			m.loops = append(m.loops, newNodeLoop(ac, m.cloud, rec, m.cfg.nodePeriod))
		case LoopRoute:
			m.loops = append(m.loops, newRouteLoop(ac, m.cloud, m.cfg.clusterName, m.cfg.routePeriod))
		case LoopService:
			m.loops = append(m.loops, newServiceLoop(ac, m.cloud, rec, m.cfg.servicePeriod))
		}
	}
	ac.Logger.Info("cloud controller loops", "loops", strings.Join(m.cfg.loops, ","), "cloud", m.cfg.cloudAddr, "leader_elect", m.cfg.leader.LeaderElect)
	return nil, nil
}

// run runs every selected loop until ctx ends; one that fails stops the
// process (its supervisor restarts it).
func (m *manager) run(ctx context.Context, ac *app.Context) error {
	defer func() { _ = m.conn.Close() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(m.loops))
	for i, l := range m.loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = ac.RunLoop(ctx, l, m.cfg.leader); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
