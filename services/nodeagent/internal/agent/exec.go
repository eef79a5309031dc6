package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
	"github.com/kplane/kplane/services/nodeagent/internal/shim"
)

// Files of the exec runtime under --root-dir:
//
//	pods/<uid>/pod.json                      identity and IP of the pod
//	pods/<uid>/<container>/                  the container's working directory
//	pods/<uid>/<container>/container.log     stdout and stderr, all runs appended
//	pods/<uid>/<container>/container.times   offset and time of each line start (written by the shim)
//	pods/<uid>/<container>/.state/pid.<n>    written by the shim of run n
//	pods/<uid>/<container>/.state/exit.<n>   written by the shim when run n ended
const (
	podsDir      = "pods"
	podFile      = "pod.json"
	stateDir     = ".state"
	logFileName  = "container.log"
	monitorEvery = 200 * time.Millisecond
	// killedCode is reported for a run whose shim vanished without writing
	// an exit file: its process group was SIGKILLed.
	killedCode = 137
)

// podMeta is pod.json.
type podMeta struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node"`
	PodIP     string `json:"podIP"`
}

// execRuntime runs each container as a child process under a shim (see
// package shim), with everything needed to pick up after a restart on disk.
type execRuntime struct {
	root   string
	shim   string // the binary re-executed as "shim"
	log    hclog.Logger
	notify func(podKey string)

	mu   sync.Mutex
	pods map[string]*execPod // by uid
	// volumeEnv: KPLANE_POD_ROOT and KPLANE_VOLUME_* per pod uid and
	// container (volumes.go).
	volumeEnv map[string]map[string][]string
}

type execPod struct {
	meta       podMeta
	dir        string
	containers map[string]*execContainer
}

type execContainer struct {
	// msgPath is the host path of the run's termination message file;
	// msgPolicy the container's terminationMessagePolicy.
	msgPath, msgPolicy string
	dir                string
	attempt            int // current run; -1 before the first
	shimPid            int // process group of the current run while it is alive
	ownChild           bool
	running            bool
	started            time.Time
	pid                int
	exit               *Exit
	prev               *Exit
}

// newExecRuntime opens root and re-adopts what a previous agent left
// there: running shims are watched again, runs that ended meanwhile are
// read from their exit files, and shims whose pod directory is gone (or
// that are stale duplicates) are killed.
func newExecRuntime(root, shimBinary string, log hclog.Logger, notify func(string)) (*execRuntime, error) {
	if err := os.MkdirAll(filepath.Join(root, podsDir), 0o755); err != nil {
		return nil, fmt.Errorf("exec runtime: create root dir: %w", err)
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("exec runtime: root dir: %w", err)
	}
	r := &execRuntime{root: absRoot, shim: shimBinary, log: log, notify: notify, pods: map[string]*execPod{}}
	if err := r.recover(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *execRuntime) Name() string { return "exec" }

func (r *execRuntime) podDir(uid string) string { return filepath.Join(r.root, podsDir, uid) }

// liveShims finds the shims running for this root by their command line
// (argv[1] == "shim", --exit-file under root/pods), keyed by exit file.
func (r *execRuntime) liveShims() map[string]int {
	out := map[string]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	prefix := filepath.Join(r.root, podsDir) + string(filepath.Separator)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := shimExitFile(pid); strings.HasPrefix(f, prefix) && !isZombie(pid) {
			out[f] = pid
		}
	}
	return out
}

// shimExitFile returns the --exit-file of pid when pid is a shim.
func shimExitFile(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(argv) < 4 || argv[1] != shim.Command {
		return ""
	}
	for i := 2; i+1 < len(argv); i++ {
		if argv[i] == "--" {
			break
		}
		if argv[i] == "--exit-file" || argv[i] == "-exit-file" {
			return argv[i+1]
		}
	}
	return ""
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && errors.Is(err, syscall.ESRCH) {
		return false
	}
	return !isZombie(pid)
}

