// Package lincheck records operations on a set of registers from many
// clients, with their invocation and return times, and checks the history
// for linearizability with porcupine (the checker etcd's own robustness
// tests use). A history that is not linearizable is saved with
// porcupine's HTML visualisation.
package lincheck

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Input is one operation on a register.
type Input struct {
	Key string `json:"key"`
	// Write is true for a write of Value, false for a read.
	Write bool   `json:"write"`
	Value string `json:"value,omitempty"`
}

// Output is what the operation returned: the value read. Writes return
// nothing; an indeterminate write (it may or may not have taken effect)
// is recorded with an infinite return time.
type Output struct {
	Value string `json:"value"`
}

// Op is one recorded operation.
type Op struct {
	Client int    `json:"client"`
	Input  Input  `json:"input"`
	Output Output `json:"output"`
	// Call and Return are nanoseconds since the recorder started; Return
	// is math.MaxInt64 for an indeterminate write.
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
	// Err is the error an indeterminate write returned.
	Err string `json:"error,omitempty"`
}

// Recorder collects operations from concurrent clients.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
	// Failed counts reads that failed (dropped: a failed read changes
	// nothing) and writes refused outright (dropped: not applied).
	failedReads, refusedWrites, indeterminate int
}

// NewRecorder starts the clock.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the time to record as an operation's invocation.
func (r *Recorder) Now() int64 { return time.Since(r.start).Nanoseconds() }

// Read records a read of key invoked at call that returned value (err nil)
// or failed (err set; the read is dropped).
func (r *Recorder) Read(client int, key string, call int64, value string, err error) {
	ret := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failedReads++
		return
	}
	r.ops = append(r.ops, Op{Client: client, Input: Input{Key: key}, Output: Output{Value: value}, Call: call, Return: ret})
}

// Write records a write of value to key invoked at call. A write that
// failed with a code that guarantees nothing was written is dropped; any
// other failure (Unavailable, DeadlineExceeded: the request may have been
// applied) is indeterminate: it may take effect at any time after call.
func (r *Recorder) Write(client int, key, value string, call int64, err error) {
	ret := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	op := Op{Client: client, Input: Input{Key: key, Write: true, Value: value}, Call: call, Return: ret}
	if err != nil {
		switch status.Code(err) {
		case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.Aborted, codes.PermissionDenied,
			codes.Unauthenticated, codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented:
			r.refusedWrites++
			return
		}
		op.Return = math.MaxInt64
		op.Err = err.Error()
		r.indeterminate++
	}
	r.ops = append(r.ops, op)
}

// Ops returns the recorded operations in invocation order.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]Op(nil), r.ops...)
	sort.Slice(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

// Stats describes the history: operations kept, reads dropped, writes
// refused and indeterminate writes.
func (r *Recorder) Stats() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("%d operations (%d indeterminate writes), %d failed reads and %d refused writes dropped",
		len(r.ops), r.indeterminate, r.failedReads, r.refusedWrites)
}

// Model is a set of registers, each starting empty (""), partitioned by
// key: a history is linearizable when each register's is.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return "" },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		in := input.(Input)
		if in.Write {
			return true, in.Value
		}
		return output.(Output).Value == state.(string), state
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(Input)
		if in.Write {
			return fmt.Sprintf("write(%s, %q)", in.Key, in.Value)
		}
		return fmt.Sprintf("read(%s) -> %q", in.Key, output.(Output).Value)
	},
	DescribeState: func(state interface{}) string { return fmt.Sprintf("%q", state) },
}

// Result is a check's outcome.
type Result struct {
	// Outcome is porcupine's: Ok, Illegal, or Unknown (timed out).
	Outcome porcupine.CheckResult
	// Bounded and Dropped count the indeterminate writes Narrow gave a
	// return time and the ones it left out.
	Bounded, Dropped int
	// HistoryFile and VisualizationFile are set when the history was
	// saved (always for Illegal).
	HistoryFile, VisualizationFile string
}

