// Package cli is the cloudsim command: `cloudsim serve` runs the simulated
// cloud; `cloudsim instance|route|lb ...` are its admin commands, gRPC
// clients of a running sim (what a cloud's console would be).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	khealth "github.com/kplane/kplane/pkg/health"
	"github.com/kplane/kplane/pkg/logging"
	cloudsimv1 "github.com/kplane/kplane/proto/kplane/cloudsim/v1"
	"github.com/kplane/kplane/services/cloudsim/balancer"
	"github.com/kplane/kplane/services/cloudsim/sim"
)

// DefaultAddr is where the sim serves and the admin commands connect.
const DefaultAddr = "127.0.0.1:7070"

// ErrUsage marks command-line mistakes (exit status 2).
var ErrUsage = errors.New("usage")

const usage = `usage:
  cloudsim serve [flags]                      run the simulated cloud
  cloudsim instance create NAME [flags]       start an instance
  cloudsim instance list | get ID|NAME
  cloudsim instance terminate|shutdown|start ID|NAME
  cloudsim route list
  cloudsim lb list | get NAME
Admin commands take --cloud ADDR (default $CLOUDSIM_ADDR or ` + DefaultAddr + `).`

// Run runs the command in args (without the program name) until ctx ends
// (serve) or the command is done, writing its output to out.
func Run(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command\n%s", ErrUsage, usage)
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], errOut)
	case "instance", "route", "lb":
		if len(args) < 2 {
			return fmt.Errorf("%w: %s needs a subcommand\n%s", ErrUsage, args[0], usage)
		}
		return admin(ctx, args[0], args[1], args[2:], out)
	case "-h", "--help", "help":
		_, err := fmt.Fprintln(out, usage)
		return err
	}
	return fmt.Errorf("%w: unknown command %q\n%s", ErrUsage, args[0], usage)
}

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

// instanceFile is the --instances file: instances to create at start when
// no live instance has their name.
type instanceFile struct {
	Instances []seedInstance `json:"instances"`
}

type seedInstance struct {
	Name         string        `json:"name"`
	Zone         string        `json:"zone"`
	Region       string        `json:"region"`
	InstanceType string        `json:"instanceType"`
	Addresses    []seedAddress `json:"addresses"`
}

type seedAddress struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

// parseInstanceFlag reads --instance's key=value list.
func parseInstanceFlag(spec string) (seedInstance, error) {
	var in seedInstance
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return in, fmt.Errorf("%q is not key=value", kv)
		}
		switch k {
		case "name":
			in.Name = v
		case "zone":
			in.Zone = v
		case "region":
			in.Region = v
		case "type":
			in.InstanceType = v
		case "internal-ip":
			in.Addresses = append(in.Addresses, seedAddress{Type: sim.AddressInternalIP, Address: v})
		case "external-ip":
			in.Addresses = append(in.Addresses, seedAddress{Type: sim.AddressExternalIP, Address: v})
		default:
			return in, fmt.Errorf("unknown key %q (want name, zone, region, type, internal-ip, external-ip)", k)
		}
	}
	if in.Name == "" {
		return in, errors.New("name is required")
	}
	return in, nil
}

