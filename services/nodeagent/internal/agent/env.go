package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/quantity"
	"github.com/kplane/kplane/pkg/validation"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// ReasonCreateConfigError is a container that cannot start because its
// configuration (a Secret, a field) cannot be resolved; it is retried.
const ReasonCreateConfigError = "CreateContainerConfigError"

// configError is a container configuration that cannot be resolved.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

func configErrorf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}

// isConfigError tells a configuration error from a failure to start.
func isConfigError(err error) bool {
	var ce *configError
	return errors.As(err, &ce)
}

// envResolver resolves containers' environments for one pod, reading each
// Secret once: only the Secrets the pod names are ever read.
type envResolver struct {
	api     *client.Client
	pod     *kplanev1.Pod
	podIP   string
	hostIP  string
	node    nodeResources
	secrets map[string]*kplanev1.Secret // nil value: not found
	// invalid are envFrom keys skipped for not being variable names.
	invalid []string
}

// nodeResources stand in for a limit a container does not set, as the
// node's allocatable does for the kubelet.
type nodeResources struct {
	cpu, memory quantity.Quantity
}

func (r *envResolver) secret(ctx context.Context, name string) (*kplanev1.Secret, error) {
	if s, ok := r.secrets[name]; ok {
		return s, nil
	}
	ns := r.pod.GetMetadata().GetNamespace()
	s, err := client.For[*kplanev1.Secret](r.api).Get(ctx, ns, name)
	if client.IsNotFound(err) {
		s, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s/%s: %w", ns, name, err)
	}
	if r.secrets == nil {
		r.secrets = map[string]*kplanev1.Secret{}
	}
	r.secrets[name] = s
	return s, nil
}

// resolve returns a copy of c whose env holds plain values in the order
// Kubernetes builds them (envFrom sources, then env, later names winning),
// with $(VAR) references expanded in values, command and args, and
// envFrom cleared.
func (r *envResolver) resolve(ctx context.Context, c *kplanev1.Container) (*kplanev1.Container, error) {
	out := proto.Clone(c).(*kplanev1.Container)
	vars := map[string]string{}
	var order []string
	set := func(name, value string) {
		if _, ok := vars[name]; !ok {
			order = append(order, name)
		}
		vars[name] = value
	}
	for _, from := range c.GetEnvFrom() {
		ref := from.GetSecretRef()
		if ref == nil {
			continue
		}
		s, err := r.secret(ctx, ref.GetName())
		if err != nil {
			return nil, err
		}
		if s == nil {
			if ref.GetOptional() {
				continue
			}
			return nil, configErrorf("secret %q not found", ref.GetName())
		}
		keys := make([]string, 0, len(s.GetData()))
		for k := range s.GetData() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			name := from.GetPrefix() + k
			if len(validation.IsEnvVarName(name)) > 0 {
				r.invalid = append(r.invalid, name)
				continue
			}
			set(name, string(s.GetData()[k]))
		}
	}
	lookup := func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
	for _, e := range c.GetEnv() {
		src := e.GetValueFrom()
		if src == nil {
			set(e.GetName(), expand(e.GetValue(), lookup))
			continue
		}
		v, ok, err := r.valueFrom(ctx, c, src)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.GetName(), err)
		}
		if ok {
			set(e.GetName(), v)
		}
	}
	out.Env = make([]*kplanev1.EnvVar, 0, len(order))
	for _, name := range order {
		out.Env = append(out.Env, &kplanev1.EnvVar{Name: name, Value: vars[name]})
	}
	out.EnvFrom = nil
	for i, s := range out.Command {
		out.Command[i] = expand(s, lookup)
	}
	for i, s := range out.Args {
		out.Args[i] = expand(s, lookup)
	}
	return out, nil
}

