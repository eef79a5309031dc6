// Package rollout holds the arithmetic and bookkeeping every controller
// that replaces pods by template shares (Deployment, StatefulSet,
// DaemonSet): the surge and unavailability bounds from int-or-percent
// values, the pod-template hash, revision numbers, and the
// ControllerRevision snapshots (history.go).
// Everything here is pure: no I/O, no clock.
package rollout

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// ParsePercent reads "25%" as 25. ok is false for anything else (a bare
// number, a missing sign, a fraction, a negative value).
func ParsePercent(s string) (int, bool) {
	num, found := strings.CutSuffix(s, "%")
	if !found || num == "" {
		return 0, false
	}
	v, err := strconv.Atoi(num)
	if err != nil || v < 0 || strings.HasPrefix(num, "+") {
		return 0, false
	}
	return v, true
}

// Scaled resolves an int-or-percent against total: a number is itself, a
// percent is that share of total, rounded up or down as asked. A nil
// value is 0. A string that is not a percent is an error.
func Scaled(v *kplanev1.IntOrString, total int32, roundUp bool) (int32, error) {
	if !v.IsString() {
		return v.GetIntVal(), nil
	}
	p, ok := ParsePercent(v.GetStrVal())
	if !ok {
		return 0, fmt.Errorf("invalid value %q: must be an integer or a percentage (e.g. '25%%')", v.GetStrVal())
	}
	x := float64(p) * float64(total) / 100
	if roundUp {
		x = math.Ceil(x)
	} else {
		x = math.Floor(x)
	}
	return int32(x), nil
}