func (r *execRuntime) recover() error {
	shims := r.liveShims()
	claimed := map[string]bool{}
	entries, err := os.ReadDir(filepath.Join(r.root, podsDir))
	if err != nil {
		return fmt.Errorf("exec runtime: read pods: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := r.podDir(e.Name())
		var meta podMeta
		b, err := os.ReadFile(filepath.Join(dir, podFile))
		if err == nil {
			err = json.Unmarshal(b, &meta)
		}
		if err != nil || meta.UID != e.Name() {
			// A pod directory without identity was being created when the
			// agent died; nothing can have started in it.
			r.log.Warn("removing incomplete pod directory", "dir", dir, "error", err)
			r.killShimsUnder(shims, dir)
			_ = os.RemoveAll(dir)
			continue
		}
		p := &execPod{meta: meta, dir: dir, containers: map[string]*execContainer{}}
		cdirs, _ := os.ReadDir(dir)
		for _, cd := range cdirs {
			if !cd.IsDir() {
				continue
			}
			c := recoverContainer(filepath.Join(dir, cd.Name()), shims, claimed)
			p.containers[cd.Name()] = c
			r.log.Info("recovered container", "pod", meta.Namespace+"/"+meta.Name, "uid", meta.UID,
				"container", cd.Name(), "attempt", c.attempt, "running", c.running, "pid", c.pid)
		}
		r.pods[meta.UID] = p
	}
	// Shims nobody claimed belong to vanished pod directories or to stale
	// runs: they must not keep running.
	for f, pid := range shims {
		if !claimed[f] {
			r.log.Warn("killing orphaned container", "shim_pid", pid, "exit_file", f)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	return nil
}

func (r *execRuntime) killShimsUnder(shims map[string]int, dir string) {
	for f, pid := range shims {
		if strings.HasPrefix(f, dir+string(filepath.Separator)) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			delete(shims, f)
		}
	}
}

// recoverContainer rebuilds a container's state from its files and the
// live shims; it claims the shim of the latest run.
func recoverContainer(dir string, shims map[string]int, claimed map[string]bool) *execContainer {
	c := &execContainer{dir: dir, attempt: -1}
	sd := filepath.Join(dir, stateDir)
	files, _ := os.ReadDir(sd)
	for _, f := range files {
		name := f.Name()
		if i := strings.LastIndexByte(name, '.'); i > 0 {
			if n, err := strconv.Atoi(name[i+1:]); err == nil && n > c.attempt && (strings.HasPrefix(name, "pid.") || strings.HasPrefix(name, "exit.")) {
				c.attempt = n
			}
		}
	}
	for f := range shims {
		if filepath.Dir(f) == sd {
			if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(f), "exit.")); err == nil && n > c.attempt {
				c.attempt = n
			}
		}
	}
	if c.attempt < 0 {
		return c
	}
	if b, err := os.ReadFile(filepath.Join(sd, terminationFile)); err == nil {
		c.msgPolicy, c.msgPath, _ = strings.Cut(string(b), "\n")
	}
	if e, ok := readExit(c.exitFile(c.attempt - 1)); ok {
		c.prev = e
	}
	if pid, ok := shims[c.exitFile(c.attempt)]; ok {
		claimed[c.exitFile(c.attempt)] = true
		c.shimPid, c.running = pid, true
		c.loadPid()
		return c
	}
	if e, ok := readExit(c.exitFile(c.attempt)); ok {
		c.exit = c.withMessage(e)
		return c
	}
	// The run started but its shim is gone without an exit status: the
	// whole process group was killed.
	pi, _ := shim.ReadPid(c.pidFile(c.attempt))
	c.exit = &Exit{Code: killedCode, Signal: int(syscall.SIGKILL), Message: "container was killed without recording an exit status",
		StartedAt: pi.StartedAt, FinishedAt: time.Now()}
	return c
}

func (c *execContainer) exitFile(n int) string {
	return filepath.Join(c.dir, stateDir, "exit."+strconv.Itoa(n))
}

