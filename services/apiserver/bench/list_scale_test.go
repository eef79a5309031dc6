package bench_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/pkg/pki"
	"github.com/kplane/kplane/pkg/serviceaccount"
	"github.com/kplane/kplane/pkg/testutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// BenchmarkListScale reproduces issue 23's List figures without the
// whole scale stack: a secured apiserver (TLS, client certificates,
// Node,RBAC, ServiceAccount admission, as bench-scale runs it) holding
// LIST_SCALE_PODS (default 100,000) Running pods shaped like
// bench-scale's (a ReplicaSet's template, bound to one of 1,000 nodes,
// with the status a fake-runtime node agent writes), created in process
// through the store. It then times, over gRPC with the admin's client
// certificate, a List in pages of 500, one unpaginated List, and the
// kpctl binary's `get pods -A` with an admin kubeconfig, each
// LIST_SCALE_ROUNDS times (default 3; the medians are printed), and the
// process's heap in use after a GC before and after the pods were
// created (the apiserver's watch cache and etcd's index are most of the
// difference). Run with `make bench-list`; add -cpuprofile/-memprofile
// to profile the List path (client and server share the process). It
// asserts nothing.
func BenchmarkListScale(b *testing.B) {
	n := testutil.EnvInt(b, "LIST_SCALE_PODS", 100000)
	rounds := testutil.EnvInt(b, "LIST_SCALE_ROUNDS", 3)
	kpctl := buildKpctl(b)
	for range b.N {
		runListScale(b, n, rounds, kpctl)
	}
}

func runListScale(b *testing.B, n, rounds int, kpctl string) {
	b.StopTimer()
	dir := b.TempDir()
	if _, err := pki.Generate(dir, pki.Options{Controllers: []string{}}); err != nil {
		b.Fatal(err)
	}
	saKey, err := serviceaccount.LoadPrivateKeyFile(filepath.Join(dir, pki.SAKey))
	if err != nil {
		b.Fatal(err)
	}
	heapBefore := heapInUse()
	srv := testserver.Start(b, testserver.WithTLS(filepath.Join(dir, pki.APIServerCert), filepath.Join(dir, pki.APIServerKey)),
		testserver.WithClientCA(filepath.Join(dir, pki.CACert)), testserver.WithServiceAccountKeys(saKey))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	st := srv.API().Store()

	owner := uuid.NewString()
	begin := time.Now()
	// In parts, each well inside phase's time limit.
	for from := 0; from < n; from += 10000 {
		part := min(10000, n-from)
		pr := phase(ctx, from, part, func(ctx context.Context, _, i int) error {
			_, err := st.Create(ctx, runningPod(i, owner))
			return err
		})
		if pr.err != nil || pr.done != int64(part) {
			b.Fatalf("created %d of pods %d-%d: %v", pr.done, from, from+part-1, pr.err)
		}
	}
	fmt.Printf("list scale: created %d Running pods in %v\n", n, time.Since(begin).Round(time.Second))

	roots, admin := adminTLS(b, dir)
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{admin}})))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = conn.Close() }() // the run is over
	api := kplanev1.NewResourcesClient(conn)
	kubeconfig := filepath.Join(dir, pki.AdminKubeconfig)
	if _, err := pki.WriteAdminKubeconfig(dir, "https://"+srv.Addr()); err != nil {
		b.Fatal(err)
	}

	paged := func() int {
		got, tok := 0, ""
		for {
			resp, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Pod", Limit: 500, Continue: tok})
			if err != nil {
				b.Fatalf("paginated list: %v", err)
			}
			got += len(resp.GetItems())
			if tok = resp.GetContinue(); tok == "" {
				return got
			}
		}
	}
	full := func() int {
		resp, err := api.List(ctx, &kplanev1.ListRequest{Kind: "Pod"}, grpc.MaxCallRecvMsgSize(1<<30))
		if err != nil {
			b.Fatalf("unpaginated list: %v", err)
		}
		return len(resp.GetItems())
	}
	get := func() int {
		cmd := exec.CommandContext(ctx, kpctl, "--kubeconfig", kubeconfig, "get", "pods", "-A")
		var lines countingWriter
		cmd.Stdout = &lines
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			b.Fatalf("kpctl get pods -A: %v: %s", err, stderr.String())
		}
		return lines.lines - 1 // the header
	}
	var tPaged, tFull, tKpctl []time.Duration
	timed := func(into *[]time.Duration, what string, f func() int) {
		start := time.Now()
		got := f()
		*into = append(*into, time.Since(start))
		if got != n {
			b.Fatalf("%s returned %d pods, want %d", what, got, n)
		}
	}
	stopProfile := startProfile(b)
	b.StartTimer()
	for range rounds {
		timed(&tPaged, "the paginated list", paged)
		timed(&tFull, "the unpaginated list", full)
		timed(&tKpctl, "kpctl get pods -A", get)
	}
	b.StopTimer()
	stopProfile()
	heapAfter := heapInUse()
	b.ReportMetric(median(tPaged).Seconds(), "s-list-paged")
	b.ReportMetric(median(tFull).Seconds(), "s-list-full")
	b.ReportMetric(median(tKpctl).Seconds(), "s-kpctl")
	b.ReportMetric(float64(heapAfter-heapBefore)/(1<<20), "MiB-heap")
	fmt.Printf("list scale, %d pods, medians of %d: pages of 500 %v (%v per page), one call %v, kpctl get pods -A %v; heap in use %.0f MiB (%.0f MiB before the apiserver started)\n",
		n, rounds, median(tPaged).Round(time.Millisecond), (median(tPaged) / time.Duration((n+499)/500)).Round(100*time.Microsecond),
		median(tFull).Round(time.Millisecond), median(tKpctl).Round(time.Millisecond),
		float64(heapAfter)/(1<<20), float64(heapBefore)/(1<<20))
	fmt.Printf("list scale, every round: pages of 500 %v, one call %v, kpctl %v\n", tPaged, tFull, tKpctl)
}

