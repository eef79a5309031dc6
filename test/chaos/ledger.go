package main

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// state is what the store holds for one object name, as far as the
// ledger is concerned.
type state struct {
	exists bool
	// uid of the object; "" in a possible outcome means any uid (an
	// unacknowledged create whose uid was never returned).
	uid string
	// replicas is a ReplicaSet's spec.replicas (-1 when not tracked).
	replicas int32
	// data is a ledger Secret's payload ("" when not tracked).
	data string
}

func (s state) String() string {
	if !s.exists {
		return "absent"
	}
	var b strings.Builder
	b.WriteString("present")
	if s.uid != "" {
		fmt.Fprintf(&b, " uid=%s", s.uid)
	}
	if s.replicas >= 0 {
		fmt.Fprintf(&b, " replicas=%d", s.replicas)
	}
	if s.data != "" {
		fmt.Fprintf(&b, " data=%q", s.data)
	}
	return b.String()
}

// matches reports whether the stored object satisfies the expectation s.
func (s state) matches(got state) bool {
	if s.exists != got.exists {
		return false
	}
	if !s.exists {
		return true
	}
	if s.uid != "" && s.uid != got.uid {
		return false
	}
	if s.replicas >= 0 && s.replicas != got.replicas {
		return false
	}
	return s.data == "" || s.data == got.data
}

// record is the history of one object name that matters at the end: the
// state after the last acknowledged write, and the possible outcomes of
// the writes after it whose result is unknown (the call failed: the
// apiserver may or may not have committed it).
type record struct {
	acked state
	maybe []state
}

// ledger remembers every write the workload issued, keyed by
// "Kind/namespace/name". The store must end in the acknowledged state or
// in one of the unknown outcomes after it: an acknowledged write that is
// missing is a lost write.
type ledger struct {
	mu      sync.Mutex
	records map[string]*record
	acked   int
	unknown int
}

func newLedger() *ledger { return &ledger{records: map[string]*record{}} }

func ledgerKey(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// Ack records a write the apiserver acknowledged: the store now holds s.
func (l *ledger) Ack(key string, s state) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records[key] = &record{acked: s}
	l.acked++
}

// Unknown records a write whose outcome is unknown: the store holds the
// previous state or s.
func (l *ledger) Unknown(key string, s state) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.records[key]
	if !ok {
		// Nothing acknowledged yet: absent until proven otherwise.
		r = &record{acked: state{replicas: -1}}
		l.records[key] = r
	}
	r.maybe = append(r.maybe, s)
	l.unknown++
}

// Observe records a state read back from the store after every write to
// key returned: it resolves the unknown outcomes (the apiserver that
// might have committed them has answered since, or restarted).
func (l *ledger) Observe(key string, s state) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records[key] = &record{acked: s}
}

// Counts returns the number of acknowledged and unknown writes.
func (l *ledger) Counts() (acked, unknown int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked, l.unknown
}

// Verify compares the store (actual, keyed like the ledger; a key that is
// not in actual is absent) with the ledger and returns one violation per
// object whose stored state no write explains.
func (l *ledger) Verify(actual map[string]state) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for key, r := range l.records {
		got, ok := actual[key]
		if !ok {
			got = state{replicas: -1}
		}
		if r.acked.matches(got) {
			continue
		}
		explained := false
		for _, m := range r.maybe {
			if m.matches(got) {
				explained = true
				break
			}
		}
		if explained {
			continue
		}
		what := "lost write"
		if !r.acked.exists {
			what = "deleted object present"
		}
		out = append(out, fmt.Sprintf("ledger: %s: %s: acknowledged %s, store has %s", key, what, r.acked, got))
	}
	sort.Strings(out)
	return out
}