// logStartFile holds the size the log had when run n started: the
// offset of that run's first line, so a run's log (and the previous
// one's, for previous=true) can be told apart in the one log file.
func (c *execContainer) logStartFile(n int) string {
	return filepath.Join(c.dir, stateDir, "logstart."+strconv.Itoa(n))
}

// logStart reads the offset where run n's log begins.
func (c *execContainer) logStart(n int) (int64, bool) {
	b, err := os.ReadFile(c.logStartFile(n))
	if err != nil {
		return 0, false
	}
	off, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return off, err == nil
}

func (c *execContainer) pidFile(n int) string {
	return filepath.Join(c.dir, stateDir, "pid."+strconv.Itoa(n))
}

// loadPid reads the pid file of the current run once the shim wrote it.
func (c *execContainer) loadPid() {
	if c.pid != 0 {
		return
	}
	if pi, err := shim.ReadPid(c.pidFile(c.attempt)); err == nil {
		c.pid, c.started = pi.Pid, pi.StartedAt
	}
}

func readExit(path string) (*Exit, bool) {
	ei, err := shim.ReadExit(path)
	if err != nil {
		return nil, false
	}
	return &Exit{Code: ei.ExitCode, Signal: ei.Signal, Message: ei.Message, StartedAt: ei.StartedAt,
		FinishedAt: ei.FinishedAt, StartError: ei.StartError}, true
}

// PreparePod implements Runtime: it creates the pod directory and writes
// pod.json (the IP is persisted so it survives restarts).
func (r *execRuntime) PreparePod(pod *kplanev1.Pod, podIP string) error {
	md := pod.GetMetadata()
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pods[md.GetUid()]; ok && p.meta.PodIP == podIP {
		return nil
	}
	meta := podMeta{UID: md.GetUid(), Namespace: md.GetNamespace(), Name: md.GetName(), Node: pod.GetSpec().GetNodeName(), PodIP: podIP}
	dir := r.podDir(meta.UID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create pod dir: %w", err)
	}
	b, _ := json.Marshal(meta)
	tmp := filepath.Join(dir, podFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write pod.json: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, podFile)); err != nil {
		return fmt.Errorf("write pod.json: %w", err)
	}
	if p, ok := r.pods[meta.UID]; ok {
		p.meta = meta
	} else {
		r.pods[meta.UID] = &execPod{meta: meta, dir: dir, containers: map[string]*execContainer{}}
	}
	return nil
}

// containerArgv is the command line of a container: command then args
// (there are no images, so args alone are the whole command line).
func containerArgv(c *kplanev1.Container) ([]string, error) {
	argv := append(append([]string{}, c.GetCommand()...), c.GetArgs()...)
	if len(argv) == 0 {
		return nil, errors.New("no command: the exec runtime has no image entrypoint, set command")
	}
	return argv, nil
}

// containerEnv is the container's environment: PATH from the agent, the
// spec's variables (later ones win) and the KPLANE_POD_* variables.
func containerEnv(pod *kplanev1.Pod, c *kplanev1.Container, podIP, dir string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	env := []string{"PATH=" + path, "HOME=" + dir, "HOSTNAME=" + pod.GetMetadata().GetName()}
	for _, e := range c.GetEnv() {
		env = append(env, e.GetName()+"="+e.GetValue())
	}
	return append(env,
		"KPLANE_POD_NAME="+pod.GetMetadata().GetName(),
		"KPLANE_POD_NAMESPACE="+pod.GetMetadata().GetNamespace(),
		"KPLANE_POD_IP="+podIP,
	)
}

func (r *execRuntime) containerDir(uid, name string) string {
	return filepath.Join(r.podDir(uid), name)
}

