package scalereport

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTenthsSteadyAndCollapsing(t *testing.T) {
	// 100 pods, one every 10 ms: every tenth runs at 100 pods/s.
	steady := make([]time.Duration, 100)
	for i := range steady {
		steady[i] = time.Duration(i+1) * 10 * time.Millisecond
	}
	for k, r := range Tenths(steady, 100) {
		if math.Abs(r-100) > 0.01 {
			t.Errorf("steady tenth %d: %.2f pods/s, want 100", k, r)
		}
	}
	// The second half four times slower: the last tenth at 0.25x.
	slow := make([]time.Duration, 100)
	for i := range slow {
		d := time.Duration(i+1) * 10 * time.Millisecond
		if i >= 50 {
			d = 500*time.Millisecond + time.Duration(i-49)*40*time.Millisecond
		}
		slow[i] = d
	}
	tn := Tenths(slow, 100)
	if got := tn[9] / tn[0]; math.Abs(got-0.25) > 0.01 {
		t.Errorf("last/first = %.3f, want 0.25 (%v)", got, tn)
	}
	if Tenths(steady[:99], 100) != nil {
		t.Error("Tenths of a run that did not finish should be nil")
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	if got := Percentile(ds, 50); got != 5 {
		t.Errorf("p50 = %v, want 5", got)
	}
	if got := Percentile(ds, 99); got != 10 {
		t.Errorf("p99 = %v, want 10", got)
	}
	if got := Percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
}

const metrics = `# HELP kplane_apiserver_request_duration_seconds Latency.
# TYPE kplane_apiserver_request_duration_seconds histogram
kplane_apiserver_request_duration_seconds_bucket{method="Create",le="0.001"} 10
kplane_apiserver_request_duration_seconds_bucket{method="Create",le="0.002"} 90
kplane_apiserver_request_duration_seconds_bucket{method="Create",le="0.004"} 100
kplane_apiserver_request_duration_seconds_bucket{method="Create",le="+Inf"} 100
kplane_apiserver_request_duration_seconds_sum{method="Create"} 0.15
kplane_apiserver_request_duration_seconds_count{method="Create"} 100
kplane_apiserver_request_duration_seconds_bucket{method="Get",le="0.001"} 0
kplane_apiserver_request_duration_seconds_bucket{method="Get",le="0.002"} 0
kplane_apiserver_request_duration_seconds_bucket{method="Get",le="0.004"} 0
kplane_apiserver_request_duration_seconds_bucket{method="Get",le="+Inf"} 5
`

func TestHistogramQuantile(t *testing.T) {
	hs, err := ParseHistograms(strings.NewReader(metrics), "kplane_apiserver_request_duration_seconds", "method")
	if err != nil {
		t.Fatal(err)
	}
	c := hs["Create"]
	if c == nil || c.Count() != 100 {
		t.Fatalf("Create histogram %+v", c)
	}
	// Rank 50 lies in (0.001, 0.002], 40 of its 80 observations in.
	if got := c.Quantile(0.5); math.Abs(got-0.0015) > 1e-9 {
		t.Errorf("p50 = %v, want 0.0015", got)
	}
	// Rank 99 lies in (0.002, 0.004], 9 of its 10 in.
	if got := c.Quantile(0.99); math.Abs(got-0.0038) > 1e-9 {
		t.Errorf("p99 = %v, want 0.0038", got)
	}
	// Every Get above the last finite bound: the bound is the answer.
	if got := hs["Get"].Quantile(0.99); got != 0.004 {
		t.Errorf("Get p99 = %v, want 0.004", got)
	}
	before := &Histogram{Bounds: c.Bounds, Counts: []float64{10, 10, 10, 10}}
	if d := c.Sub(before); d.Count() != 90 || d.Counts[0] != 0 {
		t.Errorf("Sub = %+v", d)
	}
	if _, err := ParseHistograms(strings.NewReader(`x_bucket{le="a"} 1`), "x", "method"); err == nil {
		t.Error("a bad le should be an error")
	}
}

func TestPlotWritesPNG(t *testing.T) {
	var samples []Sample
	for i := range 20 {
		samples = append(samples, Sample{At: time.Duration(i) * time.Second, Running: i * 100,
			RSS: map[string]uint64{"apiserver": uint64(100+i) << 20, "scheduler": uint64(50+i) << 20}})
	}
	path := filepath.Join(t.TempDir(), "p.png")
	if err := Plot(path, "test", samples); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8 || string(b[1:4]) != "PNG" {
		t.Fatalf("not a PNG (%d bytes)", len(b))
	}
	if err := Plot(path, "empty", nil); err == nil {
		t.Error("plotting no samples should be an error")
	}
}

func TestCPUPerPod(t *testing.T) {
	// 100 pods, one Running every 10 ms; process a uses 1 ms of CPU per
	// pod throughout, process b 1 ms in the first half and 3 ms after.
	runningAt := make([]time.Duration, 100)
	for i := range runningAt {
		runningAt[i] = time.Duration(i+1) * 10 * time.Millisecond
	}
	var samples []Sample
	a, b := 0.0, 0.0
	for ms := 0; ms <= 1000; ms += 50 {
		samples = append(samples, Sample{At: time.Duration(ms) * time.Millisecond, CPU: map[string]float64{"a": a, "b": b, "gone": 1}})
		a += 0.005 // 5 pods per 50 ms, 1 ms each
		if ms < 500 {
			b += 0.005
		} else {
			b += 0.015
		}
	}
	delete(samples[len(samples)-1].CPU, "gone") // exited before the end
	per := CPUPerPod(samples, TenthBounds(runningAt, 100), 100)
	if _, ok := per["gone"]; ok {
		t.Error("a process missing from the last sample should be left out")
	}
	for k := range 10 {
		if math.Abs(per["a"][k]-1) > 0.01 {
			t.Errorf("a, tenth %d: %.3f ms per pod, want 1", k+1, per["a"][k])
		}
		want := 1.0
		if k >= 5 {
			want = 3
		}
		if math.Abs(per["b"][k]-want) > 0.01 {
			t.Errorf("b, tenth %d: %.3f ms per pod, want %.0f", k+1, per["b"][k], want)
		}
	}
	if CPUPerPod(samples, nil, 100) != nil || CPUPerPod(nil, TenthBounds(runningAt, 100), 100) != nil {
		t.Error("CPUPerPod without bounds or samples should be nil")
	}
}
