// Package sim is cloudsim's cloud: instances, routes and load balancers
// behind the kplane.cloudsim.v1.Cloud gRPC API, persisted after every
// change in one state file (replaced atomically), so a restarted sim has
// the same instances, routes and load balancers, listening on the same
// external addresses.
package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/atomicfile"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	"github.com/kplane/kplane/services/cloudsim/balancer"
)

// ProviderPrefix starts every instance's provider ID.
const ProviderPrefix = cloudsimv1.ProviderPrefix

// Address types of instances, as in a Node's status.addresses.
const (
	AddressInternalIP = "InternalIP"
	AddressExternalIP = "ExternalIP"
	AddressHostname   = "Hostname"
)

// Config is the sim's setup.
type Config struct {
	// StateFile holds the state; created on the first change.
	StateFile string
	// LBIPRange, when valid, gives every load balancer an address of its
	// own from this range, listening on the service's ports (the local
	// shape: a loopback range).
	LBIPRange netip.Prefix
	// Otherwise load balancers share LBAdvertiseIP, each listener with a
	// port of its own from LBPortMin..LBPortMax, listened on at
	// LBListenIP (compose: 0.0.0.0 in the container, whose published port
	// range makes 127.0.0.1 of the Docker host the advertised address).
	LBListenIP, LBAdvertiseIP netip.Addr
	LBPortMin, LBPortMax      int
	// Balancer tunes the health checks.
	Balancer balancer.Options
	Logger   hclog.Logger
}

// Validate checks that exactly one way of giving addresses is set.
func (c Config) Validate() error {
	if c.StateFile == "" {
		return errors.New("the state file is required")
	}
	if c.LBIPRange.IsValid() {
		if c.LBAdvertiseIP.IsValid() || c.LBPortMin != 0 {
			return errors.New("give either an LB IP range or an advertised address with a port range, not both")
		}
		return nil
	}
	if !c.LBAdvertiseIP.IsValid() || !c.LBListenIP.IsValid() {
		return errors.New("without an LB IP range, a listen address and an advertised address are required")
	}
	if c.LBPortMin < 1 || c.LBPortMax > 65535 || c.LBPortMin > c.LBPortMax {
		return fmt.Errorf("LB port range %d-%d: want 1 <= min <= max <= 65535", c.LBPortMin, c.LBPortMax)
	}
	return nil
}

// Cloud implements the Cloud service.
type Cloud struct {
	cloudsimv1.UnimplementedCloudServer
	cfg Config
	log hclog.Logger

	mu    sync.Mutex
	state *cloudsimv1.State
	lbs   map[string]*balancer.Balancer
}

// New loads the state file (when it exists) and opens every persisted
// load balancer on its recorded address.
func New(cfg Config) (*Cloud, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	c := &Cloud{cfg: cfg, log: cfg.Logger, state: &cloudsimv1.State{}, lbs: map[string]*balancer.Balancer{}}
	b, err := os.ReadFile(cfg.StateFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read state: %w", err)
	default:
		if err := protojson.Unmarshal(b, c.state); err != nil {
			return nil, fmt.Errorf("state file %s: %w", cfg.StateFile, err)
		}
	}
	for _, lb := range c.state.LoadBalancers {
		if err := c.openLocked(lb); err != nil {
			c.Close()
			return nil, fmt.Errorf("reopen load balancer %s: %w", lb.Name, err)
		}
	}
	c.log.Info("state loaded", "file", cfg.StateFile, "instances", len(c.state.Instances),
		"routes", len(c.state.Routes), "load_balancers", len(c.state.LoadBalancers))
	return c, nil
}

// Close stops every load balancer.
func (c *Cloud) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, b := range c.lbs {
		b.Close()
		delete(c.lbs, name)
	}
}

// saveLocked persists the state; a change the file does not hold is not
// made (callers apply changes to a clone and keep it only on success).
func (c *Cloud) saveLocked(next *cloudsimv1.State) error {
	b, err := protojson.MarshalOptions{Multiline: true}.Marshal(next)
	if err != nil {
		return status.Errorf(codes.Internal, "encode state: %v", err)
	}
	if err := atomicfile.WriteFile(c.cfg.StateFile, b, 0o600); err != nil {
		return status.Errorf(codes.Unavailable, "save state: %v", err)
	}
	c.state = next
	return nil
}

func (c *Cloud) clone() *cloudsimv1.State { return proto.Clone(c.state).(*cloudsimv1.State) }

func newID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", status.Errorf(codes.Internal, "instance id: %v", err)
	}
	return "i-" + hex.EncodeToString(b), nil
}