// StartContainer implements Runtime: it starts the shim for run attempt
// in its own process group.
func (r *execRuntime) StartContainer(_ context.Context, pod *kplanev1.Pod, spec *kplanev1.Container, attempt int, podIP string) error {
	uid := pod.GetMetadata().GetUid()
	argv, err := containerArgv(spec)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return fmt.Errorf("pod %s not prepared", uid)
	}
	c, ok := p.containers[spec.GetName()]
	if !ok {
		c = &execContainer{dir: r.containerDir(uid, spec.GetName()), attempt: -1}
		p.containers[spec.GetName()] = c
	}
	if c.running {
		return fmt.Errorf("container %s is still running", spec.GetName())
	}
	if err := os.MkdirAll(filepath.Join(c.dir, stateDir), 0o755); err != nil {
		return fmt.Errorf("create container dir: %w", err)
	}
	// Keep the files of the previous run (lastState); older ones go.
	_ = os.Remove(c.exitFile(attempt - 2))
	_ = os.Remove(c.pidFile(attempt - 2))
	_ = os.Remove(c.logStartFile(attempt - 2))
	if err := c.prepareMessage(spec); err != nil {
		return err
	}
	workDir := c.dir
	if wd := spec.GetWorkingDir(); wd != "" {
		workDir = wd
	}
	logPath := filepath.Join(c.dir, logFileName)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open container log: %w", err)
	}
	// The shim gets its own descriptor and does the writing; the agent
	// never writes through this one, so its Close has nothing to lose.
	defer func() { _ = logf.Close() }()
	fi, err := logf.Stat()
	if err != nil {
		return fmt.Errorf("stat container log: %w", err)
	}
	if err := os.WriteFile(c.logStartFile(attempt), []byte(strconv.FormatInt(fi.Size(), 10)), 0o644); err != nil {
		return fmt.Errorf("record where the run's log starts: %w", err)
	}
	args := append([]string{shim.Command, "--exit-file", c.exitFile(attempt), "--pid-file", c.pidFile(attempt),
		"--log-file", logPath, "--times-file", filepath.Join(c.dir, timesFileName), "--dir", workDir, "--"}, argv...)
	cmd := exec.Command(r.shim, args...)
	cmd.Env = append(containerEnv(pod, spec, podIP, c.dir), EnvTerminationMessagePath+"="+c.msgPath)
	cmd.Env = append(cmd.Env, r.volumeEnvOf(uid, spec.GetName())...)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: signals reach the container and everything
	// it spawned, and the agent's own signals (a terminal's Ctrl-C) do not.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start shim: %w", err)
	}
	pid := cmd.Process.Pid
	// The monitor reaps the shim with wait4; the os.Process handle is not needed.
	_ = cmd.Process.Release()
	if c.exit != nil {
		c.prev = c.exit
	}
	c.attempt, c.shimPid, c.ownChild, c.running, c.started, c.pid, c.exit = attempt, pid, true, true, time.Now(), 0, nil
	r.log.Info("started container", "pod", p.meta.Namespace+"/"+p.meta.Name, "container", spec.GetName(),
		"attempt", attempt, "shim_pid", pid, "command", strings.Join(argv, " "))
	return nil
}

// State implements Runtime.
func (r *execRuntime) State(uid, name string, _ time.Time) ContainerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return ContainerState{}
	}
	c, ok := p.containers[name]
	if !ok || c.attempt < 0 {
		return ContainerState{}
	}
	if c.running {
		c.loadPid()
	}
	return ContainerState{Created: true, Attempt: c.attempt, Running: c.running, StartedAt: c.started,
		Exit: c.exit, Previous: c.prev, Pid: c.pid}
}

// NextChange implements Runtime: exits are reported by the monitor.
func (r *execRuntime) NextChange(string, time.Time) time.Time { return time.Time{} }

