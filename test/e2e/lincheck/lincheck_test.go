package lincheck

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func read(client int, key, v string, call, ret int64) Op {
	return Op{Client: client, Input: Input{Key: key}, Output: Output{Value: v}, Call: call, Return: ret}
}

func write(client int, key, v string, call, ret int64) Op {
	return Op{Client: client, Input: Input{Key: key, Write: true, Value: v}, Call: call, Return: ret}
}

// TestCatchesAStaleRead: a read that begins after a write returned and
// still sees the old value is not linearizable; the checker says so and
// saves the history with its visualisation.
func TestCatchesAStaleRead(t *testing.T) {
	dir := t.TempDir()
	ops := []Op{
		write(0, "x", "1", 0, 10),
		read(1, "x", "", 20, 30), // stale: the write completed at 10
		write(0, "y", "a", 0, 5),
		read(1, "y", "a", 6, 7),
	}
	res, err := Check(ops, dir, time.Minute)
	if err == nil || res.Outcome != porcupine.Illegal {
		t.Fatalf("stale read: %v %v, want Illegal and an error", res.Outcome, err)
	}
	if !strings.Contains(err.Error(), "not linearizable") {
		t.Fatalf("error %v", err)
	}
	for _, f := range []string{res.HistoryFile, res.VisualizationFile} {
		b, rerr := os.ReadFile(f)
		if rerr != nil || len(b) == 0 {
			t.Fatalf("saved file %s: %v", f, rerr)
		}
	}
	if b, _ := os.ReadFile(res.VisualizationFile); !strings.Contains(string(b), "<html") {
		t.Fatalf("visualisation is not HTML")
	}
}

// TestCatchesAReadGoingBackwards: two reads that both follow a write and
// see new then old value are not linearizable, even with no stale read
// relative to the write alone.
func TestCatchesAReadGoingBackwards(t *testing.T) {
	ops := []Op{
		write(0, "x", "1", 0, 100), // concurrent with both reads
		read(1, "x", "1", 10, 20),
		read(2, "x", "", 30, 40), // after a read saw "1"
	}
	if res, err := Check(ops, t.TempDir(), time.Minute); err == nil || res.Outcome != porcupine.Illegal {
		t.Fatalf("backwards reads: %v %v, want Illegal", res.Outcome, err)
	}
}

// TestAcceptsLinearizableHistories: concurrent operations may take
// effect in either order, and an indeterminate write may take effect
// late or never.
func TestAcceptsLinearizableHistories(t *testing.T) {
	ops := []Op{
		write(0, "x", "1", 0, 50),
		read(1, "x", "", 10, 20), // before the concurrent write took effect
		read(2, "x", "1", 30, 40),
		{Client: 3, Input: Input{Key: "x", Write: true, Value: "2"}, Call: 60, Return: math.MaxInt64, Err: "Unavailable"},
		read(1, "x", "1", 70, 80),  // the indeterminate write not yet applied...
		read(2, "x", "2", 90, 100), // ...applied now
		read(0, "y", "", 0, 1),
	}
	res, err := Check(ops, t.TempDir(), time.Minute)
	if err != nil || res.Outcome != porcupine.Ok {
		t.Fatalf("linearizable history: %v %v", res.Outcome, err)
	}
}

// TestRecorder: failed reads and refused writes are dropped, a write
// failing Unavailable is kept as indeterminate.
func TestRecorder(t *testing.T) {
	r := NewRecorder()
	r.Write(0, "x", "1", r.Now(), nil)
	r.Write(0, "x", "2", r.Now(), statusErr("Unavailable"))
	r.Write(0, "x", "3", r.Now(), statusErr("Aborted"))
	r.Read(1, "x", r.Now(), "", statusErr("Unavailable"))
	r.Read(1, "x", r.Now(), "1", nil)
	ops := r.Ops()
	if len(ops) != 3 || ops[1].Return != math.MaxInt64 || ops[1].Err == "" {
		t.Fatalf("ops %+v", ops)
	}
	if s := r.Stats(); !strings.Contains(s, "3 operations (1 indeterminate writes), 1 failed reads and 1 refused writes") {
		t.Fatalf("stats %q", s)
	}
}
