package agent

// Pod volumes. The exec runtime has no mount namespace, so a container
// cannot see a volume at its mountPath; instead each container gets a
// root of its own, $KPLANE_POD_ROOT (<pod dir>/<container>/root), in
// which every volumeMount is a symlink at <mountPath> to the volume's
// directory (or to subPath inside it), and KPLANE_VOLUME_<NAME> (the
// volume's name upper-cased, '-' and '.' as '_') holds that directory's
// absolute path. A program reads $KPLANE_POD_ROOT/data/f where in
// Kubernetes it would read /data/f.
//
// Where the volumes live:
//   - persistentVolumeClaim: the bound PersistentVolume's hostPath (for
//     local-path volumes a directory under pvctl's --storage-root, which
//     every node sees at the same path). The pod does not start until
//     every claim it uses is Bound.
//   - emptyDir: <pod dir>/_volumes/<name>, removed with the pod; its
//     sizeLimit is checked every --housekeeping-interval and a pod over it
//     is evicted (phase Failed, reason Evicted), as the kubelet does.
//   - hostPath: the path itself (DirectoryOrCreate creates it).
//   - secret: <pod dir>/_volumes/<name>, one file per key with mode
//     defaultMode (0400 unless set), written when the pod starts.
//
// readOnly: secret volumes are read-only by their modes (files 0400 by
// default, directory 0555). For other volumes readOnly cannot be enforced
// without a mount namespace: the directory is shared with whoever else
// uses it, so its permissions cannot be narrowed for one container. The
// mount's readOnly is therefore advisory for persistentVolumeClaim,
// emptyDir and hostPath volumes in the exec runtime.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/client"
	"github.com/kplane/kplane/pkg/informer"
	"github.com/kplane/kplane/pkg/quantity"
	"github.com/kplane/kplane/pkg/record"
	"github.com/kplane/kplane/pkg/volume"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

const (
	// ConditionPodReadyToStartContainers is False while the pod's volumes
	// cannot be set up (a claim not bound, a secret missing).
	ConditionPodReadyToStartContainers = "PodReadyToStartContainers"
	// ReasonVolumesNotReady is that condition's reason then.
	ReasonVolumesNotReady = "VolumesNotReady"
	// ReasonFailedMount is the Event reason, as the kubelet's.
	ReasonFailedMount = "FailedMount"
	// ReasonEvicted is the pod status reason of an eviction.
	ReasonEvicted = "Evicted"

	// volumesDir is under the pod dir; "_" keeps it apart from container
	// directories (container names are DNS labels).
	volumesDir = "_volumes"
	// defaultSecretMode is the mode of secret volume files.
	defaultSecretMode = 0o400
	// volumeRetry is how soon a pod whose volumes are not ready is looked
	// at again when no event says so (a secret created later).
	volumeRetry = 5 * time.Second
)

// errVolumesNotReady: the pod must wait (its message says for what).
type errVolumesNotReady struct{ msg string }

func (e *errVolumesNotReady) Error() string { return e.msg }

func notReady(format string, args ...any) error {
	return &errVolumesNotReady{msg: fmt.Sprintf(format, args...)}
}

// watchClaims queues the pods of this node that use a claim when the
// claim changes: a pod waiting for its claim to be bound starts at once.
func (a *Agent) watchClaims(c interface {
	ForKind(string) *informer.Informer
}) {
	claims := c.ForKind("PersistentVolumeClaim")
	wake := func(o *kplanev1.Object) {
		ns, name := o.Meta().GetNamespace(), o.Meta().GetName()
		for _, p := range a.pods.Store().List() {
			if p.Meta().GetNamespace() == ns && a.nodes[p.GetPod().GetSpec().GetNodeName()] &&
				slices.Contains(volume.PodClaims(p.GetPod()), name) {
				a.c.Enqueue(p.Key())
			}
		}
	}
	claims.AddEventHandler(informer.Handler{OnAdd: wake, OnUpdate: func(_, o *kplanev1.Object) { wake(o) }})
}