// Fenceposts resolves maxSurge and maxUnavailable for a rollout of
// replicas pods, as Kubernetes does: a surge percent rounds up, an
// unavailability percent rounds down (so 25%/25% of 1 replica is 1/0 and
// the rollout still moves). When both come out 0 the rollout could never
// move, so unavailable becomes 1; validation refuses both set to 0
// literally, this only catches percents that round down to 0.
func Fenceposts(maxSurge, maxUnavailable *kplanev1.IntOrString, replicas int32) (surge, unavailable int32, err error) {
	surge, err = Scaled(maxSurge, replicas, true)
	if err != nil {
		return 0, 0, fmt.Errorf("maxSurge: %w", err)
	}
	unavailable, err = Scaled(maxUnavailable, replicas, false)
	if err != nil {
		return 0, 0, fmt.Errorf("maxUnavailable: %w", err)
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return surge, unavailable, nil
}

// MaxScaleUp is how many pods the new set may add now: the total may reach
// replicas+surge. current is the pods of every set (their spec.replicas).
func MaxScaleUp(replicas, surge, current int32) int32 {
	return max(0, replicas+surge-current)
}

// MaxScaleDown is how many pods may go now without the available pods
// dropping below replicas-unavailable. available counts every set's
// available pods; pods that are not available may always go (they do
// not count against the floor), which is unavailableSpec.
func MaxScaleDown(replicas, unavailable, available int32) int32 {
	return max(0, available-(replicas-unavailable))
}

// safeAlphabet spells hashes without vowels (no words) and without the
// easily confused 0, 1 and 3, as Kubernetes' pod-template-hash does.
const safeAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// safeEncode maps each byte of s to a letter of safeAlphabet.
func safeEncode(s string) string {
	r := make([]byte, len(s))
	for i := range len(s) {
		r[i] = safeAlphabet[int(s[i])%len(safeAlphabet)]
	}
	return string(r)
}

// TemplateHash is the pod-template-hash of a template: FNV-32a over its
// deterministic protobuf encoding, then collisionCount (when set), so a
// collision with a foreign ReplicaSet is resolved by counting up. Equal
// templates hash alike across processes and restarts; the
// pod-template-hash label is left out, so a template read back from a
// ReplicaSet hashes as the Deployment's.
func TemplateHash(t *kplanev1.PodTemplateSpec, collisionCount *int32) string {
	t = WithoutHashLabel(t)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(t)
	if err != nil {
		// A PodTemplateSpec built from valid protobuf always marshals.
		panic(fmt.Sprintf("rollout: marshal pod template: %v", err))
	}
	h := fnv.New32a()
	_, _ = h.Write(b)
	if collisionCount != nil {
		var c [4]byte
		binary.LittleEndian.PutUint32(c[:], uint32(*collisionCount))
		_, _ = h.Write(c[:])
	}
	return safeEncode(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// WithoutHashLabel returns t without the pod-template-hash label (a copy
// when it had one).
func WithoutHashLabel(t *kplanev1.PodTemplateSpec) *kplanev1.PodTemplateSpec {
	if _, ok := t.GetMetadata().GetLabels()[kplanev1.LabelPodTemplateHash]; !ok {
		return t
	}
	c := proto.Clone(t).(*kplanev1.PodTemplateSpec)
	delete(c.Metadata.Labels, kplanev1.LabelPodTemplateHash)
	if len(c.Metadata.Labels) == 0 {
		c.Metadata.Labels = nil
	}
	return c
}

// TemplatesEqual compares two templates ignoring the pod-template-hash
// label: a ReplicaSet's template is its Deployment's plus that label.
func TemplatesEqual(a, b *kplanev1.PodTemplateSpec) bool {
	return proto.Equal(WithoutHashLabel(a), WithoutHashLabel(b))
}

// Revision reads the deployment.kubernetes.io/revision annotation; 0
// when it is absent or not a number.
func Revision(m *kplanev1.ObjectMeta) int64 {
	v, err := strconv.ParseInt(m.GetAnnotations()[kplanev1.AnnotationDeploymentRevision], 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// MaxRevision is the highest revision among metas.
func MaxRevision(metas ...*kplanev1.ObjectMeta) int64 {
	var m int64
	for _, x := range metas {
		m = max(m, Revision(x))
	}
	return m
}

// SetRevision makes rev the revision of m. A revision it stood for
// before is appended to the revision-history annotation, so a rollback
// that reuses an old ReplicaSet keeps its earlier numbers. It reports
// whether anything changed.
func SetRevision(m *kplanev1.ObjectMeta, rev int64) bool {
	old := Revision(m)
	if old == rev {
		return false
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	if old > 0 && old < rev {
		hist := m.Annotations[kplanev1.AnnotationDeploymentRevisionHistory]
		if hist == "" {
			hist = strconv.FormatInt(old, 10)
		} else {
			hist += "," + strconv.FormatInt(old, 10)
		}
		m.Annotations[kplanev1.AnnotationDeploymentRevisionHistory] = hist
	}
	m.Annotations[kplanev1.AnnotationDeploymentRevision] = strconv.FormatInt(rev, 10)
	return true
}

// Proportional spreads delta (positive: add, negative: remove) over sets
// of the given sizes in proportion to their sizes, as Kubernetes scales a
// Deployment mid-rollout: each set gets its floor share, and what is left
// after rounding goes to the largest sets first (the earliest listed among
// equals). No set drops below 0. With every size 0, the first set takes
// all of a positive delta.
func Proportional(sizes []int32, delta int32) []int32 {
	out := make([]int32, len(sizes))
	if len(sizes) == 0 || delta == 0 {
		return out
	}
	var total int64
	for _, s := range sizes {
		total += int64(s)
	}
	if total == 0 {
		if delta > 0 {
			out[0] = delta
		}
		return out
	}
	left := delta
	for i, s := range sizes {
		share := int32(int64(delta) * int64(s) / total) // truncates toward 0
		if s+share < 0 {
			share = -s
		}
		out[i] = share
		left -= share
	}
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(sizes[b]) - int(sizes[a]) })
	for left != 0 {
		moved := false
		for _, i := range order {
			if left == 0 {
				break
			}
			switch {
			case left > 0:
				out[i]++
				left--
				moved = true
			case sizes[i]+out[i] > 0:
				out[i]--
				left++
				moved = true
			}
		}
		if !moved {
			break // nothing left to remove from
		}
	}
	return out
}

// PodAvailable reports whether pod has been Ready for minReady by now
// (Kubernetes' availability), and when not yet, how long until it may be.
// A terminating pod is never available.
func PodAvailable(pod *kplanev1.Pod, minReady time.Duration, now time.Time) (bool, time.Duration) {
	if pod.GetMetadata().GetDeletionTimestamp() != nil {
		return false, 0
	}
	var c *kplanev1.Condition
	for _, x := range pod.GetStatus().GetConditions() {
		if x.GetType() == kplanev1.PodReady {
			c = x
		}
	}
	if c.GetStatus() != kplanev1.ConditionTrue {
		return false, 0
	}
	if minReady <= 0 {
		return true, 0
	}
	if c.GetLastTransitionTime() == nil {
		return false, minReady // no transition time: count from now
	}
	if left := c.GetLastTransitionTime().AsTime().Add(minReady).Sub(now); left > 0 {
		return false, left
	}
	return true, 0
}
