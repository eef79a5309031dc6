// Package server implements the kplane.v1.Resources gRPC service: it
// checks request shapes and hands every kind to the one generic store,
// and serves watches from the per-kind watch caches.
package server

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/serviceaccount"
	"github.com/kplane/kplane/services/apiserver/internal/store"
	"github.com/kplane/kplane/services/apiserver/internal/watchcache"
)

// catchUpTimeout bounds how long a watch from "" waits for the watch
// cache to reach etcd's current revision.
const catchUpTimeout = 10 * time.Second

// listCatchUpTimeout bounds how long a List waits for the watch cache to
// reach etcd's current revision before it reads etcd instead.
const listCatchUpTimeout = 3 * time.Second

// Paginated Lists served from the watch cache keep their snapshot this
// long after their last page, at most listSnapshots at once.
const (
	listSnapshotTTL = 30 * time.Second
	listSnapshots   = 8
)

// Server is the Resources service.
type Server struct {
	kplanev1.UnimplementedResourcesServer

	store            *store.Store
	caches           map[string]*watchcache.Cache
	bookmarkInterval time.Duration
	log              hclog.Logger
	// shutdown ends every watch stream when the apiserver stops, so a
	// graceful stop does not wait for streams that never end by themselves.
	shutdown context.Context
	// tokens issues ServiceAccount tokens; nil when the apiserver has no
	// signing key (CreateToken is then Unimplemented).
	tokens *serviceaccount.Issuer
	// requireServiceAccounts refuses pods naming a ServiceAccount that
	// does not exist: on exactly when authentication is.
	requireServiceAccounts bool
	// watchBreak, when set, returns a channel closed when the watches
	// open now must end (the apiserver's etcd member lost its leader), so
	// their clients resume on another apiserver.
	watchBreak func() <-chan struct{}
	// lists keeps the snapshots of paginated Lists served from the watch
	// caches.
	lists *watchcache.Snapshots
}

// WithWatchBreak ends each watch with Unavailable when the channel
// current at its start closes.
func WithWatchBreak(f func() <-chan struct{}) Option {
	return func(s *Server) { s.watchBreak = f }
}

// Option configures a Server.
type Option func(*Server)

// WithTokenIssuer serves CreateToken with iss.
func WithTokenIssuer(iss *serviceaccount.Issuer) Option {
	return func(s *Server) { s.tokens = iss }
}

// WithServiceAccountAdmission refuses pods whose ServiceAccount is missing.
func WithServiceAccountAdmission() Option {
	return func(s *Server) { s.requireServiceAccounts = true }
}