// valueFrom resolves one env source; ok is false for an optional Secret
// key that is absent (the variable is then not set).
func (r *envResolver) valueFrom(ctx context.Context, c *kplanev1.Container, src *kplanev1.EnvVarSource) (string, bool, error) {
	switch {
	case src.GetSecretKeyRef() != nil:
		ref := src.GetSecretKeyRef()
		s, err := r.secret(ctx, ref.GetName())
		if err != nil {
			return "", false, err
		}
		if s == nil {
			if ref.GetOptional() {
				return "", false, nil
			}
			return "", false, configErrorf("secret %q not found", ref.GetName())
		}
		v, ok := s.GetData()[ref.GetKey()]
		if !ok {
			if ref.GetOptional() {
				return "", false, nil
			}
			return "", false, configErrorf("couldn't find key %s in Secret %s/%s", ref.GetKey(), r.pod.GetMetadata().GetNamespace(), ref.GetName())
		}
		return string(v), true, nil
	case src.GetFieldRef() != nil:
		v, err := r.field(src.GetFieldRef().GetFieldPath())
		return v, err == nil, err
	case src.GetResourceFieldRef() != nil:
		v, err := r.resourceField(c, src.GetResourceFieldRef())
		return v, err == nil, err
	}
	return "", false, configErrorf("valueFrom has no source")
}

// field reads a downward-API field of the pod.
func (r *envResolver) field(path string) (string, error) {
	md := r.pod.GetMetadata()
	if k, ok := subscript(path, "metadata.labels"); ok {
		return md.GetLabels()[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return md.GetAnnotations()[k], nil
	}
	switch path {
	case "metadata.name":
		return md.GetName(), nil
	case "metadata.namespace":
		return md.GetNamespace(), nil
	case "metadata.uid":
		return md.GetUid(), nil
	case "spec.nodeName":
		return r.pod.GetSpec().GetNodeName(), nil
	case "spec.serviceAccountName":
		return r.pod.GetSpec().GetServiceAccountName(), nil
	case "status.podIP", "status.podIPs":
		return r.podIP, nil
	case "status.hostIP", "status.hostIPs":
		return r.hostIP, nil
	}
	return "", configErrorf("unsupported fieldPath %q", path)
}

// subscript parses prefix['key'] and returns key.
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// resourceField reads a container's limit or request divided by the
// divisor, rounded up; an unset limit is the node's capacity.
func (r *envResolver) resourceField(c *kplanev1.Container, sel *kplanev1.ResourceFieldSelector) (string, error) {
	target := c
	if n := sel.GetContainerName(); n != "" && n != c.GetName() {
		target = nil
		for _, o := range r.pod.GetSpec().GetContainers() {
			if o.GetName() == n {
				target = o
			}
		}
		if target == nil {
			return "", configErrorf("resourceFieldRef: no container named %q", n)
		}
	}
	kind, res, ok := strings.Cut(sel.GetResource(), ".")
	if !ok || (kind != "limits" && kind != "requests") || (res != "cpu" && res != "memory") {
		return "", configErrorf("resourceFieldRef: unsupported resource %q", sel.GetResource())
	}
	list := target.GetResources().GetRequests()
	if kind == "limits" {
		list = target.GetResources().GetLimits()
	}
	var q quantity.Quantity
	if s, set := list[res]; set {
		var err error
		if q, err = quantity.Parse(s); err != nil {
			return "", configErrorf("resourceFieldRef: %s %q: %v", sel.GetResource(), s, err)
		}
	} else if kind == "limits" {
		q = r.node.memory
		if res == "cpu" {
			q = r.node.cpu
		}
	}
	div := quantity.MustParse("1")
	if d := sel.GetDivisor(); d != "" {
		var err error
		if div, err = quantity.Parse(d); err != nil || div.Sign() <= 0 {
			return "", configErrorf("resourceFieldRef: divisor %q must be a positive quantity", d)
		}
	}
	num, den := q.MilliValue(), div.MilliValue()
	if den <= 0 {
		return "", configErrorf("resourceFieldRef: divisor %q is below 1m", sel.GetDivisor())
	}
	return strconv.FormatInt((num+den-1)/den, 10), nil
}

// expand replaces $(NAME) with the variable's value when lookup knows it
// and leaves it as written otherwise; $$ is a literal $ (so $$(NAME)
// stays "$(NAME)"), as Kubernetes expands env values, command and args.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok && name != "" {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
