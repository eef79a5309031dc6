package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kplane/kplane/pkg/testutil"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// watchGate is client-go's transport in TestClientGoInformerExactlyOnceAcrossExpiry:
// it can end the running watch as a server does when timeoutSeconds
// passes (a clean end of the stream, so the reflector resumes from its
// last resourceVersion instead of relisting), hold the reflector's next
// watch until the test has compacted past that resourceVersion, and it
// records what the apiserver answered (the 410 ERROR event, the relist).
type watchGate struct {
	next http.RoundTripper

	mu       sync.Mutex
	body     *endableBody  // the running watch's response body
	hold     chan struct{} // non-nil: new watches wait until it is closed
	lists    int           // LIST requests answered
	gone     bool          // a watch stream carried a 410 ERROR event
	relisted chan struct{} // closed when the second LIST is answered
}

func (g *watchGate) RoundTrip(req *http.Request) (*http.Response, error) {
	watching := req.URL.Query().Get("watch") == "true"
	if watching {
		g.mu.Lock()
		hold := g.hold
		g.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		}
	}
	resp, err := g.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if watching {
		b := &endableBody{ReadCloser: resp.Body, ended: make(chan struct{}), gate: g}
		g.body = b
		resp.Body = b
	} else if req.Method == http.MethodGet {
		g.lists++
		if g.lists == 2 {
			close(g.relisted)
		}
	}
	return resp, nil
}

// endWatch ends the running watch cleanly and holds the next one.
func (g *watchGate) endWatch() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold = make(chan struct{})
	if g.body != nil {
		g.body.end()
	}
}

// release lets the held watch go to the apiserver.
func (g *watchGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.hold)
	g.hold = nil
}

func (g *watchGate) sawGone() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gone
}

// endableBody is a watch response body that reads io.EOF once ended and
// notes a 410 ERROR event passing through.
type endableBody struct {
	io.ReadCloser
	gate  *watchGate
	once  sync.Once
	ended chan struct{}
	tail  []byte // the end of the previous read, for a line split across reads
}

func (b *endableBody) end() { b.once.Do(func() { close(b.ended) }) }

func (b *endableBody) Read(p []byte) (int, error) {
	select {
	case <-b.ended:
		return 0, io.EOF
	default:
	}
	n, err := b.ReadCloser.Read(p)
	seen := append(b.tail, p[:n]...)
	if bytes.Contains(seen, []byte(`"type":"ERROR"`)) && bytes.Contains(seen, []byte(`"code":410`)) {
		b.gate.mu.Lock()
		b.gate.gone = true
		b.gate.mu.Unlock()
	}
	if len(seen) > 256 {
		seen = seen[len(seen)-256:]
	}
	b.tail = append([]byte(nil), seen...)
	return n, err
}

// write is one acknowledged write of the test's writer.
type write struct {
	name string
	op   string // create, update, delete
	rv   int64
}

