// Package proxy is the apiserver's HTTP proxy to Services and Pods, as
// Kubernetes serves it ("the bastion proxy"): a request to
// /api/v1/namespaces/N/services/S:P/proxy/PATH goes to a ready endpoint
// of Service S, port P, and /api/v1/namespaces/N/pods/POD:P/proxy/PATH to
// the pod's IP, so a ClusterIP service is reachable from outside the
// cluster through the apiserver alone. Requests and responses stream
// through net/http/httputil.ReverseProxy (upgrades such as websockets
// included); errors are Kubernetes Status objects.
package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/apiutil"
)

// Getter reads one object; the apiserver's store implements it.
type Getter interface {
	Get(ctx context.Context, kind, namespace, name string) (*kplanev1.Object, error)
}

// Proxy serves the service and pod proxy paths.
type Proxy struct {
	objects   Getter
	log       hclog.Logger
	transport http.RoundTripper
	next      atomic.Uint64 // round robin over a service's ready endpoints
	observe   func(kind string, code int)
	authorize AuthorizeFunc
}

// AuthorizeFunc decides whether the request's user may proxy: verb from
// the HTTP method, kind Service or Pod, subresource "proxy". A non-nil
// error (PermissionDenied) refuses with 403.
type AuthorizeFunc func(ctx context.Context, verb, kind, subresource, namespace, name string) error

// WithAuthorizer checks every proxied request with authorize first.
func WithAuthorizer(authorize AuthorizeFunc) Option {
	return func(p *Proxy) { p.authorize = authorize }
}

// httpVerbs maps a proxied method to the RBAC verb Kubernetes uses.
var httpVerbs = map[string]string{
	http.MethodGet: "get", http.MethodHead: "get", http.MethodOptions: "get",
	http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete",
}

// allowed runs the authorizer; false means the refusal was written.
func (p *Proxy) allowed(w http.ResponseWriter, r *http.Request, kind, ns, name string) bool {
	if p.authorize == nil {
		return true
	}
	if err := p.authorize(r.Context(), httpVerbs[r.Method], kind, "proxy", ns, name); err != nil {
		WriteStatus(w, http.StatusForbidden, "Forbidden", status.Convert(err).Message())
		return false
	}
	return true
}

// Option adjusts a Proxy.
type Option func(*Proxy)

// WithObserver calls observe once per proxied request with "services"
// or "pods" and the HTTP status answered (metrics).
func WithObserver(observe func(kind string, code int)) Option {
	return func(p *Proxy) { p.observe = observe }
}

// New returns a proxy that looks objects up in objects.
func New(objects Getter, log hclog.Logger, opts ...Option) *Proxy {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	p := &Proxy{
		objects: objects,
		log:     log,
		// Never through an environment proxy: endpoints are cluster
		// addresses the apiserver reaches directly.
		transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 0, // long polls and streams are allowed
		},
		observe: func(string, int) {},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Register adds the proxy's routes to mux.
func (p *Proxy) Register(mux *http.ServeMux) {
	svc, pod := p.observed("services", p.serveService), p.observed("pods", p.servePod)
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions} {
		mux.HandleFunc(method+" /api/v1/namespaces/{namespace}/services/{name}/proxy", svc)
		mux.HandleFunc(method+" /api/v1/namespaces/{namespace}/services/{name}/proxy/{path...}", svc)
		mux.HandleFunc(method+" /api/v1/namespaces/{namespace}/pods/{name}/proxy", pod)
		mux.HandleFunc(method+" /api/v1/namespaces/{namespace}/pods/{name}/proxy/{path...}", pod)
	}
}

// observed wraps h so that its answer's status is observed.
func (p *Proxy) observed(kind string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := &codeRecorder{ResponseWriter: w}
		h(rec, r)
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		p.observe(kind, code)
	}
}

// codeRecorder notes the status written; Unwrap keeps flushing and
// hijacking (upgrades) working through http.ResponseController.
type codeRecorder struct {
	http.ResponseWriter
	code int
}