// Signal implements Runtime.
func (r *execRuntime) Signal(uid string, kill bool) error {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return nil
	}
	var errs []error
	for name, c := range p.containers {
		if !c.running || c.shimPid <= 0 {
			continue
		}
		if err := syscall.Kill(-c.shimPid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("signal container %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Termination messages. There is no mount namespace, so a container
// cannot write to its terminationMessagePath itself; it writes to the
// file named by $KPLANE_TERMINATION_MESSAGE_PATH, which is that path
// under the container's root (<container dir>/root), emptied before each
// run. When the run ends, the file's first 4 KiB become the terminated
// state's message; with FallbackToLogsOnError an empty file and a failed
// run take the log's last 80 lines (at most 2 KiB) instead.
const (
	// EnvTerminationMessagePath names the termination message file.
	EnvTerminationMessagePath = "KPLANE_TERMINATION_MESSAGE_PATH"
	terminationFile           = "termination"
	defaultMessagePath        = "/dev/termination-log"
	maxMessageBytes           = 4096
	fallbackLogLines          = 80
	fallbackLogBytes          = 2048
)

// prepareMessage creates the run's empty termination message file and
// records where it is (in .state, for an agent that restarts).
func (c *execContainer) prepareMessage(spec *kplanev1.Container) error {
	rel := spec.GetTerminationMessagePath()
	if rel == "" {
		rel = defaultMessagePath
	}
	c.msgPath = filepath.Join(c.dir, "root", filepath.Clean("/"+rel))
	c.msgPolicy = spec.GetTerminationMessagePolicy()
	if err := os.MkdirAll(filepath.Dir(c.msgPath), 0o755); err != nil {
		return fmt.Errorf("create termination message dir: %w", err)
	}
	if err := os.WriteFile(c.msgPath, nil, 0o666); err != nil {
		return fmt.Errorf("create termination message file: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, stateDir, terminationFile), []byte(c.msgPolicy+"\n"+c.msgPath), 0o644); err != nil {
		return fmt.Errorf("record termination message path: %w", err)
	}
	return nil
}

// withMessage sets e's message from the termination message file (or the
// log, per policy) when there is one.
func (c *execContainer) withMessage(e *Exit) *Exit {
	if c.msgPath == "" {
		return e
	}
	msg := readHead(c.msgPath, maxMessageBytes)
	if msg == "" && c.msgPolicy == "FallbackToLogsOnError" && e.Code != 0 {
		msg = logTail(filepath.Join(c.dir, logFileName), fallbackLogLines, fallbackLogBytes)
	}
	if msg != "" {
		out := *e
		out.Message = msg
		return &out
	}
	return e
}

func readHead(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }() // read only
	b, _ := io.ReadAll(io.LimitReader(f, int64(n)))
	return string(b)
}

// logTail returns the last lines of the log, at most maxBytes.
func logTail(path string, lines, maxBytes int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }() // read only
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-int64(maxBytes), 0)
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	ls := strings.SplitAfter(string(b), "\n")
	if len(ls) > 0 && ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	}
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "")
}

// StopContainer implements Runtime: the signal goes to the run's process
// group, so whatever the container spawned stops with it.
func (r *execRuntime) StopContainer(uid, name string, kill bool) error {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return nil
	}
	c, ok := p.containers[name]
	if !ok || !c.running || c.shimPid <= 0 {
		return nil
	}
	if err := syscall.Kill(-c.shimPid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal container %s: %w", name, err)
	}
	return nil
}

// RemovePod implements Runtime.
func (r *execRuntime) RemovePod(uid string) error {
	r.mu.Lock()
	p, ok := r.pods[uid]
	if ok {
		for name, c := range p.containers {
			if c.running {
				r.mu.Unlock()
				return fmt.Errorf("container %s is still running", name)
			}
		}
		delete(r.pods, uid)
	}
	r.forgetVolumeEnv(uid)
	r.mu.Unlock()
	removeSecretDirs(r.podDir(uid))
	if err := os.RemoveAll(r.podDir(uid)); err != nil {
		return fmt.Errorf("remove pod dir: %w", err)
	}
	return nil
}

// Pods implements Runtime.
func (r *execRuntime) Pods() []RuntimePod {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RuntimePod, 0, len(r.pods))
	for _, p := range r.pods {
		rp := RuntimePod{UID: p.meta.UID, Namespace: p.meta.Namespace, Name: p.meta.Name, Node: p.meta.Node}
		for _, c := range p.containers {
			rp.Running = rp.Running || c.running
		}
		out = append(out, rp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}

// Running implements Runtime.
func (r *execRuntime) Running(uid string) (known, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return false, false
	}
	for _, c := range p.containers {
		running = running || c.running
	}
	return true, running
}