// ensureVolumes sets the pod's volumes up once per pod (per agent run)
// before its containers start. It returns false while they cannot be, after
// recording why in the pod's status (PodReadyToStartContainers False)
// and an Event.
func (a *Agent) ensureVolumes(ctx context.Context, pod *kplanev1.Pod, st *podState) (bool, error) {
	if st.volumesReady || len(pod.GetSpec().GetVolumes()) == 0 {
		return true, nil
	}
	err := a.setUpVolumes(ctx, pod)
	var nr *errVolumesNotReady
	switch {
	case errors.As(err, &nr):
		key := pod.GetMetadata().GetNamespace() + "/" + pod.GetMetadata().GetName()
		a.log.Info("pod waits for its volumes", "pod", key, "reason", nr.msg)
		a.event(ctx, pod, record.Warning, ReasonFailedMount, "Unable to attach or mount volumes: %s", nr.msg)
		next := proto.Clone(pod.GetStatus()).(*kplanev1.PodStatus)
		if next == nil {
			next = &kplanev1.PodStatus{}
		}
		if next.Phase == "" {
			next.Phase = kplanev1.PodPending
		}
		next.Conditions = mergeConditions(next.GetConditions(), []*kplanev1.Condition{{
			Type: ConditionPodReadyToStartContainers, Status: kplanev1.ConditionFalse, Reason: ReasonVolumesNotReady, Message: nr.msg,
		}}, time.Now())
		return false, a.writeStatus(ctx, pod, next)
	case err != nil:
		a.event(ctx, pod, record.Warning, ReasonFailedMount, "Unable to attach or mount volumes: %v", err)
		return false, err
	}
	st.volumesReady = true
	return true, nil
}

// volumeStatus completes a built status: PodReadyToStartContainers True
// once the volumes are set up, and an eviction's reason and message kept
// (buildStatus does not carry them).
func volumeStatus(old, st *kplanev1.PodStatus, volumesReady bool, now time.Time) {
	if volumesReady && apiutilFind(old.GetConditions(), ConditionPodReadyToStartContainers) != nil {
		st.Conditions = mergeConditions(st.GetConditions(), []*kplanev1.Condition{{
			Type: ConditionPodReadyToStartContainers, Status: kplanev1.ConditionTrue}}, now)
	}
	if old.GetReason() == ReasonEvicted && st.GetPhase() == kplanev1.PodFailed {
		st.Reason, st.Message = old.GetReason(), old.GetMessage()
	}
}

func apiutilFind(conds []*kplanev1.Condition, typ string) *kplanev1.Condition {
	for _, c := range conds {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

// setUpVolumes resolves every volume to a directory on this node and, in
// the exec runtime, lays out each container's root and environment.
func (a *Agent) setUpVolumes(ctx context.Context, pod *kplanev1.Pod) error {
	paths := map[string]string{}
	for _, v := range pod.GetSpec().GetVolumes() {
		p, err := a.volumePath(ctx, pod, v)
		if err != nil {
			return err
		}
		paths[v.GetName()] = p
	}
	if a.exec == nil {
		return nil // the fake runtime runs no processes: binding is all that counts
	}
	env := map[string][]string{}
	uid := pod.GetMetadata().GetUid()
	for _, c := range pod.GetSpec().GetContainers() {
		root := filepath.Join(a.exec.containerDir(uid, c.GetName()), "root")
		if err := os.MkdirAll(root, 0o755); err != nil {
			return fmt.Errorf("container root: %w", err)
		}
		vars := []string{"KPLANE_POD_ROOT=" + root}
		if err := checkNesting(c); err != nil {
			return err
		}
		for _, m := range c.GetVolumeMounts() {
			target, ok := paths[m.GetName()]
			if !ok {
				return fmt.Errorf("container %s mounts unknown volume %q", c.GetName(), m.GetName())
			}
			if sub := m.GetSubPath(); sub != "" {
				target = filepath.Join(target, sub)
				if _, err := os.Lstat(target); errors.Is(err, fs.ErrNotExist) {
					if err := os.MkdirAll(target, 0o777); err != nil { //nolint:gosec // shared volume content
						return fmt.Errorf("subPath %s of volume %s: %w", sub, m.GetName(), err)
					}
				}
			}
			link := filepath.Join(root, filepath.Clean("/"+m.GetMountPath()))
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				return fmt.Errorf("mount %s: %w", m.GetMountPath(), err)
			}
			if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("mount %s: %w", m.GetMountPath(), err)
			}
			if err := os.Symlink(target, link); err != nil {
				return fmt.Errorf("mount %s: %w", m.GetMountPath(), err)
			}
			vars = append(vars, "KPLANE_VOLUME_"+envName(m.GetName())+"="+target)
		}
		env[c.GetName()] = vars
	}
	a.exec.setVolumeEnv(uid, env)
	return nil
}