// runningPod is pod i of a ReplicaSet like bench-scale's ("scale", one
// container of nginx:1.25) as the apiserver stores it once a fake node
// runs it: bound to one of 1,000 nodes, with the status the node agent
// writes (IPs, four conditions, one running container).
func runningPod(i int, ownerUID string) *kplanev1.Object {
	started := timestamppb.New(time.Now().Truncate(time.Second))
	uid := uuid.NewString()
	name := fmt.Sprintf("scale-%08x", i)
	node := i % 1000
	hostIP := fmt.Sprintf("10.0.%d.%d", node/250, node%250+1)
	podIP := fmt.Sprintf("127.%d.%d.%d", 64+node/256, node%256, i/1000%250+2)
	cond := func(t string) *kplanev1.Condition {
		return &kplanev1.Condition{Type: t, Status: kplanev1.ConditionTrue, LastTransitionTime: started}
	}
	return kplanev1.MustWrap(&kplanev1.Pod{
		Metadata: &kplanev1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "scale"},
			OwnerReferences: []*kplanev1.OwnerReference{{ApiVersion: "apps/v1", Kind: "ReplicaSet", Name: "scale", Uid: ownerUID,
				Controller: true, BlockOwnerDeletion: true}}},
		Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Name: "app", Image: "nginx:1.25"}},
			NodeName: fmt.Sprintf("fake-node-%04d", node)},
		Status: &kplanev1.PodStatus{
			Phase: kplanev1.PodRunning, HostIp: hostIP, HostIps: []*kplanev1.HostIP{{Ip: hostIP}},
			PodIp: podIP, PodIps: []*kplanev1.PodIP{{Ip: podIP}}, StartTime: started,
			Conditions: []*kplanev1.Condition{cond(kplanev1.PodInitialized), cond(kplanev1.PodReady),
				cond(kplanev1.ContainersReady), cond(kplanev1.PodScheduled)},
			ContainerStatuses: []*kplanev1.ContainerStatus{{Name: "app", Image: "nginx:1.25", Ready: true, Started: proto.Bool(true),
				ContainerId: "fake://" + uid + "/app/0",
				State:       &kplanev1.ContainerState{Running: &kplanev1.ContainerStateRunning{StartedAt: started}}}},
		},
	})
}

// buildKpctl builds the kpctl binary from the workspace.
func buildKpctl(b *testing.B) string {
	out := filepath.Join(b.TempDir(), "kpctl")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = filepath.Join("..", "..", "..", "cmd", "kpctl")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build kpctl: %v: %s", err, msg)
	}
	return out
}

// startProfile profiles the process's CPU into LIST_SCALE_PROFILE_DIR
// (cpu.pprof) when it is set, and the returned func stops it and writes
// the heap there (heap.pprof): what the timed Lists cost, without the
// creates before them.
func startProfile(b *testing.B) func() {
	dir := os.Getenv("LIST_SCALE_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
		h, err := os.Create(filepath.Join(dir, "heap.pprof"))
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = h.Close() }() // written below; a short file shows in pprof
		runtime.GC()
		if err := pprof.WriteHeapProfile(h); err != nil {
			b.Error(err)
		}
	}
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// countingWriter counts the lines written to it.
type countingWriter struct{ lines int }

func (w *countingWriter) Write(p []byte) (int, error) {
	for _, c := range p {
		if c == '\n' {
			w.lines++
		}
	}
	return len(p), nil
}

var _ io.Writer = (*countingWriter)(nil)
