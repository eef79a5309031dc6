// Package scalereport turns what the scale benchmark (make bench-scale)
// observed into figures: pods Running per second by tenth of the run and
// the last/first ratio (does the rate collapse as pods accumulate?),
// percentiles, latency quantiles from the apiserver's Prometheus
// histograms, a text table and a PNG plot of Running pods and every
// process's RSS over time.
package scalereport

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sample is the state of the run at one moment.
type Sample struct {
	// At is the time since the ReplicaSet was created.
	At time.Duration
	// Running pods at that moment.
	Running int
	// RSS in bytes by process name.
	RSS map[string]uint64
	// CPU is each process's user+system CPU seconds since it started.
	CPU map[string]float64
}

// Tenths returns the pods Running per second in each tenth of the run:
// tenth k spans from the moment (k)/10 of total pods were Running to the
// moment (k+1)/10 were; the first tenth starts at zero (the ReplicaSet's
// creation). runningAt holds the moment each pod was first seen Running,
// measured from the creation, in any order. It returns nil when fewer
// than total pods ran or total is under 10.
func Tenths(runningAt []time.Duration, total int) []float64 {
	bounds := TenthBounds(runningAt, total)
	if bounds == nil {
		return nil
	}
	out := make([]float64, 10)
	for k := range 10 {
		d := (bounds[k+1] - bounds[k]).Seconds()
		if d <= 0 {
			d = 1e-3 // every pod of the tenth in the same instant
		}
		out[k] = float64(total*(k+1)/10-total*k/10) / d
	}
	return out
}

// TenthBounds returns the eleven moments that delimit Tenths' tenths: zero,
// then the moment total*k/10 pods were Running for k = 1..10. It returns
// nil where Tenths does.
func TenthBounds(runningAt []time.Duration, total int) []time.Duration {
	if total < 10 || len(runningAt) < total {
		return nil
	}
	ts := slices.Clone(runningAt)
	slices.Sort(ts)
	out := make([]time.Duration, 11)
	for k := 1; k <= 10; k++ {
		out[k] = ts[total*k/10-1]
	}
	return out
}

// CPUPerPod returns, by process, the CPU milliseconds each process spent
// per pod in each tenth of the run: the CPU used between two of bounds
// (from TenthBounds), read from the samples by linear interpolation,
// over the pods of that tenth. It shows which process's cost per pod
// grows as pods accumulate. Processes missing from the samples at either
// end of the run are left out; nil when bounds is.
func CPUPerPod(samples []Sample, bounds []time.Duration, total int) map[string][]float64 {
	if len(bounds) != 11 || len(samples) == 0 {
		return nil
	}
	out := map[string][]float64{}
	for name := range samples[0].CPU {
		if _, ok := samples[len(samples)-1].CPU[name]; !ok {
			continue
		}
		per := make([]float64, 10)
		prev := cpuAt(samples, name, bounds[0])
		for k := range 10 {
			next := cpuAt(samples, name, bounds[k+1])
			per[k] = (next - prev) * 1000 / float64(total*(k+1)/10-total*k/10)
			prev = next
		}
		out[name] = per
	}
	return out
}

// cpuAt interpolates a process's cumulative CPU seconds at moment at
// between the samples around it (the nearest sample past either end).
func cpuAt(samples []Sample, name string, at time.Duration) float64 {
	i, _ := slices.BinarySearchFunc(samples, at, func(s Sample, t time.Duration) int { return cmp.Compare(s.At, t) })
	if i == 0 {
		return samples[0].CPU[name]
	}
	if i == len(samples) {
		return samples[len(samples)-1].CPU[name]
	}
	a, b := samples[i-1], samples[i]
	f := float64(at-a.At) / float64(b.At-a.At)
	return a.CPU[name] + f*(b.CPU[name]-a.CPU[name])
}

// Percentile returns the p-th percentile (0 < p <= 100) of ds by the
// nearest-rank method, or 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// Histogram is one labelled Prometheus histogram's cumulative buckets.
type Histogram struct {
	// Bounds are the buckets' upper bounds, ascending (+Inf last).
	Bounds []float64
	// Counts are cumulative: Counts[i] observations <= Bounds[i].
	Counts []float64
}

// ParseHistograms reads the histogram name from Prometheus' text format
// and returns its buckets by the value of label.
func ParseHistograms(r io.Reader, name, label string) (map[string]*Histogram, error) {
	out := map[string]*Histogram{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	prefix := name + "_bucket{"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			return nil, fmt.Errorf("metrics line %q: no closing brace", line)
		}
		labels := parseLabels(line[len(prefix):end])
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: value: %w", line, err)
		}
		le, err := strconv.ParseFloat(labels["le"], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: le: %w", line, err)
		}
		key := labels[label]
		h := out[key]
		if h == nil {
			h = &Histogram{}
			out[key] = h
		}
		h.Bounds = append(h.Bounds, le)
		h.Counts = append(h.Counts, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// parseLabels splits `a="x",b="y"` (values without escaped quotes, as
// the apiserver's method names and bounds are).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// Sub returns h minus before (the observations made between the two
// scrapes); before may be nil.
func (h *Histogram) Sub(before *Histogram) *Histogram {
	out := &Histogram{Bounds: slices.Clone(h.Bounds), Counts: slices.Clone(h.Counts)}
	if before == nil || len(before.Counts) != len(h.Counts) {
		return out
	}
	for i := range out.Counts {
		out.Counts[i] -= before.Counts[i]
	}
	return out
}

// Count is the number of observations.
func (h *Histogram) Count() float64 {
	if len(h.Counts) == 0 {
		return 0
	}
	return h.Counts[len(h.Counts)-1]
}

// Quantile estimates the q-quantile (0..1) by linear interpolation in
// the bucket that holds it, as Prometheus' histogram_quantile does; an
// answer in the +Inf bucket is the highest finite bound.
func (h *Histogram) Quantile(q float64) float64 {
	total := h.Count()
	if total == 0 {
		return 0
	}
	rank := q * total
	lower, prevCount := 0.0, 0.0
	for i, c := range h.Counts {
		if c >= rank {
			upper := h.Bounds[i]
			if math.IsInf(upper, 1) {
				return lower
			}
			if c == prevCount {
				return upper
			}
			return lower + (upper-lower)*(rank-prevCount)/(c-prevCount)
		}
		lower, prevCount = h.Bounds[i], c
	}
	return lower
}