// RunningPods implements Runtime.
func (r *execRuntime) RunningPods() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.pods {
		for _, c := range p.containers {
			if c.running {
				n++
				break
			}
		}
	}
	return n
}

// PodIPs returns the persisted IP of every known pod, for the allocator.
func (r *execRuntime) PodIPs() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for uid, p := range r.pods {
		out[uid] = p.meta.PodIP
	}
	return out
}

// Healthy implements Runtime: the root must be writable and the shim
// binary present.
func (r *execRuntime) Healthy() error {
	if _, err := os.Stat(r.shim); err != nil {
		return fmt.Errorf("shim binary: %w", err)
	}
	f, err := os.CreateTemp(r.root, ".probe-")
	if err != nil {
		return fmt.Errorf("root dir not writable: %w", err)
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	return nil
}

// monitor notices container exits until ctx ends: an exit file, or a
// shim that is gone (reaped with wait4 when this agent started it).
func (r *execRuntime) monitor(ctx context.Context) {
	t := time.NewTicker(monitorEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, key := range r.poll() {
			r.notify(key)
		}
	}
}

// poll updates running containers and returns the keys of pods with a change.
func (r *execRuntime) poll() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var changed []string
	for _, p := range r.pods {
		podChanged := false
		for name, c := range p.containers {
			if !c.running {
				continue
			}
			gone := false
			if c.ownChild {
				var ws syscall.WaitStatus
				wpid, err := syscall.Wait4(c.shimPid, &ws, syscall.WNOHANG, nil)
				gone = wpid == c.shimPid || errors.Is(err, syscall.ECHILD)
			} else {
				gone = !alive(c.shimPid) || shimExitFile(c.shimPid) != c.exitFile(c.attempt)
			}
			e, ok := readExit(c.exitFile(c.attempt))
			if !ok && !gone {
				continue
			}
			if !ok {
				c.loadPid()
				e = &Exit{Code: killedCode, Signal: int(syscall.SIGKILL), Message: "killed",
					StartedAt: c.started, FinishedAt: time.Now()}
			}
			if ok && c.ownChild && !gone {
				// The shim wrote its exit file and is about to exit; reap it
				// on the next round.
				continue
			}
			c.running, c.shimPid, c.exit = false, 0, c.withMessage(e)
			podChanged = true
			r.log.Info("container exited", "pod", p.meta.Namespace+"/"+p.meta.Name, "container", name,
				"attempt", c.attempt, "exit_code", e.Code, "signal", e.Signal)
		}
		if podChanged {
			changed = append(changed, p.meta.Namespace+"/"+p.meta.Name)
		}
	}
	return changed
}

