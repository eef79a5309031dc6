package store

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/strategy"
)

// Allocations (strategy.Allocator): every value an object holds from a
// range is one etcd key, /registry/allocations/<pool>/<value>, whose
// value names the holder ("<Kind> <namespace/name> <uid>"). The key is
// created in the object's own create or update transaction, on the
// condition that it does not exist, and deleted in the transaction that
// deletes the object or drops the value. Two objects can therefore never
// hold one value: the second transaction fails as a whole. Values are
// picked at random from the pool, avoiding those a failed transaction
// showed taken; after a few such misses the picker reads the pool's keys
// and picks among the free ones, which also detects a full pool.

// allocationsRoot is the prefix of every allocation key.
const allocationsRoot = registryRoot + "allocations/"

// maxAllocationAttempts bounds the transactions one write makes while
// picked values turn out to be taken by concurrent writers.
const maxAllocationAttempts = 64

// scanAfterMisses is how many picked values may turn out taken before
// the picker reads the whole pool instead of guessing.
const scanAfterMisses = 4

// errClaimRace means a picked value was taken by another object: the
// write is prepared again with fresh picks.
var errClaimRace = errors.New("a picked value is taken")

func claimKey(c strategy.Claim) string { return allocationsRoot + c.Pool + "/" + c.Value }

// holderOf is the value of the allocation keys obj holds.
func holderOf(obj *kplanev1.Object) string {
	return obj.KindName() + " " + obj.Key() + " " + obj.Meta().GetUid()
}

func allocatorFor(k *kplanev1.KindInfo) strategy.Allocator {
	a, _ := strategy.For(k.Name).(strategy.Allocator)
	return a
}

// claimsOf lists obj's claims, none for kinds without allocations.
func claimsOf(k *kplanev1.KindInfo, obj *kplanev1.Object) []strategy.Claim {
	if a := allocatorFor(k); a != nil && obj != nil {
		return a.Claims(obj)
	}
	return nil
}

// diffClaims returns the claims of want not in held, and of held not in want.
func diffClaims(want, held []strategy.Claim) (add, drop []strategy.Claim) {
	in := func(list []strategy.Claim, c strategy.Claim) bool {
		for _, x := range list {
			if claimKey(x) == claimKey(c) {
				return true
			}
		}
		return false
	}
	for _, c := range want {
		if !in(held, c) {
			add = append(add, c)
		}
	}
	for _, c := range held {
		if !in(want, c) {
			drop = append(drop, c)
		}
	}
	return add, drop
}

// claimTxn is what a write adds to its transaction for its claims.
type claimTxn struct {
	add  []strategy.Claim
	cmps []*pb.Compare   // each added key is absent
	ops  []*pb.RequestOp // puts of added keys, guarded deletes of dropped ones
	// checks read the added keys when the transaction fails, to tell
	// which one was taken.
	checks []*pb.RequestOp
}

func newClaimTxn(add, drop []strategy.Claim, holder string) claimTxn {
	t := claimTxn{add: add}
	for _, c := range add {
		key := claimKey(c)
		t.cmps = append(t.cmps, createdIs(key, pb.Compare_EQUAL, 0))
		t.ops = append(t.ops, opPut(key, []byte(holder), clientv3.NoLease))
		t.checks = append(t.checks, opCount(key))
	}
	for _, c := range drop {
		t.ops = append(t.ops, releaseOp(claimKey(c), holder))
	}
	return t
}

// releaseOp deletes an allocation key only while holder holds it, so a
// stale release can never free another object's value.
func releaseOp(key, holder string) *pb.RequestOp {
	return opIf([]*pb.Compare{valueIs(key, holder)}, opDelete(key))
}