func (c *codeRecorder) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *codeRecorder) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return c.ResponseWriter.Write(b)
}

func (c *codeRecorder) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Hijack is how the reverse proxy takes over a connection after a
// backend answered 101 Switching Protocols; it writes that answer
// itself, so it is noted here.
func (c *codeRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if c.code == 0 {
		c.code = http.StatusSwitchingProtocols
	}
	conn, rw, err := http.NewResponseController(c.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, fmt.Errorf("hijack: %w", err)
	}
	return conn, rw, nil
}

// CloseIdleConnections closes the idle connections to backends.
func (p *Proxy) CloseIdleConnections() {
	if t, ok := p.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// splitSchemeNamePort splits Kubernetes' "[scheme:]name[:port]".
func splitSchemeNamePort(id string) (scheme, name, port string, ok bool) {
	parts := strings.Split(id, ":")
	switch len(parts) {
	case 1:
		name = parts[0]
	case 2:
		name, port = parts[0], parts[1]
	case 3:
		scheme, name, port = parts[0], parts[1], parts[2]
		if scheme != "http" && scheme != "https" {
			return "", "", "", false
		}
	default:
		return "", "", "", false
	}
	return scheme, name, port, name != ""
}

// target is where a request goes.
type target struct {
	host string // ip:port
}

func (p *Proxy) serveService(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("namespace")
	scheme, name, port, ok := splitSchemeNamePort(r.PathValue("name"))
	if !ok {
		WriteStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("invalid service request %q: want NAME, NAME:PORT or http:NAME:PORT", r.PathValue("name")))
		return
	}
	if !p.allowed(w, r, "Service", ns, name) {
		return
	}
	if scheme == "https" {
		WriteStatus(w, http.StatusBadRequest, "BadRequest", "https is not supported by the service proxy: it speaks plain HTTP to endpoints; use http:"+name+":"+port+" or NAME:PORT")
		return
	}
	t, code, reason, msg := p.serviceTarget(r.Context(), ns, name, port)
	if code != 0 {
		WriteStatus(w, code, reason, msg)
		return
	}
	p.forward(w, r, t, "services")
}

// serviceTarget picks a ready endpoint of the service's port: the port
// is the service port named port, or numbered port, or the first one
// when port is empty; the endpoint port is the Endpoints port of the
// same name, as endpointsctl writes them.
func (p *Proxy) serviceTarget(ctx context.Context, ns, name, port string) (target, int, string, string) {
	obj, err := p.objects.Get(ctx, "Service", ns, name)
	if err != nil {
		code, reason, msg := statusOf(err, fmt.Sprintf("services %q not found", name))
		return target{}, code, reason, msg
	}
	spec := obj.GetService().GetSpec()
	if spec.GetType() == "ExternalName" {
		return target{}, http.StatusBadRequest, "BadRequest", fmt.Sprintf("service %q is of type ExternalName (%s): it has no endpoints to proxy to", name, spec.GetExternalName())
	}
	var sp *kplanev1.ServicePort
	for _, cand := range spec.GetPorts() {
		if port == "" || cand.GetName() == port || strconv.Itoa(int(cand.GetPort())) == port {
			sp = cand
			break
		}
	}
	if sp == nil {
		return target{}, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("no service port %q found for service %q", port, name)
	}
	epObj, err := p.objects.Get(ctx, "Endpoints", ns, name)
	if err != nil && status.Code(err) != codes.NotFound {
		code, reason, msg := statusOf(err, "")
		return target{}, code, reason, msg
	}
	var hosts []string
	for _, ss := range epObj.GetEndpoints().GetSubsets() {
		for _, ep := range ss.GetPorts() {
			if ep.GetName() != sp.GetName() {
				continue
			}
			for _, a := range ss.GetAddresses() {
				hosts = append(hosts, net.JoinHostPort(a.GetIp(), strconv.Itoa(int(ep.GetPort()))))
			}
		}
	}
	if len(hosts) == 0 {
		return target{}, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("no endpoints available for service %q", name)
	}
	return target{host: hosts[p.next.Add(1)%uint64(len(hosts))]}, 0, "", ""
}

