package leaderelection

import (
	"context"
	"fmt"
	"math"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// leaseKind is the kind name of Lease objects in the Resources API.
const leaseKind = "Lease"

// leaseSeconds converts a duration to the whole seconds a Lease records,
// rounding up so that others never wait less than asked.
func leaseSeconds(d time.Duration) int32 {
	return int32(math.Ceil(d.Seconds()))
}

func (e *Elector) getLease(ctx context.Context) (*kplanev1.Lease, error) {
	resp, err := e.cfg.Client.Get(ctx, &kplanev1.GetRequest{
		Kind:      leaseKind,
		Namespace: e.cfg.Namespace,
		Name:      e.cfg.Name,
	})
	if err != nil {
		return nil, err
	}
	l := resp.GetObject().GetLease()
	if l == nil {
		return nil, fmt.Errorf("get lease %s: response holds %q, not a Lease", e.key(), resp.GetObject().KindName())
	}
	return l, nil
}

func (e *Elector) createLease(ctx context.Context, spec *kplanev1.LeaseSpec) (*kplanev1.Lease, error) {
	l := &kplanev1.Lease{
		Metadata: &kplanev1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name},
		Spec:     spec,
	}
	resp, err := e.cfg.Client.Create(ctx, &kplanev1.CreateRequest{Object: kplanev1.MustWrap(l)})
	if err != nil {
		return nil, err
	}
	return leaseOf(resp.GetObject(), "create")
}

// updateLease writes spec over the lease last read as old, as a
// compare-and-swap on old's resourceVersion: Aborted means someone else
// wrote in between.
func (e *Elector) updateLease(ctx context.Context, old *kplanev1.Lease, spec *kplanev1.LeaseSpec) (*kplanev1.Lease, error) {
	l := proto.Clone(old).(*kplanev1.Lease)
	l.Spec = spec
	if l.GetMetadata().GetResourceVersion() == "" {
		// Without a resourceVersion the server would overwrite blindly.
		return nil, fmt.Errorf("update lease %s: no resourceVersion to compare", e.key())
	}
	resp, err := e.cfg.Client.Update(ctx, &kplanev1.UpdateRequest{Object: kplanev1.MustWrap(l)})
	if err != nil {
		return nil, err
	}
	return leaseOf(resp.GetObject(), "update")
}

func leaseOf(o *kplanev1.Object, op string) (*kplanev1.Lease, error) {
	l := o.GetLease()
	if l == nil {
		return nil, fmt.Errorf("%s lease: response holds %q, not a Lease", op, o.KindName())
	}
	return l, nil
}

// holderSpec is the spec with which this candidate holds the lease at now,
// continuing old (nil when the lease does not exist yet).
func (e *Elector) holderSpec(old *kplanev1.LeaseSpec, now time.Time) *kplanev1.LeaseSpec {
	spec := &kplanev1.LeaseSpec{
		HolderIdentity:       e.cfg.Identity,
		LeaseDurationSeconds: leaseSeconds(e.cfg.LeaseDuration),
		AcquireTime:          timestamppb.New(now),
		RenewTime:            timestamppb.New(now),
	}
	if old == nil {
		return spec
	}
	spec.LeaseTransitions = old.GetLeaseTransitions()
	if old.GetHolderIdentity() == e.cfg.Identity {
		spec.AcquireTime = old.GetAcquireTime()
	} else {
		spec.LeaseTransitions++
	}
	return spec
}