// failure interprets the Else responses (from offset on, in checks
// order) of a failed transaction: a field error for a user-given value
// that is held, errClaimRace when only picked values were, nil when no
// added key exists (the transaction failed for another reason).
func (t claimTxn) failure(k *kplanev1.KindInfo, obj *kplanev1.Object, resp *clientv3.TxnResponse, offset int, pk *picker) error {
	alloc := allocatorFor(k)
	var errs []string
	race := false
	for i, c := range t.add {
		if resp.Responses[offset+i].GetResponseRange().GetCount() == 0 {
			continue
		}
		key := claimKey(c)
		if pk != nil && pk.picked[key] {
			pk.taken(key)
			race = true
			continue
		}
		errs = append(errs, alloc.AlreadyAllocated(c).Error())
	}
	switch {
	case len(errs) > 0:
		return status.Errorf(codes.InvalidArgument, "%s %q is invalid: %s", k.Name, obj.Meta().GetName(), strings.Join(errs, "; "))
	case race:
		return errClaimRace
	}
	return nil
}

// picker implements strategy.Picker for one write, across its attempts.
type picker struct {
	ctx context.Context
	cli *clientv3.Client
	// avoid holds keys known to be held; picked the keys picked in the
	// current attempt.
	avoid, picked map[string]bool
	misses        int
	scanned       map[string]bool // pools whose keys were all read into avoid
	err           error           // a storage error while scanning
}

func newPicker(ctx context.Context, cli *clientv3.Client) *picker {
	return &picker{ctx: ctx, cli: cli, avoid: map[string]bool{}, scanned: map[string]bool{}}
}

// attempt starts a new try: nothing is picked yet.
func (p *picker) attempt() { p.picked = map[string]bool{} }

func (p *picker) taken(key string) {
	p.avoid[key] = true
	p.misses++
}

// Pick implements strategy.Picker.
func (p *picker) Pick(pool strategy.Pool) (string, error) {
	size := pool.Size()
	if size == 0 {
		return "", fmt.Errorf("%w: %s holds no value", strategy.ErrPoolFull, pool)
	}
	prefix := allocationsRoot + pool.Name() + "/"
	if p.misses >= scanAfterMisses && !p.scanned[pool.Name()] {
		resp, err := p.cli.Get(p.ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			p.err = backendError(p.ctx, "read allocations of "+pool.Name(), err)
			return "", p.err
		}
		for _, kv := range resp.Kvs {
			p.avoid[string(kv.Key)] = true
		}
		p.scanned[pool.Name()] = true
	}
	n, err := rand.Int(rand.Reader, new(big.Int).SetUint64(size))
	if err != nil {
		return "", fmt.Errorf("draw a random value: %w", err)
	}
	start := n.Uint64()
	// Linear probing from a random start: O(1) while the pool has room,
	// and a full pass proves it full once its keys have been read.
	for i := uint64(0); i < size; i++ {
		v := pool.At((start + i) % size)
		key := prefix + v
		if !p.avoid[key] && !p.picked[key] {
			p.picked[key] = true
			return v, nil
		}
		if !p.scanned[pool.Name()] && i > 64 {
			break // guessing blindly in a crowded pool: read it first
		}
	}
	if !p.scanned[pool.Name()] {
		p.misses = scanAfterMisses
		return p.Pick(pool)
	}
	return "", fmt.Errorf("%w: every value of %s is allocated", strategy.ErrPoolFull, pool)
}

// allocate runs the kind's Allocator on obj (which it fills); a nil
// error for kinds without one.
// old is the stored object on update, nil on create.
func (s *Store) allocate(k *kplanev1.KindInfo, obj, old *kplanev1.Object, pk *picker) error {
	alloc := allocatorFor(k)
	if alloc == nil {
		return nil
	}
	pk.attempt()
	errs, err := alloc.Allocate(obj, old, s.opts.Lifecycle, pk)
	switch {
	case pk.err != nil:
		return pk.err
	case errors.Is(err, strategy.ErrPoolFull):
		return status.Errorf(codes.ResourceExhausted, "%s %q: %v", k.Name, obj.Meta().GetName(), err)
	case err != nil:
		return status.Errorf(codes.Internal, "%s %q: %v", k.Name, obj.Meta().GetName(), err)
	case len(errs) > 0:
		return invalidObject(k.Name, obj.Meta().GetName(), errs)
	}
	return nil
}