// checkNesting refuses a mountPath inside another of the container's: a
// symlink cannot be placed inside another volume without writing into it
// (Kubernetes nests mounts in a mount namespace, which the exec runtime
// has not).
func checkNesting(c *kplanev1.Container) error {
	ms := c.GetVolumeMounts()
	for _, m := range ms {
		p := filepath.Clean("/" + m.GetMountPath())
		for _, o := range ms {
			q := filepath.Clean("/" + o.GetMountPath())
			if p != q && strings.HasPrefix(p, q+"/") {
				return fmt.Errorf("container %s: mountPath %s is inside mountPath %s: the exec runtime cannot nest volume mounts", c.GetName(), p, q)
			}
		}
	}
	return nil
}

// envName turns a volume name into the tail of an environment variable.
func envName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '.' {
			return '_'
		}
		return r
	}, strings.ToUpper(name))
}

// volumePath is where volume v of pod lives on this node, creating what
// the pod owns (emptyDir, secret files).
func (a *Agent) volumePath(ctx context.Context, pod *kplanev1.Pod, v *kplanev1.Volume) (string, error) {
	ns := pod.GetMetadata().GetNamespace()
	switch {
	case v.GetPersistentVolumeClaim() != nil:
		return a.claimPath(ctx, ns, v.GetPersistentVolumeClaim().GetClaimName())
	case v.GetHostPath() != nil:
		return hostPath(v.GetHostPath())
	}
	if a.exec == nil {
		return "", nil
	}
	dir := filepath.Join(a.exec.podDir(pod.GetMetadata().GetUid()), volumesDir, v.GetName())
	switch {
	case v.GetEmptyDir() != nil:
		if err := os.MkdirAll(dir, 0o777); err != nil { //nolint:gosec // the pod's scratch space, for any user it runs as
			return "", fmt.Errorf("emptyDir %s: %w", v.GetName(), err)
		}
		return dir, nil
	case v.GetSecret() != nil:
		return dir, a.writeSecret(ctx, ns, v.GetSecret(), dir)
	}
	return "", fmt.Errorf("volume %s has no source this node agent supports", v.GetName())
}

func (a *Agent) claimPath(ctx context.Context, ns, name string) (string, error) {
	c, err := client.PersistentVolumeClaims(a.api).Get(ctx, ns, name)
	switch {
	case client.IsNotFound(err):
		return "", notReady("persistentvolumeclaim %q not found", name)
	case err != nil:
		return "", fmt.Errorf("get claim %s/%s: %w", ns, name, err)
	case c.GetMetadata().GetDeletionTimestamp() != nil:
		return "", notReady("persistentvolumeclaim %q is being deleted", name)
	case c.GetStatus().GetPhase() != kplanev1.ClaimBound || c.GetSpec().GetVolumeName() == "":
		return "", notReady("persistentvolumeclaim %q is not bound", name)
	}
	pv, err := client.PersistentVolumes(a.api).Get(ctx, "", c.GetSpec().GetVolumeName())
	switch {
	case client.IsNotFound(err):
		return "", notReady("persistentvolume %q of claim %q not found", c.GetSpec().GetVolumeName(), name)
	case err != nil:
		return "", fmt.Errorf("get volume %s: %w", c.GetSpec().GetVolumeName(), err)
	}
	p := pv.GetSpec().GetHostPath().GetPath()
	if p == "" {
		return "", fmt.Errorf("persistentvolume %q has no hostPath: the node agent mounts only hostPath and local-path volumes", pv.GetMetadata().GetName())
	}
	if _, err := hostPath(&kplanev1.HostPathVolumeSource{Path: p, Type: pv.GetSpec().GetHostPath().GetType()}); err != nil {
		return "", err
	}
	return p, nil
}

