// Package store is the apiserver's one generic registry: it creates,
// reads, lists, updates and deletes objects of every kind in etcd, with
// optimistic concurrency on ModRevision. What differs between kinds lives
// in pkg/strategy (defaults, validation, update rules, and lifecycle hooks
// such as expiry and graceful deletion); the store only knows metadata,
// spec and status, and never tests a kind's name.
package store

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/apijson"
	"github.com/kplane/kplane/pkg/strategy"
)

// Options tune the store.
type Options struct {
	// MaxObjectBytes rejects larger objects before they reach etcd.
	MaxObjectBytes int
	// Lifecycle is the settings the kinds' lifecycle hooks read (the
	// Event TTL).
	Lifecycle strategy.Config
	Logger    hclog.Logger
	// Now is the clock for timestamps; time.Now when nil.
	Now func() time.Time
	// Cached, when set, returns a private copy of a stored object when a
	// cache (the watch cache) holds it at exactly revision rev. A
	// conditional update at rev starts from it instead of reading etcd;
	// the write's compare on the key's revision keeps that safe, and a
	// failed compare is retried from etcd.
	Cached func(k *kplanev1.KindInfo, namespace, name string, rev int64) (*kplanev1.Object, bool)
	// PriorityClasses, when set, returns every PriorityClass from a cache
	// (the watch cache) that has caught up to revision atLeast, or false.
	// Pod admission looks for the global default class on every pod
	// created; from the cache that reads no etcd (a range read per pod
	// was an eighth of a Create's cost).
	PriorityClasses func(atLeast int64) ([]*kplanev1.PriorityClass, bool)
	// KV is etcd's KV API behind the client, which the write transactions
	// call directly. A client without a connection of its own (the
	// embedded etcd's, in process) needs it; nil takes the client's
	// connection.
	KV pb.KVClient
}

// DefaultMaxObjectBytes stays under embedded etcd's default 1.5 MiB
// request limit, so the caller gets a clear error instead of etcd's.
const DefaultMaxObjectBytes = 1 << 20

// Store is the generic registry over etcd.
type Store struct {
	cli    *clientv3.Client
	kv     pb.KVClient // etcd's KV API, for the write transactions (etcdtxn.go)
	opts   Options
	log    hclog.Logger
	leases *leasePool
	// pcWritten is the revision of this store's latest write of a
	// PriorityClass: admission reads classes from Options.PriorityClasses
	// only once the cache shows it, so a class created through this
	// apiserver is seen by the next pod created through it.
	pcWritten atomic.Int64
}

// New returns a store over an etcd client.
func New(cli *clientv3.Client, opts Options) *Store {
	if opts.MaxObjectBytes <= 0 {
		opts.MaxObjectBytes = DefaultMaxObjectBytes
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Store{cli: cli, kv: kvOf(cli, opts.KV), opts: opts, log: opts.Logger, leases: newLeasePool(cli, opts.Now)}
}

// Client returns the etcd client (for the watch cache and compactor).
func (s *Store) Client() *clientv3.Client { return s.cli }

// maxUpdateRetries bounds the internal retries of writes that the client
// did not make conditional (no resourceVersion), on concurrent writers.
const maxUpdateRetries = 16

// CurrentRevision is etcd's current revision, read linearizably.
func (s *Store) CurrentRevision(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, registryRoot, clientv3.WithCountOnly(), clientv3.WithLimit(1))
	if err != nil {
		return 0, backendError(ctx, "read current revision", err)
	}
	return resp.Header.Revision, nil
}

// LookupKind resolves a kind name or returns InvalidArgument listing the known kinds.
func LookupKind(name string) (*kplanev1.KindInfo, error) {
	if name == "" {
		return nil, invalid("kind: required; known kinds: %s", strings.Join(kplanev1.KindNames(), ", "))
	}
	k := kplanev1.LookupKind(name)
	if k == nil {
		return nil, invalid("kind: %s", kplanev1.UnknownKindError(name))
	}
	return k, nil
}