// RepairReport is what RepairAllocations found and did.
type RepairReport struct {
	// Freed are allocation keys no object held; they were deleted.
	Freed []string
	// Recorded are values objects held without a key (written before
	// allocations were recorded, or by hand); the keys were written.
	Recorded []string
	// Conflicts are values more than one object holds, or whose key
	// names another holder; they are left as they are and reported.
	Conflicts []string
}

// RepairAllocations reconciles allocation keys with the objects that
// hold values, in one consistent snapshot: a key no object holds is
// deleted (only if unchanged since the snapshot), a held value without a
// key gets one (only if the object is unchanged and the key still
// absent). Run on start and periodically.
func (s *Store) RepairAllocations(ctx context.Context) (RepairReport, error) {
	var rep RepairReport
	rev, err := s.CurrentRevision(ctx)
	if err != nil {
		return rep, err
	}
	wanted := map[string][]claimHolder{}
	for _, k := range kplanev1.Kinds() {
		if allocatorFor(k) == nil {
			continue
		}
		resp, err := s.cli.Get(ctx, KindPrefix(k), clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			return rep, backendError(ctx, "list "+k.Name+" for allocation repair", err)
		}
		for _, kv := range resp.Kvs {
			obj, err := Decode(kv.Value, kv.ModRevision)
			if err != nil {
				return rep, status.Errorf(codes.Internal, "allocation repair: %s: %v", kv.Key, err)
			}
			for _, c := range claimsOf(k, obj) {
				key := claimKey(c)
				wanted[key] = append(wanted[key], claimHolder{obj: obj, objKey: string(kv.Key), rev: kv.ModRevision})
			}
		}
	}
	resp, err := s.cli.Get(ctx, allocationsRoot, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return rep, backendError(ctx, "list allocations", err)
	}
	have := map[string]bool{}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		have[key] = true
		hs := wanted[key]
		switch {
		case len(hs) == 0:
			r, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
				Then(clientv3.OpDelete(key)).Commit()
			if err != nil {
				return rep, backendError(ctx, "free allocation", err)
			}
			if r.Succeeded {
				rep.Freed = append(rep.Freed, key)
			}
		case len(hs) > 1 || string(kv.Value) != holderOf(hs[0].obj):
			rep.Conflicts = append(rep.Conflicts, fmt.Sprintf("%s: held by %q, claimed by %s", key, kv.Value, holderNames(hs)))
		}
	}
	for key, hs := range wanted {
		if have[key] {
			continue
		}
		if len(hs) > 1 {
			rep.Conflicts = append(rep.Conflicts, fmt.Sprintf("%s: claimed by %s", key, holderNames(hs)))
			continue
		}
		h := hs[0]
		r, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
			clientv3.Compare(clientv3.ModRevision(h.objKey), "=", h.rev),
		).Then(clientv3.OpPut(key, holderOf(h.obj))).Commit()
		if err != nil {
			return rep, backendError(ctx, "record allocation", err)
		}
		if r.Succeeded {
			rep.Recorded = append(rep.Recorded, key+" for "+h.obj.KindName()+" "+h.obj.Key())
		}
	}
	sort.Strings(rep.Freed)
	sort.Strings(rep.Recorded)
	sort.Strings(rep.Conflicts)
	return rep, nil
}

// claimHolder is an object that holds a value, as repair saw it.
type claimHolder struct {
	obj    *kplanev1.Object
	objKey string
	rev    int64
}

func holderNames(hs []claimHolder) string {
	names := make([]string, 0, len(hs))
	for _, h := range hs {
		names = append(names, h.obj.KindName()+" "+h.obj.Key())
	}
	return strings.Join(names, ", ")
}