func invalid(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// validName accepts DNS-1123 labels and subdomains, like a Node's name.
func validName(field, s string) error {
	if s == "" {
		return invalid(field, "required")
	}
	if len(s) > 253 {
		return invalid(field, "%q is longer than 253 characters", s)
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || (r == '-' || r == '.') && i > 0 && i < len(s)-1
		if !ok {
			return invalid(field, "%q must be lower-case letters, digits, '-' and '.', starting and ending with a letter or digit", s)
		}
	}
	return nil
}

// CreateInstance starts a new running instance.
func (c *Cloud) CreateInstance(_ context.Context, req *cloudsimv1.CreateInstanceRequest) (*cloudsimv1.CreateInstanceResponse, error) {
	if err := validName("name", req.GetName()); err != nil {
		return nil, err
	}
	for i, a := range req.GetAddresses() {
		f := fmt.Sprintf("addresses[%d]", i)
		switch a.GetType() {
		case AddressInternalIP, AddressExternalIP:
			if _, err := netip.ParseAddr(a.GetAddress()); err != nil {
				return nil, invalid(f+".address", "%q is not an IP address", a.GetAddress())
			}
		case AddressHostname:
			if a.GetAddress() == "" {
				return nil, invalid(f+".address", "required")
			}
		default:
			return nil, invalid(f+".type", "%q is not one of InternalIP, ExternalIP, Hostname", a.GetType())
		}
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, in := range c.state.Instances {
		if in.Name == req.Name && in.State != cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED {
			return nil, status.Errorf(codes.AlreadyExists, "instance %q exists (%s, %s)", in.Name, in.Id, in.State)
		}
	}
	in := &cloudsimv1.Instance{Id: id, Name: req.Name, ProviderId: ProviderPrefix + id, Addresses: req.Addresses,
		Zone: req.Zone, Region: req.Region, InstanceType: req.InstanceType, State: cloudsimv1.InstanceState_INSTANCE_STATE_RUNNING}
	next := c.clone()
	next.Instances = append(next.Instances, in)
	if err := c.saveLocked(next); err != nil {
		return nil, err
	}
	c.log.Info("instance created", "id", id, "name", in.Name, "zone", in.Zone)
	return &cloudsimv1.CreateInstanceResponse{Instance: proto.Clone(in).(*cloudsimv1.Instance)}, nil
}

// findLocked returns the index of the instance req names, or an error.
func (c *Cloud) findLocked(id, name, providerID string) (int, error) {
	given := 0
	for _, s := range []string{id, name, providerID} {
		if s != "" {
			given++
		}
	}
	if given != 1 {
		return -1, invalid("id", "give exactly one of id, name and providerID")
	}
	if providerID != "" {
		var ok bool
		if id, ok = strings.CutPrefix(providerID, ProviderPrefix); !ok || id == "" {
			return -1, invalid("providerID", "%q does not start with %s", providerID, ProviderPrefix)
		}
	}
	found := -1
	for i, in := range c.state.Instances {
		switch {
		case id != "" && in.Id == id:
			return i, nil
		case name != "" && in.Name == name:
			// The newest instance of a name wins, a live one over a terminated one.
			if found < 0 || in.State != cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED ||
				c.state.Instances[found].State == cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED {
				found = i
			}
		}
	}
	if found < 0 {
		return -1, status.Errorf(codes.NotFound, "instance %s%s not found", id, name)
	}
	return found, nil
}

// GetInstance finds one instance.
func (c *Cloud) GetInstance(_ context.Context, req *cloudsimv1.GetInstanceRequest) (*cloudsimv1.GetInstanceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, err := c.findLocked(req.GetId(), req.GetName(), req.GetProviderId())
	if err != nil {
		return nil, err
	}
	return &cloudsimv1.GetInstanceResponse{Instance: proto.Clone(c.state.Instances[i]).(*cloudsimv1.Instance)}, nil
}

// ListInstances lists every instance.
func (c *Cloud) ListInstances(context.Context, *cloudsimv1.ListInstancesRequest) (*cloudsimv1.ListInstancesResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &cloudsimv1.ListInstancesResponse{Instances: c.clone().Instances}, nil
}

// SetInstanceState changes an instance's state; a terminated instance
// stays terminated.
func (c *Cloud) SetInstanceState(_ context.Context, req *cloudsimv1.SetInstanceStateRequest) (*cloudsimv1.SetInstanceStateResponse, error) {
	if req.GetId() == "" {
		return nil, invalid("id", "required")
	}
	switch req.GetState() {
	case cloudsimv1.InstanceState_INSTANCE_STATE_RUNNING, cloudsimv1.InstanceState_INSTANCE_STATE_SHUTDOWN, cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED:
	default:
		return nil, invalid("state", "%s is not RUNNING, SHUTDOWN or TERMINATED", req.GetState())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i, err := c.findLocked(req.Id, "", "")
	if err != nil {
		return nil, err
	}
	cur := c.state.Instances[i]
	if cur.State == req.State {
		return &cloudsimv1.SetInstanceStateResponse{Instance: proto.Clone(cur).(*cloudsimv1.Instance)}, nil
	}
	if cur.State == cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED {
		return nil, status.Errorf(codes.FailedPrecondition, "instance %s is terminated", cur.Id)
	}
	next := c.clone()
	next.Instances[i].State = req.State
	if err := c.saveLocked(next); err != nil {
		return nil, err
	}
	c.log.Info("instance state changed", "id", cur.Id, "name", cur.Name, "state", req.State)
	return &cloudsimv1.SetInstanceStateResponse{Instance: proto.Clone(next.Instances[i]).(*cloudsimv1.Instance)}, nil
}

// CreateRoute adds a route to a live instance.
func (c *Cloud) CreateRoute(_ context.Context, req *cloudsimv1.CreateRouteRequest) (*cloudsimv1.CreateRouteResponse, error) {
	r := req.GetRoute()
	if err := validName("route.name", r.GetName()); err != nil {
		return nil, err
	}
	dst, err := netip.ParsePrefix(r.GetDestinationCidr())
	if err != nil || dst.Masked() != dst {
		return nil, invalid("route.destinationCIDR", "%q is not a CIDR with zero host bits", r.GetDestinationCidr())
	}
	if r.GetTargetInstanceId() == "" {
		return nil, invalid("route.targetInstanceID", "required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i, err := c.findLocked(r.TargetInstanceId, "", "")
	if err != nil {
		return nil, err
	}
	if c.state.Instances[i].State == cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED {
		return nil, status.Errorf(codes.FailedPrecondition, "route.targetInstanceID: instance %s is terminated", r.TargetInstanceId)
	}
	for _, o := range c.state.Routes {
		if o.Name == r.Name {
			return nil, status.Errorf(codes.AlreadyExists, "route %q exists", r.Name)
		}
		if netip.MustParsePrefix(o.DestinationCidr).Overlaps(dst) {
			return nil, status.Errorf(codes.AlreadyExists, "route.destinationCIDR: %s overlaps route %q (%s)", dst, o.Name, o.DestinationCidr)
		}
	}
	route := &cloudsimv1.Route{Name: r.Name, DestinationCidr: dst.String(), TargetInstanceId: r.TargetInstanceId}
	next := c.clone()
	next.Routes = append(next.Routes, route)
	slices.SortFunc(next.Routes, func(a, b *cloudsimv1.Route) int { return strings.Compare(a.Name, b.Name) })
	if err := c.saveLocked(next); err != nil {
		return nil, err
	}
	c.log.Info("route created", "name", r.Name, "destination", dst.String(), "target", r.TargetInstanceId)
	return &cloudsimv1.CreateRouteResponse{Route: proto.Clone(route).(*cloudsimv1.Route)}, nil
}

// DeleteRoute removes a route.
func (c *Cloud) DeleteRoute(_ context.Context, req *cloudsimv1.DeleteRouteRequest) (*cloudsimv1.DeleteRouteResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("name", "required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.IndexFunc(c.state.Routes, func(r *cloudsimv1.Route) bool { return r.Name == req.Name })
	if i < 0 {
		return nil, status.Errorf(codes.NotFound, "route %q not found", req.Name)
	}
	next := c.clone()
	next.Routes = slices.Delete(next.Routes, i, i+1)
	if err := c.saveLocked(next); err != nil {
		return nil, err
	}
	c.log.Info("route deleted", "name", req.Name)
	return &cloudsimv1.DeleteRouteResponse{}, nil
}

// ListRoutes lists every route.
func (c *Cloud) ListRoutes(context.Context, *cloudsimv1.ListRoutesRequest) (*cloudsimv1.ListRoutesResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &cloudsimv1.ListRoutesResponse{Routes: c.clone().Routes}, nil
}

// EnsureLoadBalancer creates or updates a load balancer.
func (c *Cloud) EnsureLoadBalancer(_ context.Context, req *cloudsimv1.EnsureLoadBalancerRequest) (*cloudsimv1.EnsureLoadBalancerResponse, error) {
	if err := validName("name", req.GetName()); err != nil {
		return nil, err
	}
	if len(req.GetListeners()) == 0 {
		return nil, invalid("listeners", "at least one is required")
	}
	seen := map[int32]bool{}
	for i, l := range req.GetListeners() {
		f := fmt.Sprintf("listeners[%d]", i)
		if l.Protocol != "" && l.Protocol != "TCP" {
			return nil, invalid(f+".protocol", "%q is not supported (TCP only)", l.Protocol)
		}
		if l.Port < 1 || l.Port > 65535 {
			return nil, invalid(f+".port", "%d is not in 1-65535", l.Port)
		}
		if l.BackendPort < 1 || l.BackendPort > 65535 {
			return nil, invalid(f+".backendPort", "%d is not in 1-65535", l.BackendPort)
		}
		if seen[l.Port] {
			return nil, invalid(f+".port", "%d is given twice", l.Port)
		}
		seen[l.Port] = true
	}
	names := map[string]bool{}
	for i, b := range req.GetBackends() {
		f := fmt.Sprintf("backends[%d]", i)
		if b.Name == "" {
			return nil, invalid(f+".name", "required")
		}
		if names[b.Name] {
			return nil, invalid(f+".name", "%q is given twice", b.Name)
		}
		names[b.Name] = true
		if _, err := netip.ParseAddr(b.Address); err != nil {
			return nil, invalid(f+".address", "%q is not an IP address", b.Address)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.clone()
	i := slices.IndexFunc(next.LoadBalancers, func(lb *cloudsimv1.LoadBalancer) bool { return lb.Name == req.Name })
	var lb *cloudsimv1.LoadBalancer
	if i >= 0 {
		lb = next.LoadBalancers[i]
	} else {
		ip, err := c.allocIPLocked()
		if err != nil {
			return nil, err
		}
		lb = &cloudsimv1.LoadBalancer{Name: req.Name, ExternalIp: ip}
		next.LoadBalancers = append(next.LoadBalancers, lb)
		slices.SortFunc(next.LoadBalancers, func(a, b *cloudsimv1.LoadBalancer) int { return strings.Compare(a.Name, b.Name) })
	}
	old := map[int32]int32{} // port -> external port kept across updates
	for _, l := range lb.Listeners {
		old[l.Port] = l.ExternalPort
	}
	var listeners []*cloudsimv1.Listener
	for _, l := range req.Listeners {
		ext := old[l.Port]
		if ext == 0 {
			var err error
			if ext, err = c.allocPortLocked(next, l.Port, lb.Name); err != nil {
				return nil, err
			}
		}
		listeners = append(listeners, &cloudsimv1.Listener{Port: l.Port, Protocol: "TCP", BackendPort: l.BackendPort, ExternalPort: ext})
		// Later listeners of this request must not get the same port.
		lb.Listeners = append(lb.Listeners, listeners[len(listeners)-1])
	}
	lb.Listeners = listeners
	lb.Backends = req.Backends
	if err := c.openLocked(lb); err != nil {
		// Roll the data plane back to what the saved state says.
		if prev := c.findLBLocked(req.Name); prev != nil {
			_ = c.openLocked(prev)
		} else if b := c.lbs[req.Name]; b != nil {
			b.Close()
			delete(c.lbs, req.Name)
		}
		return nil, status.Errorf(codes.Unavailable, "load balancer %s: %v", req.Name, err)
	}
	if err := c.saveLocked(next); err != nil {
		return nil, err
	}
	c.log.Info("load balancer ensured", "name", lb.Name, "external_ip", lb.ExternalIp, "listeners", len(lb.Listeners), "backends", len(lb.Backends))
	return &cloudsimv1.EnsureLoadBalancerResponse{LoadBalancer: c.withHealthLocked(lb)}, nil
}

func (c *Cloud) findLBLocked(name string) *cloudsimv1.LoadBalancer {
	for _, lb := range c.state.LoadBalancers {
		if lb.Name == name {
			return lb
		}
	}
	return nil
}

// allocIPLocked gives a new load balancer its external address.
func (c *Cloud) allocIPLocked() (string, error) {
	if !c.cfg.LBIPRange.IsValid() {
		return c.cfg.LBAdvertiseIP.String(), nil
	}
	used := map[string]bool{}
	for _, lb := range c.state.LoadBalancers {
		used[lb.ExternalIp] = true
	}
	// Skip the range's own address (its network address).
	for a := c.cfg.LBIPRange.Addr().Next(); c.cfg.LBIPRange.Contains(a); a = a.Next() {
		if !used[a.String()] {
			return a.String(), nil
		}
	}
	return "", status.Errorf(codes.ResourceExhausted, "no load balancer address left in %s", c.cfg.LBIPRange)
}

// allocPortLocked gives a listener its external port: the service port on
// an address of its own, else a free port of the range.
func (c *Cloud) allocPortLocked(next *cloudsimv1.State, port int32, self string) (int32, error) {
	if c.cfg.LBIPRange.IsValid() {
		return port, nil
	}
	used := map[int32]bool{}
	for _, lb := range next.LoadBalancers {
		for _, l := range lb.Listeners {
			used[l.ExternalPort] = true
		}
	}
	for p := int32(c.cfg.LBPortMin); p <= int32(c.cfg.LBPortMax); p++ {
		if !used[p] {
			return p, nil
		}
	}
	return 0, status.Errorf(codes.ResourceExhausted, "load balancer %s: no port left in %d-%d", self, c.cfg.LBPortMin, c.cfg.LBPortMax)
}

// openLocked makes the data plane of lb match it.
func (c *Cloud) openLocked(lb *cloudsimv1.LoadBalancer) error {
	listenIP := lb.ExternalIp
	if !c.cfg.LBIPRange.IsValid() {
		listenIP = c.cfg.LBListenIP.String()
	}
	var ls []balancer.Listener
	for _, l := range lb.Listeners {
		ls = append(ls, balancer.Listener{ListenAddr: net.JoinHostPort(listenIP, strconv.Itoa(int(l.ExternalPort))), BackendPort: int(l.BackendPort)})
	}
	var bs []balancer.Backend
	for _, b := range lb.Backends {
		bs = append(bs, balancer.Backend{Name: b.Name, Address: b.Address})
	}
	b := c.lbs[lb.Name]
	if b == nil {
		opts := c.cfg.Balancer
		opts.Logger = c.log.Named("lb").With("lb", lb.Name)
		b = balancer.New(opts)
		c.lbs[lb.Name] = b
	}
	return b.Update(ls, bs)
}

func (c *Cloud) withHealthLocked(lb *cloudsimv1.LoadBalancer) *cloudsimv1.LoadBalancer {
	out := proto.Clone(lb).(*cloudsimv1.LoadBalancer)
	out.Health = nil
	if b := c.lbs[lb.Name]; b != nil {
		for _, h := range b.Health() {
			out.Health = append(out.Health, &cloudsimv1.BackendHealth{Name: h.Backend.Name, Address: h.Backend.Address, Port: int32(h.Port), Healthy: h.Healthy})
		}
	}
	return out
}

// GetLoadBalancer returns one load balancer.
func (c *Cloud) GetLoadBalancer(_ context.Context, req *cloudsimv1.GetLoadBalancerRequest) (*cloudsimv1.GetLoadBalancerResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("name", "required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	lb := c.findLBLocked(req.Name)
	if lb == nil {
		return nil, status.Errorf(codes.NotFound, "load balancer %q not found", req.Name)
	}
	return &cloudsimv1.GetLoadBalancerResponse{LoadBalancer: c.withHealthLocked(lb)}, nil
}

// ListLoadBalancers lists every load balancer.
func (c *Cloud) ListLoadBalancers(context.Context, *cloudsimv1.ListLoadBalancersRequest) (*cloudsimv1.ListLoadBalancersResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := &cloudsimv1.ListLoadBalancersResponse{}
	for _, lb := range c.state.LoadBalancers {
		out.LoadBalancers = append(out.LoadBalancers, c.withHealthLocked(lb))
	}
	return out, nil
}

// DeleteLoadBalancer stops and removes a load balancer.
func (c *Cloud) DeleteLoadBalancer(_ context.Context, req *cloudsimv1.DeleteLoadBalancerRequest) (*cloudsimv1.DeleteLoadBalancerResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("name", "required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.IndexFunc(c.state.LoadBalancers, func(lb *cloudsimv1.LoadBalancer) bool { return lb.Name == req.Name })
	if i < 0 {
		return nil, status.Errorf(codes.NotFound, "load balancer %q not found", req.Name)
	}
	next := c.clone()
	next.LoadBalancers = slices.Delete(next.LoadBalancers, i, i+1)
	if err := c.saveLocked(next); err != nil {
		return nil, err
	}
	if b := c.lbs[req.Name]; b != nil {
		b.Close()
		delete(c.lbs, req.Name)
	}
	c.log.Info("load balancer deleted", "name", req.Name)
	return &cloudsimv1.DeleteLoadBalancerResponse{}, nil
}