// hostPath checks (or, for the *OrCreate types, makes) a hostPath volume.
func hostPath(src *kplanev1.HostPathVolumeSource) (string, error) {
	p := src.GetPath()
	switch src.GetType() {
	case "DirectoryOrCreate":
		if err := os.MkdirAll(p, 0o755); err != nil {
			return "", fmt.Errorf("hostPath %s: %w", p, err)
		}
	case "FileOrCreate":
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return "", fmt.Errorf("hostPath %s: %w", p, err)
		}
		_ = f.Close()
	case "Directory", "File":
		fi, err := os.Stat(p)
		if err != nil {
			return "", notReady("hostPath %s: %v", p, err)
		}
		if fi.IsDir() != (src.GetType() == "Directory") {
			return "", notReady("hostPath %s is not a %s", p, strings.ToLower(src.GetType()))
		}
	}
	return p, nil
}

// writeSecret writes one file per key of the secret into dir, replacing
// what an earlier start wrote, and leaves the directory read-only.
func (a *Agent) writeSecret(ctx context.Context, ns string, src *kplanev1.SecretVolumeSource, dir string) error {
	s, err := client.Secrets(a.api).Get(ctx, ns, src.GetSecretName())
	switch {
	case client.IsNotFound(err) && src.GetOptional():
		s = &kplanev1.Secret{}
	case client.IsNotFound(err):
		return notReady("secret %q not found", src.GetSecretName())
	case err != nil:
		return fmt.Errorf("get secret %s/%s: %w", ns, src.GetSecretName(), err)
	}
	mode := fs.FileMode(defaultSecretMode)
	if src.DefaultMode != nil {
		mode = fs.FileMode(src.GetDefaultMode()) & fs.ModePerm
	}
	if _, err := os.Stat(dir); err == nil {
		if err := os.Chmod(dir, 0o700); err != nil { // to empty it
			return fmt.Errorf("secret volume %s: %w", dir, err)
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("secret volume %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("secret volume %s: %w", dir, err)
	}
	for k, v := range s.GetData() {
		if strings.ContainsRune(k, '/') || k == "." || k == ".." {
			return fmt.Errorf("secret %s/%s: key %q is not a file name", ns, src.GetSecretName(), k)
		}
		f := filepath.Join(dir, k)
		if err := os.WriteFile(f, v, 0o600); err != nil {
			return fmt.Errorf("secret volume %s: %w", f, err)
		}
		if err := os.Chmod(f, mode); err != nil {
			return fmt.Errorf("secret volume %s: %w", f, err)
		}
	}
	if err := os.Chmod(dir, 0o555); err != nil { //nolint:gosec // read-only, listable by the pod whatever user it runs as
		return fmt.Errorf("secret volume %s: %w", dir, err)
	}
	return nil
}

// removeSecretDirs makes a pod's read-only secret directories writable
// again, so that removing the pod dir can empty them.
func removeSecretDirs(podDir string) {
	entries, err := os.ReadDir(filepath.Join(podDir, volumesDir))
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			_ = os.Chmod(filepath.Join(podDir, volumesDir, e.Name()), 0o700)
		}
	}
}