// checkScope validates the namespace argument of a by-name request.
func checkScope(k *kplanev1.KindInfo, namespace, name string) error {
	if name == "" {
		return invalid("name: required")
	}
	if k.Namespaced && namespace == "" {
		return invalid("namespace: required for namespaced kind %s", k.Name)
	}
	if !k.Namespaced && namespace != "" {
		return invalid("namespace: must be empty for cluster-scoped kind %s", k.Name)
	}
	return nil
}

func objectOf(obj *kplanev1.Object) (*kplanev1.KindInfo, *kplanev1.ObjectMeta, error) {
	k := obj.Info()
	if k == nil {
		return nil, nil, invalid("object: exactly one kind must be set; known kinds: %s", strings.Join(kplanev1.KindNames(), ", "))
	}
	return k, obj.Meta(), nil
}

// Create stores a new object. See DESIGN.md "The API".
func (s *Store) Create(ctx context.Context, obj *kplanev1.Object) (*kplanev1.Object, error) {
	k, _, err := objectOf(obj)
	if err != nil {
		return nil, err
	}
	return s.create(ctx, k, proto.Clone(obj).(*kplanev1.Object))
}

// CreateOwned is Create for a caller that hands obj over (a request
// decoded for this call alone): obj is changed and returned instead of
// copied.
func (s *Store) CreateOwned(ctx context.Context, obj *kplanev1.Object) (*kplanev1.Object, error) {
	k, _, err := objectOf(obj)
	if err != nil {
		return nil, err
	}
	return s.create(ctx, k, obj)
}

func (s *Store) create(ctx context.Context, k *kplanev1.KindInfo, obj *kplanev1.Object) (*kplanev1.Object, error) {
	meta := obj.Meta()
	if meta.ResourceVersion != "" {
		return nil, invalid("metadata.resourceVersion: must not be set on create")
	}
	if !k.Namespaced {
		// Kubernetes ignores a namespace sent with a cluster-scoped object.
		meta.Namespace = ""
	}
	// The uid comes first so that defaulting may derive from it (a Job's
	// generated selector requires its controller-uid label).
	meta.Uid = uuid.NewString()
	strat := strategy.For(k.Name)
	if p, ok := strat.(interface{ PrepareForCreate(*kplanev1.Object) }); ok {
		p.PrepareForCreate(obj)
	}
	strat.Default(obj)
	// Validate before generating a name, so the generateName prefix is
	// checked as written; a generated suffix keeps a valid prefix valid.
	generate := meta.Name == "" && meta.GenerateName != ""
	if generate {
		meta.Name = meta.GenerateName + "xxxxx"
	}
	if errs := strat.Validate(obj); len(errs) > 0 {
		return nil, invalidObject(k.Name, displayName(meta, generate), errs)
	}
	if err := s.admit(ctx, obj, displayName(meta, generate), true); err != nil {
		return nil, err
	}
	now := s.opts.Now()
	meta.CreationTimestamp = timestamppb.New(now)
	meta.DeletionTimestamp = nil
	meta.DeletionGracePeriodSeconds = nil
	meta.Generation = 1

	pk := newPicker(ctx, s.cli)
	for attempt, races := 0, 0; ; {
		if generate {
			meta.Name = meta.GenerateName + randomSuffix()
		}
		try := obj
		if allocatorFor(k) != nil {
			try = proto.Clone(obj).(*kplanev1.Object)
			if err := s.allocate(k, try, nil, pk); err != nil {
				return nil, err
			}
		}
		out, err := s.createOnce(ctx, k, try, pk)
		if errors.Is(err, errClaimRace) && races < maxAllocationAttempts {
			races++
			continue // a picked value was taken meanwhile; pick again
		}
		if generate && status.Code(err) == codes.AlreadyExists && attempt < 8 {
			attempt++
			continue // a generated name collided; draw another
		}
		if errors.Is(err, errClaimRace) {
			return nil, status.Errorf(codes.Aborted, "%s %q: every value picked was taken by concurrent writers; try again", k.Name, meta.Name)
		}
		return out, err
	}
}

func displayName(meta *kplanev1.ObjectMeta, generated bool) string {
	if generated {
		return meta.GenerateName
	}
	return meta.Name
}