// TestClientGoInformerExactlyOnceAcrossExpiry: a SharedInformerFactory's
// handler sees every change once across a forced watch expiry. While a
// writer keeps creating, updating and deleting Leases, the running watch
// ends (as at a server timeout), etcd is compacted past the reflector's
// resourceVersion, and the reflector's resumed watch gets the 410 Gone
// ERROR event; client-go relists and carries on. Then: the handler's
// view equals the store's final state; no resourceVersion is delivered
// twice as a change; every write is seen except one that a later write
// of the same object superseded between the expiry and the relist (a
// list shows only the latest state, in Kubernetes too); every deletion
// is seen once, but for an object that lived only within that window.
func TestClientGoInformerExactlyOnceAcrossExpiry(t *testing.T) {
	srv := testserver.Start(t)
	gate := &watchGate{relisted: make(chan struct{})}
	cfg := &rest.Config{Host: "http://" + srv.Addr(), WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		gate.next = rt
		return gate
	}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writer := clientset(t, srv).CoordinationV1().Leases("default")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	type change struct {
		name, typ string
		rv        int64
	}
	var mu sync.Mutex
	view := map[string]int64{}
	var changes []change
	syncs := 0
	rvOf := func(o any) (string, int64) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		l := o.(*coordinationv1.Lease)
		rv, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
		if err != nil {
			t.Errorf("lease %s: resourceVersion %q", l.Name, l.ResourceVersion)
		}
		return l.Name, rv
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Coordination().V1().Leases().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			name, rv := rvOf(o)
			mu.Lock()
			defer mu.Unlock()
			view[name] = rv
			changes = append(changes, change{name, "add", rv})
		},
		UpdateFunc: func(old, o any) {
			_, oldRV := rvOf(old)
			name, rv := rvOf(o)
			mu.Lock()
			defer mu.Unlock()
			view[name] = rv
			if oldRV == rv {
				syncs++ // a relist's replay of an object it already had
				return
			}
			changes = append(changes, change{name, "update", rv})
		},
		DeleteFunc: func(o any) {
			name, rv := rvOf(o)
			mu.Lock()
			defer mu.Unlock()
			delete(view, name)
			changes = append(changes, change{name, "delete", rv})
		},
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	defer func() {
		cancel()
		f.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}

	// The writer: lease i is created, lease i-1 updated, and every
	// fourth step lease i-3 deleted, so all three kinds of change cross
	// the expiry.
	var wmu sync.Mutex
	var writes []write
	afterRelist := int64(0) // the first write begun after the relist was answered
	writerDone := make(chan struct{})
	stopWriting := make(chan struct{})
	go func() {
		defer close(writerDone)
		record := func(name, op, rv string, begunAfterRelist bool) {
			n, _ := strconv.ParseInt(rv, 10, 64)
			wmu.Lock()
			defer wmu.Unlock()
			writes = append(writes, write{name, op, n})
			if begunAfterRelist && afterRelist == 0 {
				afterRelist = n
			}
		}
		relisted := func() bool {
			select {
			case <-gate.relisted:
				return true
			default:
				return false
			}
		}
		for i := 0; ; i++ {
			select {
			case <-stopWriting:
				return
			default:
			}
			name := fmt.Sprintf("w-%d", i)
			after := relisted()
			holder := "h0"
			l, err := writer.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: int32p(10)}}, metav1.CreateOptions{})
			if err != nil {
				t.Errorf("create %s: %v", name, err)
				return
			}
			record(name, "create", l.ResourceVersion, after)
			if i > 0 {
				prev := fmt.Sprintf("w-%d", i-1)
				after := relisted()
				holder := fmt.Sprintf("h%d", i)
				l, err := writer.Get(ctx, prev, metav1.GetOptions{})
				if err == nil {
					l.Spec.HolderIdentity = &holder
					l, err = writer.Update(ctx, l, metav1.UpdateOptions{})
				}
				if err != nil {
					t.Errorf("update %s: %v", prev, err)
					return
				}
				record(prev, "update", l.ResourceVersion, after)
			}
			if i%4 == 3 {
				gone := fmt.Sprintf("w-%d", i-3)
				after := relisted()
				if err := writer.Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
					t.Errorf("delete %s: %v", gone, err)
					return
				}
				record(gone, "delete", "0", after) // deletions are counted by object
			}
		}
	}()
	written := func() int {
		wmu.Lock()
		defer wmu.Unlock()
		return len(writes)
	}
	seenChanges := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(changes)
	}
	testutil.Eventually(t, 30*time.Second, "the handler to see writes", func() bool { return seenChanges() >= 20 })

	// Expire the watch: end it, let writes go on while the reflector's
	// resumed watch is held, then compact past everything it has seen.
	mu.Lock()
	seenAtCut := int64(0)
	for _, c := range changes {
		seenAtCut = max(seenAtCut, c.rv)
	}
	mu.Unlock()
	gate.endWatch()
	atCut := written()
	testutil.Eventually(t, 30*time.Second, "writes during the expiry", func() bool { return written() >= atCut+20 })
	compacted, err := srv.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if compacted <= seenAtCut {
		t.Fatalf("compacted to %d, not past the handler's %d", compacted, seenAtCut)
	}
	gate.release()
	select {
	case <-gate.relisted:
	case <-time.After(30 * time.Second):
		t.Fatal("client-go did not relist after the expiry")
	}
	atRelist := written()
	testutil.Eventually(t, 30*time.Second, "writes after the relist", func() bool { return written() >= atRelist+20 })
	close(stopWriting)
	<-writerDone
	if t.Failed() {
		return
	}
	if !gate.sawGone() {
		t.Fatal("the resumed watch did not carry a 410 Gone ERROR event")
	}

	// The handler's view converges on the store's final state.
	final, err := writer.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, l := range final.Items {
		want[l.Name], _ = strconv.ParseInt(l.ResourceVersion, 10, 64)
	}
	viewString := func(m map[string]int64) string {
		var b strings.Builder
		for k, v := range m {
			fmt.Fprintf(&b, "%s=%d ", k, v)
		}
		return b.String()
	}
	testutil.Eventually(t, 30*time.Second, "the handler's view to equal the store", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(view) != len(want) {
			return false
		}
		for k, v := range want {
			if view[k] != v {
				return false
			}
		}
		return true
	})

	mu.Lock()
	defer mu.Unlock()
	wmu.Lock()
	defer wmu.Unlock()
	t.Logf("%d writes, %d changes seen, %d relist syncs, compacted to %d, first write after the relist %d",
		len(writes), len(changes), syncs, compacted, afterRelist)
	// No change is delivered twice: a create or update by its
	// resourceVersion, a deletion by its object.
	byRV := map[int64]int{}
	deleted := map[string]int{}
	delivered := map[string]bool{} // an add or update of the object was delivered
	for _, c := range changes {
		if c.typ == "delete" {
			deleted[c.name]++
		} else {
			byRV[c.rv]++
			delivered[c.name] = true
		}
	}
	for rv, n := range byRV {
		if n != 1 {
			t.Errorf("resourceVersion %d delivered %d times", rv, n)
		}
	}
	// Every write is seen, unless a later write of the same object
	// superseded it between the expiry and the relist.
	lastWrite := map[string]write{}
	created := map[string]int64{}
	for _, w := range writes {
		lastWrite[w.name] = w
		if w.op == "create" {
			created[w.name] = w.rv
		}
	}
	for i, w := range writes {
		switch w.op {
		case "delete":
			// An object created and deleted between the expiry and the
			// relist is never seen at all; any other deletion is seen once.
			if deleted[w.name] != 1 && (deleted[w.name] != 0 || delivered[w.name] || created[w.name] <= seenAtCut) {
				t.Errorf("deletion of %s delivered %d times", w.name, deleted[w.name])
			}
			continue
		}
		if byRV[w.rv] == 1 {
			continue
		}
		superseded := false
		for _, later := range writes[i+1:] {
			if later.name == w.name {
				superseded = true
				break
			}
		}
		inWindow := w.rv > seenAtCut && (afterRelist == 0 || w.rv < afterRelist)
		if !superseded || !inWindow {
			t.Errorf("%s of %s at rev %d never delivered (superseded %v, between the expiry %d and the relist %d: %v)",
				w.op, w.name, w.rv, superseded, seenAtCut, afterRelist, inWindow)
		}
	}
	for name, n := range deleted {
		if lastWrite[name].op != "delete" {
			t.Errorf("%s delivered as deleted %d times but it was not deleted", name, n)
		}
	}
	if t.Failed() {
		t.Logf("view: %s", viewString(view))
	}
}