// New returns the service over a store and one watch cache per kind.
// Watches end with Unavailable once shutdown is done.
func New(st *store.Store, caches map[string]*watchcache.Cache, bookmarkInterval time.Duration, shutdown context.Context, log hclog.Logger, opts ...Option) *Server {
	s := &Server{store: st, caches: caches, bookmarkInterval: bookmarkInterval, shutdown: shutdown, log: log,
		lists: watchcache.NewSnapshots(listSnapshotTTL, listSnapshots)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// CreateToken implements kplanev1.ResourcesServer.
func (s *Server) CreateToken(ctx context.Context, req *kplanev1.CreateTokenRequest) (*kplanev1.CreateTokenResponse, error) {
	if s.tokens == nil {
		return nil, status.Error(codes.Unimplemented, "token requests are off: the apiserver has no --service-account-signing-key-file")
	}
	// The issuer reads the caches: catch them up so an account or pod
	// created just before is seen.
	if err := s.catchUp(ctx, "ServiceAccount", "Pod", "Secret"); err != nil {
		return nil, err
	}
	return s.tokens.CreateToken(ctx, req)
}

// catchUp waits until the caches of kinds show every write etcd
// acknowledged before the call.
func (s *Server) catchUp(ctx context.Context, kinds ...string) error {
	cur, err := s.store.CurrentRevision(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	for _, k := range kinds {
		if err := s.caches[k].WaitForRevision(wctx, cur); err != nil {
			return status.Errorf(codes.Unavailable, "%v", err)
		}
	}
	return nil
}

// admitPod refuses a pod naming a ServiceAccount that does not exist
// (spec.serviceAccountName defaults to "default").
func (s *Server) admitPod(ctx context.Context, obj *kplanev1.Object) error {
	p := obj.GetPod()
	if !s.requireServiceAccounts || p == nil {
		return nil
	}
	ns := p.GetMetadata().GetNamespace()
	if ns == "" {
		return nil // validation names the missing namespace
	}
	name := p.GetSpec().GetServiceAccountName()
	if name == "" {
		name = "default"
	}
	cache := s.caches["ServiceAccount"]
	if cache.Has(ns + "/" + name) {
		return nil
	}
	// Not cached: it may have been created a moment ago. Only then is the
	// cache caught up to etcd, so the common case costs no etcd read.
	if err := s.catchUp(ctx, "ServiceAccount"); err != nil {
		return err
	}
	if !cache.Has(ns + "/" + name) {
		return status.Errorf(codes.InvalidArgument, "spec.serviceAccountName: Invalid value: %q: service account %s/%s does not exist", name, ns, name)
	}
	return nil
}

// dryRun marks ctx for a dry run when the request asks for one.
func dryRun(ctx context.Context, dry bool) context.Context {
	if dry {
		return store.WithDryRun(ctx)
	}
	return ctx
}

func requireObject(obj *kplanev1.Object) error {
	if obj == nil {
		return status.Error(codes.InvalidArgument, "object: required")
	}
	return nil
}

// Create implements kplanev1.ResourcesServer.
func (s *Server) Create(ctx context.Context, req *kplanev1.CreateRequest) (*kplanev1.CreateResponse, error) {
	if err := requireObject(req.GetObject()); err != nil {
		return nil, err
	}
	if err := s.admitPod(ctx, req.GetObject()); err != nil {
		return nil, err
	}
	slot := replySlotOf(ctx)
	if slot == nil { // in process: the caller keeps its request
		obj, err := s.store.Create(dryRun(ctx, req.GetDryRun()), req.GetObject())
		if err != nil {
			return nil, err
		}
		return &kplanev1.CreateResponse{Object: obj}, nil
	}
	// A request that came over gRPC was decoded for this call alone, so
	// the store may take its object instead of copying it, and the reply
	// is sent as the object's stored bytes rather than encoded again.
	ctx, wire := store.WithWire(ctx)
	obj, err := s.store.CreateOwned(dryRun(ctx, req.GetDryRun()), req.GetObject())
	if err != nil {
		return nil, err
	}
	resp := &kplanev1.CreateResponse{Object: obj}
	slot.offerObject(resp, *wire)
	return resp, nil
}

// Get implements kplanev1.ResourcesServer.
func (s *Server) Get(ctx context.Context, req *kplanev1.GetRequest) (*kplanev1.GetResponse, error) {
	obj, err := s.store.Get(ctx, req.GetKind(), req.GetNamespace(), req.GetName())
	if err != nil {
		return nil, err
	}
	return &kplanev1.GetResponse{Object: obj}, nil
}

// List implements kplanev1.ResourcesServer. A List is served from the
// kind's watch cache once the cache has caught up to etcd's current
// revision (so it shows every write acknowledged before the List began,
// as a read of etcd would); the next pages of a paginated List read the
// same snapshot while it is kept (listSnapshotTTL), else etcd at the
// snapshot's revision, as does any List the cache cannot serve in time.
func (s *Server) List(ctx context.Context, req *kplanev1.ListRequest) (*kplanev1.ListResponse, error) {
	opts := store.ListOptions{
		Namespace:            req.GetNamespace(),
		LabelSelector:        req.GetLabelSelector(),
		FieldSelector:        req.GetFieldSelector(),
		Limit:                req.GetLimit(),
		Continue:             req.GetContinue(),
		ResourceVersion:      req.GetResourceVersion(),
		ResourceVersionMatch: req.GetResourceVersionMatch(),
	}
	// The watch cache serves the lists that ask for the current state (no
	// revision, or "0": any); a named revision or Exact reads etcd.
	if opts.ResourceVersionMatch == "" && (opts.ResourceVersion == "" || opts.ResourceVersion == "0") {
		if resp, ok, err := s.listFromCache(ctx, req.GetKind(), opts); ok || err != nil {
			return resp, err
		}
	}
	res, err := s.store.List(ctx, req.GetKind(), opts)
	if err != nil {
		return nil, err
	}
	return &kplanev1.ListResponse{
		Items:              res.Items,
		ResourceVersion:    store.FormatRevision(res.Revision),
		Continue:           res.Continue,
		RemainingItemCount: res.RemainingCount,
	}, nil
}

// listFromCache serves a List from the watch cache; ok is false when
// etcd must serve it (no cache, the cache is not loaded or did not catch
// up in time, or a continuation whose snapshot is no longer kept).
func (s *Server) listFromCache(ctx context.Context, kind string, opts store.ListOptions) (_ *kplanev1.ListResponse, ok bool, _ error) {
	k, filter, prefix, err := opts.Validate(kind)
	if err != nil {
		return nil, false, err
	}
	cache := s.caches[k.Name]
	if cache == nil {
		return nil, false, nil
	}
	select {
	case <-cache.Ready():
	default:
		return nil, false, nil
	}
	kindPrefix := store.KindPrefix(k)
	sel := k.Name + "\x00" + filter.Namespace + "\x00" + opts.LabelSelector + "\x00" + opts.FieldSelector
	var snap *watchcache.ListSnapshot
	start := ""
	now := time.Now()
	if opts.Continue != "" {
		rev, from, err := store.DecodeContinue(opts.Continue, prefix)
		if err != nil {
			return nil, false, err
		}
		if snap, ok = s.lists.Get(sel+"\x00"+strconv.FormatInt(rev, 10), now); !ok {
			return nil, false, nil // etcd at rev
		}
		start = strings.TrimPrefix(from, kindPrefix)
	} else {
		cur, err := s.store.CurrentRevision(ctx)
		if err != nil {
			return nil, false, err
		}
		wctx, cancel := context.WithTimeout(ctx, listCatchUpTimeout)
		err = cache.WaitForRevision(wctx, cur)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, false, status.FromContextError(ctx.Err()).Err()
			}
			s.log.Debug("watch cache behind etcd; listing from etcd", "kind", k.Name, "error", err)
			return nil, false, nil
		}
		snap = cache.Select(strings.TrimPrefix(prefix, kindPrefix), filter)
	}
	page, remaining := snap.Page(start, opts.Limit)
	resp := &kplanev1.ListResponse{ResourceVersion: store.FormatRevision(snap.Rev)}
	id := sel + "\x00" + strconv.FormatInt(snap.Rev, 10)
	if remaining > 0 {
		resp.Continue = store.EncodeContinue(snap.Rev, kindPrefix+page[len(page)-1].Key+"\x00")
		if filter.Empty() {
			resp.RemainingItemCount = int64(remaining)
		}
		if opts.Continue == "" {
			s.lists.Put(id, snap, now)
		}
	} else if opts.Continue != "" {
		s.lists.Drop(id)
	}
	// The items' bytes are the cache's, marshalled once for every List;
	// the objects are decoded only for a caller that reads the reply
	// itself (in process).
	if offerListWire(ctx, resp, page) {
		return resp, true, nil
	}
	resp.Items = make([]*kplanev1.Object, len(page))
	for i, e := range page {
		if resp.Items[i], err = e.Object(); err != nil {
			return nil, false, status.Errorf(codes.Internal, "list %s: %v", k.Name, err)
		}
	}
	return resp, true, nil
}

// Update implements kplanev1.ResourcesServer.
func (s *Server) Update(ctx context.Context, req *kplanev1.UpdateRequest) (*kplanev1.UpdateResponse, error) {
	if err := requireObject(req.GetObject()); err != nil {
		return nil, err
	}
	slot := replySlotOf(ctx)
	ctx, wire := withWireFor(ctx, slot)
	obj, err := s.store.Update(dryRun(ctx, req.GetDryRun()), req.GetObject())
	if err != nil {
		return nil, err
	}
	resp := &kplanev1.UpdateResponse{Object: obj}
	slot.offerObject(resp, *wire)
	return resp, nil
}

// UpdateStatus implements kplanev1.ResourcesServer.
func (s *Server) UpdateStatus(ctx context.Context, req *kplanev1.UpdateStatusRequest) (*kplanev1.UpdateStatusResponse, error) {
	if err := requireObject(req.GetObject()); err != nil {
		return nil, err
	}
	slot := replySlotOf(ctx)
	ctx, wire := withWireFor(ctx, slot)
	obj, err := s.store.UpdateStatus(dryRun(ctx, req.GetDryRun()), req.GetObject())
	if err != nil {
		return nil, err
	}
	resp := &kplanev1.UpdateStatusResponse{Object: obj}
	slot.offerObject(resp, *wire)
	return resp, nil
}

// Delete implements kplanev1.ResourcesServer.
func (s *Server) Delete(ctx context.Context, req *kplanev1.DeleteRequest) (*kplanev1.DeleteResponse, error) {
	obj, err := s.store.Delete(dryRun(ctx, req.GetDryRun()), req.GetKind(), req.GetNamespace(), req.GetName(), store.DeleteOptions{
		Preconditions:      req.GetPreconditions(),
		Propagation:        req.GetPropagationPolicy(),
		GracePeriodSeconds: req.GracePeriodSeconds,
	})
	if err != nil {
		return nil, err
	}
	return &kplanev1.DeleteResponse{Object: obj}, nil
}

// Watch implements kplanev1.ResourcesServer.
func (s *Server) Watch(req *kplanev1.WatchRequest, stream kplanev1.Resources_WatchServer) error {
	k, err := store.LookupKind(req.GetKind())
	if err != nil {
		return err
	}
	filter, err := store.NewFilter(k, req.GetNamespace(), req.GetLabelSelector(), req.GetFieldSelector())
	if err != nil {
		return err
	}
	rev, err := store.ParseRevision(req.GetResourceVersion())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	// send below sends the cache's bytes whenever it has them.
	opts := watchcache.WatchOptions{Filter: filter, FromRev: rev, Initial: rev == 0, EncodedOnly: true}
	if req.GetAllowBookmarks() {
		opts.BookmarkInterval = s.bookmarkInterval
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	cache := s.caches[k.Name]
	if opts.Initial {
		// The initial ADDED events must show every write acknowledged
		// before the watch began, so the cache first catches up to etcd.
		cur, err := s.store.CurrentRevision(ctx)
		if err != nil {
			return err
		}
		wctx, wcancel := context.WithTimeout(ctx, catchUpTimeout)
		err = cache.WaitForRevision(wctx, cur)
		wcancel()
		if err != nil {
			return status.Errorf(codes.Unavailable, "%v", err)
		}
	}
	stop := context.AfterFunc(s.shutdown, cancel)
	defer stop()
	var broken <-chan struct{}
	if s.watchBreak != nil {
		broken = s.watchBreak()
		go func() {
			select {
			case <-broken:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	send := func(r *kplanev1.WatchResponse, encoded []byte) error {
		if encoded != nil && r.Error == "" {
			return stream.SendMsg(encodeWatchResponse(r, encoded))
		}
		return stream.Send(r)
	}
	// The watch is established: headers go out now, so a client learns
	// that before the first event (REST clients wait for them).
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	err = cache.Watch(ctx, opts, send)
	if err == nil && s.shutdown.Err() != nil {
		return status.Error(codes.Unavailable, "apiserver shutting down; watch again from the last resourceVersion received")
	}
	if err == nil && isClosed(broken) {
		return status.Error(codes.Unavailable, "this apiserver's etcd member has no leader; watch again from the last resourceVersion received (another apiserver)")
	}
	return err
}

// GetScale implements kplanev1.ResourcesServer.
func (s *Server) GetScale(ctx context.Context, req *kplanev1.GetScaleRequest) (*kplanev1.GetScaleResponse, error) {
	sc, err := s.store.GetScale(ctx, req.GetKind(), req.GetNamespace(), req.GetName())
	if err != nil {
		return nil, err
	}
	return &kplanev1.GetScaleResponse{Scale: sc}, nil
}

// UpdateScale implements kplanev1.ResourcesServer.
func (s *Server) UpdateScale(ctx context.Context, req *kplanev1.UpdateScaleRequest) (*kplanev1.UpdateScaleResponse, error) {
	sc, err := s.store.UpdateScale(ctx, req.GetKind(), req.GetScale())
	if err != nil {
		return nil, err
	}
	return &kplanev1.UpdateScaleResponse{Scale: sc}, nil
}

// isClosed reports whether ch is closed (a nil channel never is).
func isClosed(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