func (p *Proxy) servePod(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("namespace")
	scheme, name, port, ok := splitSchemeNamePort(r.PathValue("name"))
	if !ok {
		WriteStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("invalid pod request %q: want NAME, NAME:PORT or http:NAME:PORT", r.PathValue("name")))
		return
	}
	if !p.allowed(w, r, "Pod", ns, name) {
		return
	}
	if scheme == "https" {
		WriteStatus(w, http.StatusBadRequest, "BadRequest", "https is not supported by the pod proxy: it speaks plain HTTP to pods")
		return
	}
	obj, err := p.objects.Get(r.Context(), "Pod", ns, name)
	if err != nil {
		code, reason, msg := statusOf(err, fmt.Sprintf("pods %q not found", name))
		WriteStatus(w, code, reason, msg)
		return
	}
	pod := obj.GetPod()
	ip := pod.GetStatus().GetPodIp()
	if ip == "" {
		WriteStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("pod %q has no IP yet", name))
		return
	}
	num, ok := podPort(pod, port)
	if !ok {
		WriteStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("pod %q has no container port named %q", name, port))
		return
	}
	p.forward(w, r, target{host: net.JoinHostPort(ip, strconv.Itoa(int(num)))}, "pods")
}

// podPort resolves a pod proxy's port: a number, a container port's
// name, or (empty) the first declared container port, else 80.
func podPort(pod *kplanev1.Pod, port string) (int32, bool) {
	if port == "" {
		for _, c := range pod.GetSpec().GetContainers() {
			for _, cp := range c.GetPorts() {
				return cp.GetContainerPort(), true
			}
		}
		return 80, true
	}
	if n, err := strconv.Atoi(port); err == nil {
		return int32(n), n > 0 && n < 65536
	}
	return apiutil.PodPort(pod, kplanev1.IntOrStringFromString(port), kplanev1.ProtocolTCP)
}

// forward proxies r to t, with the path after ".../proxy".
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, t target, what string) {
	path := backendPath(r.URL)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = t.host
			pr.Out.URL.Path, pr.Out.URL.RawPath = path.Path, path.RawPath
			pr.Out.Host = t.host
			pr.SetXForwarded()
		},
		Transport:     p.transport,
		FlushInterval: -1, // stream: every write reaches the client at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return // the client went away
			}
			p.log.Debug("proxy to backend failed", "kind", what, "backend", t.host, "error", err)
			WriteStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable",
				fmt.Sprintf("error trying to reach %s endpoint %s: %v", strings.TrimSuffix(what, "s"), t.host, err))
		},
	}
	rp.ServeHTTP(w, r)
}

// backendPath is the part of the request path after ".../proxy", "/"
// when empty, kept escaped as the client sent it.
func backendPath(u *url.URL) *url.URL {
	// "", api, v1, namespaces, N, services|pods, NAME, proxy, rest
	parts := strings.SplitN(u.EscapedPath(), "/", 9)
	rest := "/"
	if len(parts) == 9 {
		rest += parts[8]
	}
	out, err := url.Parse(rest)
	if err != nil {
		return &url.URL{Path: "/"}
	}
	return &url.URL{Path: out.Path, RawPath: out.RawPath}
}

// statusOf maps a store error to an HTTP status, reason and message.
func statusOf(err error, notFound string) (int, string, string) {
	switch status.Code(err) {
	case codes.NotFound:
		return http.StatusNotFound, "NotFound", notFound
	case codes.InvalidArgument:
		return http.StatusBadRequest, "BadRequest", status.Convert(err).Message()
	case codes.Unavailable:
		return http.StatusServiceUnavailable, "ServiceUnavailable", status.Convert(err).Message()
	case codes.Canceled, codes.DeadlineExceeded:
		return http.StatusGatewayTimeout, "Timeout", status.Convert(err).Message()
	}
	return http.StatusInternalServerError, "InternalError", status.Convert(err).Message()
}