// Check checks ops; an Illegal history is saved into dir as history.json
// and linearizability.html (porcupine's visualisation) and returned as
// an error naming them. Unknown (the search timed out) is not an error.
func Check(ops []Op, dir string, timeout time.Duration) (Result, error) {
	narrowed, bounded, dropped := Narrow(ops)
	history := make([]porcupine.Operation, 0, len(narrowed))
	for _, op := range narrowed {
		history = append(history, porcupine.Operation{ClientId: op.Client, Input: op.Input, Output: op.Output, Call: op.Call, Return: op.Return})
	}
	outcome, info := porcupine.CheckOperationsVerbose(Model, history, timeout)
	res := Result{Outcome: outcome, Bounded: bounded, Dropped: dropped}
	if outcome != porcupine.Illegal {
		return res, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, fmt.Errorf("history is not linearizable; saving it: %w", err)
	}
	res.HistoryFile = filepath.Join(dir, "history.json")
	res.VisualizationFile = filepath.Join(dir, "linearizability.html")
	b, err := json.MarshalIndent(ops, "", " ")
	if err != nil {
		return res, fmt.Errorf("history is not linearizable; encoding it: %w", err)
	}
	if err := os.WriteFile(res.HistoryFile, b, 0o644); err != nil {
		return res, fmt.Errorf("history is not linearizable; saving it: %w", err)
	}
	if err := porcupine.VisualizePath(Model, info, res.VisualizationFile); err != nil {
		return res, fmt.Errorf("history is not linearizable (saved in %s); visualising it: %w", res.HistoryFile, err)
	}
	return res, fmt.Errorf("history of %d operations is not linearizable%s: saved in %s, visualised in %s", len(ops), unwritten(ops), res.HistoryFile, res.VisualizationFile)
}

// kv is a value of one register.
type kv struct{ key, value string }

// unwritten names the reads that returned a value no recorded write
// wrote, the first thing to rule out in an Illegal history (a write the
// recorder never saw), as ", N reads of values no recorded write wrote
// (key=value, ...)", or "" when there are none. CI keeps the log, not
// the saved files.
func unwritten(ops []Op) string {
	written := map[kv]bool{}
	for _, op := range ops {
		if op.Input.Write {
			written[kv{op.Input.Key, op.Input.Value}] = true
		}
	}
	var n int
	var names []string
	for _, op := range ops {
		k := kv{op.Input.Key, op.Output.Value}
		if op.Input.Write || k.value == "" || written[k] {
			continue
		}
		if n++; len(names) < 3 {
			names = append(names, fmt.Sprintf("%s=%q", k.key, k.value))
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d reads of values no recorded write wrote (%s)", n, strings.Join(names, ", "))
}

// Narrow returns ops with each indeterminate write whose value is unique
// on its key (written by no other write, and not the initial "") either
// bounded or left out, and says how many of each. Both keep the verdict
// exactly and spare porcupine the search over open-ended writes, which
// grows too fast to finish once a history holds a few dozen of them:
//   - Read by some read: the write took effect before every read that
//     returned its value, so it returned, at the latest, when the first
//     of those did.
//   - Read by none: it can take effect after everything else, where it
//     changes no read, so the history is linearizable with it exactly
//     when it is without it.
//
// A write whose value was read before the write was called keeps its
// infinite return: that history is not linearizable, and stays so.
func Narrow(ops []Op) (out []Op, bounded, dropped int) {
	writes := map[kv]int{}
	firstRead := map[kv]int64{}
	for _, op := range ops {
		k := kv{op.Input.Key, op.Input.Value}
		if op.Input.Write {
			writes[k]++
			continue
		}
		k.value = op.Output.Value
		if r, ok := firstRead[k]; !ok || op.Return < r {
			firstRead[k] = op.Return
		}
	}
	out = make([]Op, 0, len(ops))
	for _, op := range ops {
		k := kv{op.Input.Key, op.Input.Value}
		if !op.Input.Write || op.Return != math.MaxInt64 || k.value == "" || writes[k] != 1 {
			out = append(out, op)
			continue
		}
		r, read := firstRead[k]
		switch {
		case !read:
			dropped++
			continue
		case r >= op.Call:
			op.Return = r
			bounded++
		}
		out = append(out, op)
	}
	return out, bounded, dropped
}