func (s *Store) createOnce(ctx context.Context, k *kplanev1.KindInfo, obj *kplanev1.Object, pk *picker) (*kplanev1.Object, error) {
	meta := obj.Meta()
	key := ObjectKey(k, meta.Namespace, meta.Name)
	value, err := s.encodeChecked(obj)
	if err != nil {
		return nil, err
	}
	lease, err := s.leaseFor(ctx, k, obj)
	if err != nil {
		return nil, err
	}
	// The values the object holds are reserved in the same transaction.
	claims := newClaimTxn(claimsOf(k, obj), nil, holderOf(obj))
	cmps := make([]*pb.Compare, 0, 2+len(claims.cmps))
	cmps = append(cmps, createdIs(key, pb.Compare_EQUAL, 0))
	if k.Namespaced {
		// The namespace must exist in the same transaction, so an object
		// can never be created into a namespace being deleted.
		cmps = append(cmps, createdIs(ObjectKey(namespaceKind(), "", meta.Namespace), pb.Compare_GREATER, 0))
	}
	cmps = append(cmps, claims.cmps...)
	// etcd keeps its own copy of value (raft's log entry): after the
	// transaction the bytes are the store's again, for the reply.
	resp, err := s.commit(ctx, cmps, append([]*pb.RequestOp{opPut(key, value, lease)}, claims.ops...),
		append([]*pb.RequestOp{opCount(key)}, claims.checks...))
	if err != nil {
		return nil, backendError(ctx, "create", err)
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().Count > 0 {
			return nil, status.Errorf(codes.AlreadyExists, "%s %q already exists", k.Name, obj.Key())
		}
		if err := claims.failure(k, obj, resp, 1, pk); err != nil {
			return nil, err
		}
		return nil, status.Errorf(codes.NotFound, "namespace %q not found", meta.Namespace)
	}
	if isDryRun(ctx) {
		return obj, nil // never stored: no resourceVersion
	}
	meta.ResourceVersion = FormatRevision(resp.Header.Revision)
	leaveWire(ctx, value, resp.Header.Revision)
	return obj, nil
}

// leaseFor is the expiring lease an object of a kind that expires
// (strategy.Expirer) is stored with; NoLease for every other.
func (s *Store) leaseFor(ctx context.Context, k *kplanev1.KindInfo, obj *kplanev1.Object) (clientv3.LeaseID, error) {
	exp, ok := strategy.For(k.Name).(strategy.Expirer)
	if !ok || isDryRun(ctx) {
		return clientv3.NoLease, nil // a dry run stores nothing to expire
	}
	ttl := exp.TTL(obj, s.opts.Lifecycle)
	if ttl <= 0 {
		return clientv3.NoLease, nil
	}
	lease, err := s.leases.get(ctx, ttl)
	if err != nil {
		return clientv3.NoLease, backendError(ctx, "grant "+k.Name+" lease", err)
	}
	return lease, nil
}

// namespaceKind is the kind whose objects are namespaces.
func namespaceKind() *kplanev1.KindInfo {
	return kplanev1.LookupKind(strategy.NamespaceKind())
}

func (s *Store) encodeChecked(obj *kplanev1.Object) ([]byte, error) {
	// Store timestamps at the precision JSON shows them (Time to the
	// second, MicroTime to the microsecond), as Kubernetes does, so that
	// an object read as JSON and written back is unchanged.
	apijson.TruncateTimes(obj)
	value, err := Encode(obj)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if len(value) > s.opts.MaxObjectBytes {
		return nil, invalid("%s %q is too large: %d bytes encoded, the limit is %d", obj.KindName(), obj.Meta().Name, len(value), s.opts.MaxObjectBytes)
	}
	return value, nil
}

// Get reads one object with a linearizable read.
func (s *Store) Get(ctx context.Context, kind, namespace, name string) (*kplanev1.Object, error) {
	k, err := LookupKind(kind)
	if err != nil {
		return nil, err
	}
	if err := checkScope(k, namespace, name); err != nil {
		return nil, err
	}
	obj, _, err := s.get(ctx, k, namespace, name)
	return obj, err
}

