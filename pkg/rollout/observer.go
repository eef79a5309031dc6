package rollout

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Observer is the property checker of a rollout: fed every watch event of
// one workload's pods in order, it checks the bounds after each event,
// so every state the pods passed through is checked, not samples of
// them. A pod counts as present while it is neither terminating nor
// terminal (a terminating pod has been given up, as Kubernetes counts
// surge), and as available when Ready for minReadySeconds at the event.
// A present pod that was available and no longer is (its node went
// unready, say) was disrupted, not removed: maxUnavailable bounds what
// the controller takes away, not what the platform does, so such a pod
// still counts toward the availability floor (as Kubernetes' controller
// then refrains from scaling down further, this keeps the check on the
// controller's own actions). Tests, e2e and chaos runs share it. Safe for
// concurrent use.
type Observer struct {
	mu         sync.Mutex
	pods       map[string]*kplanev1.Pod
	wasAvail   map[string]bool // pods seen available at some event
	maxPods    int32           // < 0: unchecked
	minAvail   int32           // < 0: unchecked
	noOverlap  bool
	minReady   time.Duration
	events     int
	violations []string
	peakPods   int32
	lowAvail   int32
}

// NewObserver returns an observer with no bounds armed.
func NewObserver(minReady time.Duration) *Observer {
	return &Observer{pods: map[string]*kplanev1.Pod{}, wasAvail: map[string]bool{}, maxPods: -1, minAvail: -1, minReady: minReady, lowAvail: -1}
}

// SetBounds arms the surge and availability bounds (a negative value
// leaves that bound unchecked) and whether pods of two templates
// (pod-template-hash values) may exist at once (Recreate: never). The
// current state is checked at once.
func (o *Observer) SetBounds(maxPods, minAvailable int32, noOverlap bool, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.maxPods, o.minAvail, o.noOverlap = maxPods, minAvailable, noOverlap
	o.checkLocked("bounds armed", now)
}

// Observe applies one watch event (ADDED, MODIFIED, DELETED) for a pod at
// time now and checks the bounds.
func (o *Observer) Observe(typ kplanev1.EventType, pod *kplanev1.Pod, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	key := pod.GetMetadata().GetNamespace() + "/" + pod.GetMetadata().GetName()
	switch typ {
	case kplanev1.EventType_EVENT_TYPE_DELETED:
		delete(o.pods, key)
		delete(o.wasAvail, key)
	case kplanev1.EventType_EVENT_TYPE_ADDED, kplanev1.EventType_EVENT_TYPE_MODIFIED:
		o.pods[key] = pod
	default:
		return
	}
	o.events++
	o.checkLocked(fmt.Sprintf("%s %s", typ, key), now)
}

// Replace sets the pods to a fresh list (after a watch could not resume
// and events were lost) and checks the bounds on it. Pods missing from
// the list are gone; what was seen available of the others is kept.
func (o *Observer) Replace(pods []*kplanev1.Pod, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	listed := make(map[string]*kplanev1.Pod, len(pods))
	for _, p := range pods {
		listed[p.GetMetadata().GetNamespace()+"/"+p.GetMetadata().GetName()] = p
	}
	for key := range o.wasAvail {
		if _, ok := listed[key]; !ok {
			delete(o.wasAvail, key)
		}
	}
	o.pods = listed
	o.checkLocked("relist", now)
}

// Counts returns the pods present and available now.
func (o *Observer) Counts(now time.Time) (present, available int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p, a, _, _ := o.countLocked(now)
	return p, a
}

// countLocked counts the pods present and available now, the present ones
// that were available before and are not now (disrupted), and the
// templates of the pods that exist.
func (o *Observer) countLocked(now time.Time) (present, available, disrupted int32, hashes map[string]bool) {
	hashes = map[string]bool{}
	for key, p := range o.pods {
		ph := p.GetStatus().GetPhase()
		if ph == kplanev1.PodSucceeded || ph == kplanev1.PodFailed {
			continue
		}
		hashes[p.GetMetadata().GetLabels()[kplanev1.LabelPodTemplateHash]] = true
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		present++
		switch ok, _ := PodAvailable(p, o.minReady, now); {
		case ok:
			available++
			o.wasAvail[key] = true
		case o.wasAvail[key]:
			disrupted++
		}
	}
	return present, available, disrupted, hashes
}

// presentLocked names the present pods, sorted, for a violation's
// message: which sets they belong to says what went wrong.
func (o *Observer) presentLocked() string {
	var names []string
	for _, p := range o.pods {
		if apiutil.IsPodActive(p) {
			names = append(names, p.GetMetadata().GetName())
		}
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

func (o *Observer) checkLocked(what string, now time.Time) {
	present, available, disrupted, hashes := o.countLocked(now)
	o.peakPods = max(o.peakPods, present)
	if o.maxPods >= 0 && present > o.maxPods {
		o.violations = append(o.violations, fmt.Sprintf("after %s: %d pods present, at most %d allowed: %s", what, present, o.maxPods, o.presentLocked()))
	}
	if o.minAvail >= 0 {
		if o.lowAvail < 0 || available < o.lowAvail {
			o.lowAvail = available
		}
		if available+disrupted < o.minAvail {
			o.violations = append(o.violations, fmt.Sprintf("after %s: %d pods available (and %d disrupted), at least %d required", what, available, disrupted, o.minAvail))
		}
	}
	if o.noOverlap && len(hashes) > 1 {
		o.violations = append(o.violations, fmt.Sprintf("after %s: pods of %d templates exist at once", what, len(hashes)))
	}
}

// Report returns the events checked, the most pods present at once, the
// fewest available while the floor was armed (-1: never armed), and every
// violation seen.
func (o *Observer) Report() (events int, peakPods, lowestAvailable int32, violations []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.events, o.peakPods, o.lowAvail, append([]string(nil), o.violations...)
}