// checkEmptyDirLimits evicts running pods whose emptyDir volumes hold more
// than their sizeLimit, as the kubelet's eviction manager does: the
// containers are killed and the pod ends Failed with reason Evicted.
func (a *Agent) checkEmptyDirLimits(ctx context.Context) {
	if a.exec == nil {
		return
	}
	for _, rp := range a.rt.Pods() {
		if !rp.Running {
			continue
		}
		o, ok := a.pods.Store().Get(rp.Key())
		if !ok || o.Meta().GetUid() != rp.UID {
			continue
		}
		pod := o.GetPod()
		for _, v := range pod.GetSpec().GetVolumes() {
			lim := v.GetEmptyDir().GetSizeLimit()
			if lim == "" {
				continue
			}
			limit, err := quantity.Parse(lim)
			if err != nil {
				continue // validation keeps it parseable
			}
			used := dirSize(filepath.Join(a.exec.podDir(rp.UID), volumesDir, v.GetName()))
			if used <= limit.Value() {
				continue
			}
			msg := fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q.", v.GetName(), lim)
			if err := a.evict(ctx, pod, msg); err != nil {
				a.log.Warn("eviction failed", "pod", rp.Key(), "error", err)
			}
			break
		}
	}
}

// evict kills the pod's containers and marks it Failed/Evicted.
func (a *Agent) evict(ctx context.Context, pod *kplanev1.Pod, msg string) error {
	key := pod.GetMetadata().GetNamespace() + "/" + pod.GetMetadata().GetName()
	a.log.Info("evicting pod", "pod", key, "reason", msg)
	a.event(ctx, pod, record.Warning, ReasonEvicted, "%s", msg)
	if err := a.rt.Signal(pod.GetMetadata().GetUid(), true); err != nil {
		return fmt.Errorf("kill evicted pod %s: %w", key, err)
	}
	// The cached pod may be a write behind (the agent's own status write
	// in flight): on a conflict the pod is read again and the Failed
	// status applied to it, since a killed pod left Running would be
	// restarted.
	cur := pod
	err := client.RetryOnConflict(ctx, client.DefaultRetry, func() error {
		next := proto.Clone(cur.GetStatus()).(*kplanev1.PodStatus)
		if next == nil {
			next = &kplanev1.PodStatus{}
		}
		next.Phase, next.Reason, next.Message = kplanev1.PodFailed, ReasonEvicted, msg
		next.Conditions = mergeConditions(next.GetConditions(), []*kplanev1.Condition{{
			Type: "DisruptionTarget", Status: kplanev1.ConditionTrue, Reason: "TerminationByKubelet", Message: msg,
			LastTransitionTime: timestamppb.Now(),
		}}, time.Now())
		werr := a.writeStatus(ctx, cur, next)
		if client.IsConflict(werr) {
			fresh, gerr := client.For[*kplanev1.Pod](a.api).Get(ctx, pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName())
			if gerr != nil {
				return fmt.Errorf("reread evicted pod %s: %w", key, gerr)
			}
			if fresh.GetMetadata().GetUid() != pod.GetMetadata().GetUid() {
				return nil // replaced by a pod of the same name: nothing to mark
			}
			cur = fresh
		}
		return werr
	})
	if err != nil {
		return err
	}
	a.c.Enqueue(key)
	return nil
}

// dirSize is the total size of the regular files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil //nolint:nilerr // a file removed while walking is not counted
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// setVolumeEnv records the KPLANE_POD_ROOT and KPLANE_VOLUME_* variables
// of each container of pod uid.
func (r *execRuntime) setVolumeEnv(uid string, env map[string][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.volumeEnv == nil {
		r.volumeEnv = map[string]map[string][]string{}
	}
	r.volumeEnv[uid] = env
}

// volumeEnvOf is container's volume environment (nil without volumes).
// Callers hold r.mu.
func (r *execRuntime) volumeEnvOf(uid, container string) []string {
	return r.volumeEnv[uid][container]
}

// forgetVolumeEnv drops a removed pod's entry. Callers hold r.mu.
func (r *execRuntime) forgetVolumeEnv(uid string) { delete(r.volumeEnv, uid) }