func serve(ctx context.Context, args []string, errOut io.Writer) error {
	fs := flag.NewFlagSet("cloudsim serve", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var logOpts logging.Options
	logOpts.AddFlags(fs)
	listen := fs.String("listen", DefaultAddr, "address of the gRPC API")
	stateFile := fs.String("state-file", "cloudsim-state.json", "file the state is kept in (replaced atomically after every change)")
	instances := fs.String("instances", "", "YAML or JSON file of instances to create at start ({instances: [{name, zone, region, instanceType, addresses: [{type, address}]}]}); one that exists (by name, not terminated) is left alone")
	ipRange := fs.String("lb-ip-range", "127.240.0.0/24", "give every load balancer its own address from this range, listening on the service's ports; empty to use --lb-advertise-ip with --lb-port-range")
	listenIP := fs.String("lb-listen-ip", "", "with --lb-port-range: address the load balancers listen on (default --lb-advertise-ip)")
	advertiseIP := fs.String("lb-advertise-ip", "", "with --lb-port-range: the load balancers' external address, shared by all")
	portRange := fs.String("lb-port-range", "", "MIN-MAX: ports the load balancers' listeners get, one each, on --lb-listen-ip")
	interval := fs.Duration("health-check-interval", time.Second, "how often every backend of every load balancer is checked with a TCP connect")
	timeout := fs.Duration("health-check-timeout", time.Second, "timeout of one health check connect and of a forwarded connection's dial")
	unhealthy := fs.Int("unhealthy-threshold", 2, "consecutive failed checks that take a backend out of rotation")
	healthAddr := fs.String("health-addr", "", "address of the HTTP server for /healthz, /readyz and /metrics (empty: none; the gRPC health service is always on)")
	var inline []string
	fs.Func("instance", "an instance to create at start, like --instances (repeatable): name=NAME,zone=Z,region=R,type=T,internal-ip=IP,external-ip=IP", func(s string) error {
		inline = append(inline, s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageErr("%v", err)
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected arguments: %v", fs.Args())
	}
	if err := logOpts.Validate(); err != nil {
		return usageErr("%v", err)
	}
	cfg := sim.Config{StateFile: *stateFile,
		Balancer: balancer.Options{Interval: *interval, Timeout: *timeout, UnhealthyAfter: *unhealthy}}
	if *interval <= 0 || *timeout <= 0 || *unhealthy < 1 {
		return usageErr("--health-check-interval and --health-check-timeout must be positive, --unhealthy-threshold at least 1")
	}
	if *portRange != "" {
		if *ipRange != "" && isSet(fs, "lb-ip-range") {
			return usageErr("--lb-ip-range and --lb-port-range exclude each other")
		}
		lo, hi, ok := strings.Cut(*portRange, "-")
		minP, err1 := strconv.Atoi(lo)
		maxP, err2 := strconv.Atoi(hi)
		if !ok || err1 != nil || err2 != nil {
			return usageErr("--lb-port-range %q: want MIN-MAX", *portRange)
		}
		cfg.LBPortMin, cfg.LBPortMax = minP, maxP
		adv, err := netip.ParseAddr(*advertiseIP)
		if err != nil {
			return usageErr("--lb-advertise-ip %q: %v (required with --lb-port-range)", *advertiseIP, err)
		}
		cfg.LBAdvertiseIP, cfg.LBListenIP = adv, adv
		if *listenIP != "" {
			if cfg.LBListenIP, err = netip.ParseAddr(*listenIP); err != nil {
				return usageErr("--lb-listen-ip %q: %v", *listenIP, err)
			}
		}
	} else {
		if *advertiseIP != "" || *listenIP != "" {
			return usageErr("--lb-advertise-ip and --lb-listen-ip need --lb-port-range")
		}
		p, err := netip.ParsePrefix(*ipRange)
		if err != nil {
			return usageErr("--lb-ip-range %q: %v", *ipRange, err)
		}
		cfg.LBIPRange = p.Masked()
	}
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	var seed instanceFile
	if *instances != "" {
		b, err := os.ReadFile(*instances)
		if err != nil {
			return fmt.Errorf("--instances: %w", err)
		}
		if err := yaml.UnmarshalStrict(b, &seed); err != nil {
			return usageErr("--instances %s: %v", *instances, err)
		}
	}
	for _, spec := range inline {
		in, err := parseInstanceFlag(spec)
		if err != nil {
			return usageErr("--instance %q: %v", spec, err)
		}
		seed.Instances = append(seed.Instances, in)
	}
	log := logOpts.New("cloudsim", errOut)
	cfg.Logger = log
	cloud, err := sim.New(cfg)
	if err != nil {
		return err
	}
	defer cloud.Close()
	for i, in := range seed.Instances {
		req := &cloudsimv1.CreateInstanceRequest{Name: in.Name, Zone: in.Zone, Region: in.Region, InstanceType: in.InstanceType}
		for _, a := range in.Addresses {
			req.Addresses = append(req.Addresses, &cloudsimv1.Address{Type: a.Type, Address: a.Address})
		}
		cur, err := cloud.GetInstance(ctx, &cloudsimv1.GetInstanceRequest{Name: in.Name})
		if err == nil && cur.Instance.State != cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED {
			continue
		}
		if _, err := cloud.CreateInstance(ctx, req); err != nil {
			return fmt.Errorf("--instances: instances[%d]: %w", i, err)
		}
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := grpc.NewServer()
	cloudsimv1.RegisterCloudServer(srv, cloud)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	if *healthAddr != "" {
		reg := prometheus.NewRegistry()
		if err := reg.Register(collectors.NewGoCollector()); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		hsrv, err := khealth.Start(*healthAddr, reg, func() error { return nil }, log)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("--health-addr: %w", err)
		}
		defer hsrv.Stop()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("serving", "listen", ln.Addr().String(), "state_file", cfg.StateFile)
	select {
	case <-ctx.Done():
		hs.Shutdown()
		srv.GracefulStop()
		if err := <-errc; err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		log.Info("stopped cleanly")
		return nil
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	}
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func admin(ctx context.Context, noun, verb string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("cloudsim "+noun+" "+verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := os.Getenv("CLOUDSIM_ADDR")
	if def == "" {
		def = DefaultAddr
	}
	addr := fs.String("cloud", def, "address of the sim's API")
	output := fs.String("o", "", "output: json, or a table when empty")
	var zone, region, itype string
	var addrs []*cloudsimv1.Address
	if noun == "instance" && verb == "create" {
		fs.StringVar(&zone, "zone", "", "topology.kubernetes.io/zone of the instance")
		fs.StringVar(&region, "region", "", "topology.kubernetes.io/region of the instance")
		fs.StringVar(&itype, "type", "", "node.kubernetes.io/instance-type of the instance")
		for _, t := range []string{sim.AddressInternalIP, sim.AddressExternalIP} {
			flagName := strings.ToLower(strings.TrimSuffix(t, "IP")) + "-ip"
			fs.Func(flagName, t+" address (repeatable)", func(s string) error {
				addrs = append(addrs, &cloudsimv1.Address{Type: t, Address: s})
				return nil
			})
		}
	}
	// Flags may come before or after the one positional argument.
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return usageErr("%s %s: %v", noun, verb, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if *output != "" && *output != "json" {
		return usageErr("-o %q: want json or nothing", *output)
	}
	needs := map[string]int{"instance create": 1, "instance get": 1, "instance terminate": 1, "instance shutdown": 1, "instance start": 1,
		"instance list": 0, "route list": 0, "lb list": 0, "lb get": 1}
	n, ok := needs[noun+" "+verb]
	if !ok {
		return usageErr("unknown command %s %s\n%s", noun, verb, usage)
	}
	if len(pos) != n {
		return usageErr("%s %s takes %d argument(s), got %d", noun, verb, n, len(pos))
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("--cloud %s: %w", *addr, err)
	}
	defer func() { _ = conn.Close() }()
	api := cloudsimv1.NewCloudClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	var result proto.Message
	switch noun + " " + verb {
	case "instance create":
		r, err := api.CreateInstance(ctx, &cloudsimv1.CreateInstanceRequest{Name: pos[0], Zone: zone, Region: region, InstanceType: itype, Addresses: addrs})
		if err != nil {
			return err
		}
		result = r.Instance
	case "instance get":
		in, err := lookup(ctx, api, pos[0])
		if err != nil {
			return err
		}
		result = in
	case "instance terminate", "instance shutdown", "instance start":
		in, err := lookup(ctx, api, pos[0])
		if err != nil {
			return err
		}
		st := map[string]cloudsimv1.InstanceState{"terminate": cloudsimv1.InstanceState_INSTANCE_STATE_TERMINATED,
			"shutdown": cloudsimv1.InstanceState_INSTANCE_STATE_SHUTDOWN, "start": cloudsimv1.InstanceState_INSTANCE_STATE_RUNNING}[verb]
		r, err := api.SetInstanceState(ctx, &cloudsimv1.SetInstanceStateRequest{Id: in.Id, State: st})
		if err != nil {
			return err
		}
		result = r.Instance
	case "instance list":
		r, err := api.ListInstances(ctx, &cloudsimv1.ListInstancesRequest{})
		if err != nil {
			return err
		}
		if *output == "" {
			return table(out, []string{"ID", "NAME", "STATE", "ZONE", "REGION", "TYPE", "ADDRESSES"}, len(r.Instances), func(i int) []string {
				in := r.Instances[i]
				var as []string
				for _, a := range in.Addresses {
					as = append(as, a.Type+"="+a.Address)
				}
				return []string{in.Id, in.Name, stateName(in.State), in.Zone, in.Region, in.InstanceType, strings.Join(as, ",")}
			})
		}
		result = r
	case "route list":
		r, err := api.ListRoutes(ctx, &cloudsimv1.ListRoutesRequest{})
		if err != nil {
			return err
		}
		if *output == "" {
			return table(out, []string{"NAME", "DESTINATION", "TARGET"}, len(r.Routes), func(i int) []string {
				return []string{r.Routes[i].Name, r.Routes[i].DestinationCidr, r.Routes[i].TargetInstanceId}
			})
		}
		result = r
	case "lb list":
		r, err := api.ListLoadBalancers(ctx, &cloudsimv1.ListLoadBalancersRequest{})
		if err != nil {
			return err
		}
		if *output == "" {
			return table(out, []string{"NAME", "EXTERNAL-IP", "PORTS", "BACKENDS"}, len(r.LoadBalancers), func(i int) []string {
				lb := r.LoadBalancers[i]
				var ps, bs []string
				for _, l := range lb.Listeners {
					ps = append(ps, fmt.Sprintf("%d:%d->%d", l.Port, l.ExternalPort, l.BackendPort))
				}
				healthy := map[string]bool{}
				for _, h := range lb.Health {
					healthy[h.Name] = healthy[h.Name] || h.Healthy
				}
				for _, b := range lb.Backends {
					mark := "down"
					if healthy[b.Name] {
						mark = "up"
					}
					bs = append(bs, b.Name+"("+b.Address+","+mark+")")
				}
				return []string{lb.Name, lb.ExternalIp, strings.Join(ps, ","), strings.Join(bs, ",")}
			})
		}
		result = r
	case "lb get":
		r, err := api.GetLoadBalancer(ctx, &cloudsimv1.GetLoadBalancerRequest{Name: pos[0]})
		if err != nil {
			return err
		}
		result = r.LoadBalancer
	}
	b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: false}.Marshal(result)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	var pretty any
	if json.Unmarshal(b, &pretty) == nil {
		b, _ = json.MarshalIndent(pretty, "", "  ")
	}
	_, err = fmt.Fprintln(out, string(b))
	return err
}

// lookup finds an instance by id (i-...) or else by name.
func lookup(ctx context.Context, api cloudsimv1.CloudClient, s string) (*cloudsimv1.Instance, error) {
	if strings.HasPrefix(s, "i-") {
		r, err := api.GetInstance(ctx, &cloudsimv1.GetInstanceRequest{Id: s})
		if err == nil {
			return r.Instance, nil
		}
		if status.Code(err) != codes.NotFound {
			return nil, err
		}
	}
	r, err := api.GetInstance(ctx, &cloudsimv1.GetInstanceRequest{Name: s})
	if err != nil {
		return nil, err
	}
	return r.Instance, nil
}

func stateName(s cloudsimv1.InstanceState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "INSTANCE_STATE_"))
}

func table(out io.Writer, head []string, n int, row func(int) []string) error {
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	// tabwriter buffers: write errors surface in Flush.
	_, _ = fmt.Fprintln(w, strings.Join(head, "\t"))
	for i := range n {
		_, _ = fmt.Fprintln(w, strings.Join(row(i), "\t"))
	}
	return w.Flush()
}