func (s *Store) get(ctx context.Context, k *kplanev1.KindInfo, namespace, name string) (*kplanev1.Object, int64, error) {
	resp, err := s.cli.Get(ctx, ObjectKey(k, namespace, name))
	if err != nil {
		return nil, 0, backendError(ctx, "get", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, notFound(k.Name, namespace, name)
	}
	kv := resp.Kvs[0]
	obj, err := Decode(kv.Value, kv.ModRevision)
	if err != nil {
		return nil, 0, status.Errorf(codes.Internal, "%s %q: %v", k.Name, name, err)
	}
	return obj, kv.ModRevision, nil
}

// Update writes metadata and spec; status is kept from the stored object.
func (s *Store) Update(ctx context.Context, in *kplanev1.Object) (*kplanev1.Object, error) {
	return s.update(ctx, in, false)
}

// UpdateStatus writes status only.
func (s *Store) UpdateStatus(ctx context.Context, in *kplanev1.Object) (*kplanev1.Object, error) {
	return s.update(ctx, in, true)
}

func (s *Store) update(ctx context.Context, in *kplanev1.Object, statusOnly bool) (*kplanev1.Object, error) {
	k, inMeta, err := objectOf(in)
	if err != nil {
		return nil, err
	}
	if !k.Namespaced {
		inMeta = proto.Clone(inMeta).(*kplanev1.ObjectMeta)
		inMeta.Namespace = ""
	}
	if err := checkScope(k, inMeta.Namespace, inMeta.Name); err != nil {
		return nil, err
	}
	if statusOnly && !k.HasStatus() {
		return nil, invalid("kind %s has no status; use Update", k.Name)
	}
	wantRev, err := ParseRevision(inMeta.ResourceVersion)
	if err != nil {
		return nil, invalid("metadata.%v", err)
	}
	pk := newPicker(ctx, s.cli)
	tryCache := wantRev != 0 && s.opts.Cached != nil
	for attempt, races := 0, 0; ; attempt++ {
		cur, curRev, fromCache := s.cachedAt(k, inMeta.Namespace, inMeta.Name, wantRev, tryCache)
		tryCache = false
		if !fromCache {
			if cur, curRev, err = s.get(ctx, k, inMeta.Namespace, inMeta.Name); err != nil {
				return nil, err
			}
		}
		if wantRev != 0 && wantRev != curRev {
			return nil, conflict(k.Name, inMeta.Name, fmt.Sprintf("the object has been modified (resourceVersion %d, stored %d)", wantRev, curRev))
		}
		if inMeta.Uid != "" && inMeta.Uid != cur.Meta().Uid {
			return nil, conflict(k.Name, inMeta.Name, fmt.Sprintf("uid %s does not match the stored object's %s", inMeta.Uid, cur.Meta().Uid))
		}
		var next *kplanev1.Object
		if statusOnly {
			next, err = s.prepareStatusUpdate(k, in, cur)
		} else {
			next, err = s.prepareUpdate(k, in, cur, wantRev != 0, pk)
		}
		if err != nil {
			return nil, err
		}
		if proto.Equal(next, cur) {
			return cur, nil // nothing changed: no write, no new revision
		}
		if !statusOnly {
			if err := s.admit(ctx, next, next.Meta().GetName(), false); err != nil {
				return nil, err
			}
		}
		out, err := s.commitUpdate(ctx, k, next, cur, curRev, pk)
		if errors.Is(err, errClaimRace) {
			if races++; races < maxAllocationAttempts {
				attempt--
				continue // a picked value was taken meanwhile; pick again
			}
			return nil, status.Errorf(codes.Aborted, "%s %q: every value picked was taken by concurrent writers; try again", k.Name, inMeta.Name)
		}
		if status.Code(err) == codes.Aborted && fromCache {
			attempt--
			continue // the cache was behind etcd: decide again from etcd's copy
		}
		if status.Code(err) == codes.Aborted && wantRev == 0 && attempt < maxUpdateRetries {
			continue // unconditional update raced another writer: reapply
		}
		return out, err
	}
}

// cachedAt returns a private copy of the cached object when try is set
// and the cache holds it at exactly rev: the state a conditional update
// at rev must start from. The etcd read it saves was half of an
// update's cost at 100,000 pods.
func (s *Store) cachedAt(k *kplanev1.KindInfo, namespace, name string, rev int64, try bool) (*kplanev1.Object, int64, bool) {
	if !try {
		return nil, 0, false
	}
	obj, ok := s.opts.Cached(k, namespace, name, rev)
	if !ok {
		return nil, 0, false
	}
	return obj, rev, true
}

// prepareUpdate builds the object an Update would store: the caller's
// metadata and spec over the stored status and server-owned fields.
func (s *Store) prepareUpdate(k *kplanev1.KindInfo, in, cur *kplanev1.Object, conditional bool, pk *picker) (*kplanev1.Object, error) {
	next := proto.Clone(in).(*kplanev1.Object)
	apijson.TruncateTimes(next) // compare with cur at the stored precision
	meta, curMeta := next.Meta(), cur.Meta()
	if k.HasStatus() {
		// Status belongs to UpdateStatus. A conditional Update carries the
		// status its caller read; a different one is a deliberate change
		// that would be lost silently, so it is refused.
		if conditional && !proto.Equal(statusOf(next), statusOf(cur)) && !isEmptyMessage(statusOf(next)) {
			return nil, invalid("%s %q: status: may not be changed by Update; use UpdateStatus", k.Name, curMeta.Name)
		}
		setStatus(next, statusOf(cur))
	}
	if !k.Namespaced {
		meta.Namespace = ""
	}
	if curMeta.DeletionTimestamp != nil {
		for _, f := range meta.Finalizers {
			if !contains(curMeta.Finalizers, f) {
				return nil, invalid("%s %q is invalid: metadata.finalizers: no new finalizers can be added while the object is being deleted (%q)", k.Name, curMeta.Name, f)
			}
		}
	}
	meta.Uid = curMeta.Uid
	meta.CreationTimestamp = curMeta.CreationTimestamp
	meta.DeletionTimestamp = curMeta.DeletionTimestamp
	meta.DeletionGracePeriodSeconds = curMeta.DeletionGracePeriodSeconds
	meta.GenerateName = curMeta.GenerateName
	meta.ResourceVersion = curMeta.ResourceVersion
	meta.Generation = curMeta.Generation

	strat := strategy.For(k.Name)
	strat.Default(next)
	alloc := allocatorFor(k)
	if alloc != nil {
		alloc.KeepAllocated(next, cur)
	}
	if errs := strat.Validate(next); len(errs) > 0 {
		return nil, invalidObject(k.Name, meta.Name, errs)
	}
	if errs := strat.ValidateUpdate(next, cur); len(errs) > 0 {
		return nil, invalidObject(k.Name, meta.Name, errs)
	}
	if err := s.allocate(k, next, cur, pk); err != nil {
		return nil, err
	}
	if !proto.Equal(specOf(next), specOf(cur)) {
		meta.Generation = curMeta.Generation + 1
	}
	return next, nil
}

// prepareStatusUpdate builds the object an UpdateStatus would store: the
// stored object with the caller's status.
func (s *Store) prepareStatusUpdate(k *kplanev1.KindInfo, in, cur *kplanev1.Object) (*kplanev1.Object, error) {
	next := proto.Clone(cur).(*kplanev1.Object)
	setStatus(next, statusOf(in))
	apijson.TruncateTimes(next) // compare with cur at the stored precision
	// Defaulting runs on status writes too, as in Kubernetes (it keeps
	// podIP and podIPs in step).
	strat := strategy.For(k.Name)
	strat.Default(next)
	if errs := strat.Validate(next); len(errs) > 0 {
		return nil, invalidObject(k.Name, next.Meta().Name, errs)
	}
	return next, nil
}

// commitUpdate writes next if the key is still at curRev. An object being
// deleted whose last finalizer is gone is deleted instead, as in Kubernetes
// (by the same rules as a Delete: a namespace only when it is empty).
// cur is the stored object at curRev; the values it holds and next does
// not are released, those next holds and it did not are reserved, in the
// same transaction (pk, when not nil, picked some of them).
func (s *Store) commitUpdate(ctx context.Context, k *kplanev1.KindInfo, next, cur *kplanev1.Object, curRev int64, pk *picker) (*kplanev1.Object, error) {
	meta := next.Meta()
	key := ObjectKey(k, meta.Namespace, meta.Name)
	held := claimsOf(k, cur)
	if meta.DeletionTimestamp != nil && len(meta.Finalizers) == 0 && !awaitingGracefulDeletion(k, next) {
		return s.remove(ctx, k, next, curRev, held)
	}
	value, err := s.encodeChecked(next)
	if err != nil {
		return nil, err
	}
	lease, err := s.leaseFor(ctx, k, next)
	if err != nil {
		return nil, err
	}
	add, drop := diffClaims(claimsOf(k, next), held)
	claims := newClaimTxn(add, drop, holderOf(next))
	cmps := append([]*pb.Compare{modifiedAt(key, curRev)}, claims.cmps...)
	resp, err := s.commit(ctx, cmps, append([]*pb.RequestOp{opPut(key, value, lease)}, claims.ops...), claims.checks)
	if err != nil {
		return nil, backendError(ctx, "update", err)
	}
	if !resp.Succeeded {
		if err := claims.failure(k, next, resp, 0, pk); err != nil {
			return nil, err
		}
		return nil, conflict(k.Name, meta.Name, "the object has been modified")
	}
	if isDryRun(ctx) {
		meta.ResourceVersion = FormatRevision(curRev) // still the stored one
		return next, nil
	}
	meta.ResourceVersion = FormatRevision(resp.Header.Revision)
	leaveWire(ctx, value, resp.Header.Revision)
	return next, nil
}

// deleteAt removes the key if it is still at rev and returns the last
// state stamped with the deletion's revision.
// The values in held (the stored object's claims) are released in the
// same transaction.
func (s *Store) deleteAt(ctx context.Context, k *kplanev1.KindInfo, last *kplanev1.Object, rev int64, held []strategy.Claim) (*kplanev1.Object, error) {
	meta := last.Meta()
	key := ObjectKey(k, meta.Namespace, meta.Name)
	ops := []*pb.RequestOp{opDelete(key)}
	for _, c := range held {
		ops = append(ops, releaseOp(claimKey(c), holderOf(last)))
	}
	resp, err := s.commit(ctx, []*pb.Compare{modifiedAt(key, rev)}, ops, nil)
	if err != nil {
		return nil, backendError(ctx, "delete", err)
	}
	if !resp.Succeeded {
		return nil, conflict(k.Name, meta.Name, "the object has been modified")
	}
	// Report the deletion's revision, as the watch's DELETED event does
	// (a dry run's object keeps its stored one).
	out := proto.Clone(last).(*kplanev1.Object)
	if !isDryRun(ctx) {
		out.Meta().ResourceVersion = FormatRevision(resp.Header.Revision)
	}
	return out, nil
}

// specOf returns what a generation counts: the spec field, or for kinds
// without one (Secret, Event, ...) everything but metadata.
func specOf(obj *kplanev1.Object) proto.Message {
	m := obj.Message().ProtoReflect()
	if f := m.Descriptor().Fields().ByName("spec"); f != nil {
		if !m.Has(f) {
			return nil
		}
		return m.Get(f).Message().Interface()
	}
	c := proto.Clone(obj.Message())
	c.ProtoReflect().Clear(c.ProtoReflect().Descriptor().Fields().ByName("metadata"))
	return c
}

func statusOf(obj *kplanev1.Object) proto.Message {
	m := obj.Message().ProtoReflect()
	f := m.Descriptor().Fields().ByName("status")
	if f == nil || !m.Has(f) {
		return nil
	}
	return m.Get(f).Message().Interface()
}

func setStatus(obj *kplanev1.Object, st proto.Message) {
	m := obj.Message().ProtoReflect()
	f := m.Descriptor().Fields().ByName("status")
	if f == nil {
		return
	}
	if st == nil {
		m.Clear(f)
		return
	}
	m.Set(f, protoreflect.ValueOfMessage(proto.Clone(st).ProtoReflect()))
}

func isEmptyMessage(m proto.Message) bool {
	return m == nil || proto.Size(m) == 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

const suffixAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// randomSuffix is five characters from an alphabet without vowels (no
// accidental words) and without look-alikes, as Kubernetes does.
func randomSuffix() string {
	var b [5]byte
	for i := range b {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(suffixAlphabet))))
		if err != nil {
			panic(fmt.Sprintf("crypto/rand failed: %v", err))
		}
		b[i] = suffixAlphabet[n.Int64()]
	}
	return string(b[:])
}