// Logs implements Runtime. The run's section of the one log file is
// found from the recorded run start offsets; tailLines counts back from
// its end, sinceTime starts at the first line not older than it (the
// later of the two wins, as the kubelet applies both), and timestamps
// prefixes each line with the time the shim read it.
func (r *execRuntime) Logs(ctx context.Context, pod *kplanev1.Pod, container string, opts LogOptions, w io.Writer) error {
	follow := opts.Follow && !opts.Previous
	uid := pod.GetMetadata().GetUid()
	r.mu.Lock()
	attempt := -1
	if p, ok := r.pods[uid]; ok {
		if c, ok := p.containers[container]; ok {
			attempt = c.attempt
		}
	}
	r.mu.Unlock()
	lc := &execContainer{dir: r.containerDir(uid, container)}
	// The current run's log starts at its recorded offset (logs of runs
	// started before offsets were recorded start at 0); the previous
	// run's ends there.
	start, _ := lc.logStart(attempt)
	end := int64(-1)
	if opts.Previous {
		prev, ok := lc.logStart(attempt - 1)
		if !ok || attempt < 1 {
			return fmt.Errorf("previous terminated container %q in pod %q not found", container, pod.GetMetadata().GetName())
		}
		start, end = prev, start
	}
	f, err := os.Open(filepath.Join(lc.dir, logFileName))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("container %q of pod %s has not started: %w", container, pod.GetMetadata().GetName(), err)
		}
		return fmt.Errorf("open log: %w", err)
	}
	// Only read: a failed Close loses nothing.
	defer func() { _ = f.Close() }()
	var times *lineTimes
	if opts.Timestamps || !opts.Since.IsZero() {
		if times, err = openLineTimes(lc.dir); err != nil {
			return err
		}
		defer times.close()
	}
	var src io.ReadSeeker = f
	if end >= 0 {
		// The previous run: a finished section of the file, read with
		// offsets relative to its start.
		src = io.NewSectionReader(f, start, end-start)
	}
	base := int64(0) // file offset of src's offset 0
	if end >= 0 {
		base, start = start, 0
	}
	if opts.TailLines >= 0 {
		if err := seekTail(src, opts.TailLines); err != nil {
			return fmt.Errorf("seek the last %d lines: %w", opts.TailLines, err)
		}
	}
	pos, err := src.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("seek log: %w", err)
	}
	pos = max(pos, start)
	// sinceFound: the first line not older than since is known (always,
	// without since); until then a follower waits for one.
	sinceFound := true
	seekSince := func() error {
		off, ok, err := times.firstSince(opts.Since, base+pos)
		if err != nil || !ok {
			return err
		}
		sinceFound, pos = true, off-base
		return nil
	}
	if !opts.Since.IsZero() {
		sinceFound = false
		if err := seekSince(); err != nil {
			return err
		}
	}
	if !sinceFound && !follow {
		return nil
	}
	out := w
	if opts.Timestamps {
		out = &stampWriter{w: w, times: times, off: base + pos}
	}
	flush := func() {
		if fl, ok := out.(interface{ Flush() }); ok {
			fl.Flush()
		}
	}
	if end >= 0 {
		// A finished run: what lies between pos and its end.
		if pos >= end-base {
			return nil
		}
		if _, err := src.Seek(pos, io.SeekStart); err != nil {
			return fmt.Errorf("seek log: %w", err)
		}
		if _, err := io.Copy(out, src); err != nil {
			return fmt.Errorf("copy log: %w", err)
		}
		return nil
	}
	if sinceFound {
		if _, err := f.Seek(pos, io.SeekStart); err != nil {
			return fmt.Errorf("seek log: %w", err)
		}
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		if !sinceFound {
			if err := seekSince(); err != nil {
				return err
			}
			if sinceFound {
				if _, err := f.Seek(pos, io.SeekStart); err != nil {
					return fmt.Errorf("seek log: %w", err)
				}
				if sw, ok := out.(*stampWriter); ok {
					sw.off = pos
				}
			}
		}
		if sinceFound {
			if _, err := io.Copy(out, f); err != nil {
				return fmt.Errorf("copy log: %w", err)
			}
		}
		// Also while no line is due yet: the response starts, so the
		// follower is not left waiting for its headers.
		flush()
		if !follow || !r.State(uid, container, time.Now()).Running {
			// One more copy catches what was written just before the exit.
			if follow && !sinceFound {
				if err := seekSince(); err != nil {
					return err
				}
				if sinceFound {
					if _, err := f.Seek(pos, io.SeekStart); err != nil {
						return fmt.Errorf("seek log: %w", err)
					}
					if sw, ok := out.(*stampWriter); ok {
						sw.off = pos
					}
				}
			}
			if follow && sinceFound {
				_, _ = io.Copy(out, f)
				flush()
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// podPids are the main processes of the pod's running containers.
func (r *execRuntime) podPids(uid string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return nil
	}
	var out []int
	for _, c := range p.containers {
		if c.running && c.pid > 0 {
			out = append(out, c.pid)
		}
	}
	return out
}
