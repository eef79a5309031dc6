package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/disruption"
	"github.com/kplane/kplane/services/apiserver/internal/store"
)

// evictConflictRetries bounds how often an eviction rereads a budget
// whose status another writer (the controller, another eviction) changed
// between the read and the compare-and-swap.
const evictConflictRetries = 10

// Evict implements kplanev1.ResourcesServer: Kubernetes' pods/eviction.
// A pod that no budget counts (Pending, finished, being deleted) or that
// no PodDisruptionBudget selects is deleted at once. With exactly one
// budget the eviction is decided by disruption.CheckEviction; an allowed
// one takes a disruption from the budget's status (compare-and-swap,
// retried on conflict) before the pod is deleted gracefully. A refused
// one is ResourceExhausted with a DisruptionBudget cause and writes
// nothing. More than one budget selecting the pod is Internal, as in
// Kubernetes.
func (s *Server) Evict(ctx context.Context, req *kplanev1.EvictRequest) (*kplanev1.EvictResponse, error) {
	ns, name := req.GetNamespace(), req.GetName()
	dr := &kplanev1.DeleteRequest{Kind: "Pod", Namespace: ns, Name: name, Preconditions: req.GetPreconditions(),
		PropagationPolicy: req.GetPropagationPolicy(), GracePeriodSeconds: req.GracePeriodSeconds}
	for attempt := 0; ; attempt++ {
		obj, err := s.store.Get(ctx, "Pod", ns, name)
		if err != nil {
			return nil, err
		}
		pod := obj.GetPod()
		if disruption.CanIgnore(pod) {
			return s.evictDelete(ctx, dr)
		}
		res, err := s.store.List(ctx, "PodDisruptionBudget", store.ListOptions{Namespace: ns})
		if err != nil {
			return nil, err
		}
		var pdbs []*kplanev1.PodDisruptionBudget
		for _, o := range res.Items {
			pdbs = append(pdbs, o.GetPodDisruptionBudget())
		}
		matching := disruption.Matching(pdbs, pod)
		switch {
		case len(matching) == 0:
			return s.evictDelete(ctx, dr)
		case len(matching) > 1:
			return nil, status.Error(codes.Internal, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")
		}
		pdb := proto.Clone(matching[0]).(*kplanev1.PodDisruptionBudget)
		take, err := disruption.CheckEviction(pdb, pod)
		if err != nil {
			return nil, evictionError(err)
		}
		if !take {
			// The pod goes without taking from the budget because it is
			// not ready; make sure it still is the pod that was judged.
			if dr.Preconditions.GetResourceVersion() == "" {
				dr.Preconditions = &kplanev1.Preconditions{Uid: dr.Preconditions.GetUid(), ResourceVersion: pod.GetMetadata().GetResourceVersion()}
			}
			return s.evictDelete(ctx, dr)
		}
		disruption.Take(pdb, name, time.Now())
		_, err = s.store.UpdateStatus(ctx, kplanev1.MustWrap(pdb))
		if status.Code(err) == codes.Aborted && attempt < evictConflictRetries {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("evict pod %s/%s: record the disruption in budget %s: %w", ns, name, pdb.GetMetadata().GetName(), err)
		}
		s.log.Debug("eviction took a disruption", "pod", ns+"/"+name, "budget", pdb.GetMetadata().GetName(), "left", pdb.GetStatus().GetDisruptionsAllowed())
		return s.evictDelete(ctx, dr)
	}
}

func (s *Server) evictDelete(ctx context.Context, dr *kplanev1.DeleteRequest) (*kplanev1.EvictResponse, error) {
	resp, err := s.Delete(ctx, dr)
	if err != nil {
		return nil, err
	}
	return &kplanev1.EvictResponse{Object: resp.GetObject()}, nil
}

// evictionError is the gRPC status of a refused eviction: a budget
// refusal is ResourceExhausted (HTTP 429) carrying the DisruptionBudget
// cause as an ErrorInfo, so the REST side can give it to kubectl.
func evictionError(err error) error {
	var r *disruption.Refusal
	if errors.As(err, &r) {
		st := status.New(codes.ResourceExhausted, r.Error())
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: kplanev1.DisruptionBudgetCause, Domain: "policy",
			Metadata: map[string]string{"message": r.Cause, "budget": r.Budget}}); derr == nil {
			st = d
		}
		return st.Err()
	}
	if errors.Is(err, disruption.ErrTooManyDisrupted) {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return err
}
