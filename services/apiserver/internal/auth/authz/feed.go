package authz

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/store"
	"github.com/kplane/kplane/services/apiserver/internal/watchcache"
)

// Source is one kind's current objects and their changes: the
// apiserver's watch cache of the kind.
type Source interface {
	Snapshot() ([]*kplanev1.Object, int64)
	Watch(ctx context.Context, opts watchcache.WatchOptions, send watchcache.Sender) error
}

// Sink is an index fed from a Source.
type Sink interface {
	Reset(kind string, objs []*kplanev1.Object)
	Apply(o *kplanev1.Object, deleted bool)
}

type everything struct{}

func (everything) Matches(*kplanev1.Object) bool { return true }

// MatchesAttributes implements watchcache.AttrMatcher: the cache need
// not decode an event's previous state to know it matched.
func (everything) MatchesAttributes(store.Attributes) (match, decided bool) { return true, true }

var _ watchcache.AttrMatcher = everything{}

// Feed keeps sinks up to date with their kinds' watch caches: a snapshot,
// then every change from its revision on, again from a fresh snapshot
// whenever the watch must start over.
type Feed struct {
	log  hclog.Logger
	mu   sync.Mutex
	revs map[string]int64
	// changed is closed and replaced when a revision advances.
	changed chan struct{}
	wg      sync.WaitGroup
}

// NewFeed loads each kind's snapshot into its sink synchronously (so the
// indexes are complete when it returns), then follows the changes until
// ctx ends; Wait returns once every follower stopped.
func NewFeed(ctx context.Context, sources map[string]Source, sinks map[string]Sink, log hclog.Logger) (*Feed, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	f := &Feed{log: log, revs: map[string]int64{}, changed: make(chan struct{})}
	type start struct {
		kind string
		src  Source
		sink Sink
		rev  int64
	}
	var starts []start
	for kind, sink := range sinks {
		src, ok := sources[kind]
		if !ok {
			return nil, fmt.Errorf("authorization index: no watch cache for %s", kind)
		}
		objs, rev := src.Snapshot()
		sink.Reset(kind, objs)
		f.advance(kind, rev)
		starts = append(starts, start{kind, src, sink, rev})
	}
	for _, s := range starts {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.follow(ctx, s.kind, s.src, s.sink, s.rev)
		}()
	}
	return f, nil
}

// Wait blocks until every follower stopped (after ctx ended).
func (f *Feed) Wait() { f.wg.Wait() }

func (f *Feed) advance(kind string, rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rev > f.revs[kind] {
		f.revs[kind] = rev
		close(f.changed)
		f.changed = make(chan struct{})
	}
}

// WaitForRevision blocks until every followed kind's index reflects
// every change up to rev.
func (f *Feed) WaitForRevision(ctx context.Context, rev int64) error {
	for {
		f.mu.Lock()
		ch, behind := f.changed, ""
		for k, r := range f.revs {
			if r < rev {
				behind = k
				break
			}
		}
		f.mu.Unlock()
		if behind == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("authorization index of %s behind revision %d: %w", behind, rev, ctx.Err())
		case <-ch:
		}
	}
}

func (f *Feed) follow(ctx context.Context, kind string, src Source, sink Sink, rev int64) {
	for {
		err := src.Watch(ctx, watchcache.WatchOptions{Filter: everything{}, FromRev: rev, BookmarkInterval: time.Second},
			func(r *kplanev1.WatchResponse, _ []byte) error {
				switch r.GetType() {
				case kplanev1.EventType_EVENT_TYPE_ADDED, kplanev1.EventType_EVENT_TYPE_MODIFIED:
					sink.Apply(r.GetObject(), false)
				case kplanev1.EventType_EVENT_TYPE_DELETED:
					sink.Apply(r.GetObject(), true)
				case kplanev1.EventType_EVENT_TYPE_ERROR:
					return fmt.Errorf("watch %s: %s", kind, r.GetError())
				}
				if v, err := store.ParseRevision(r.GetResourceVersion()); err == nil {
					f.advance(kind, v)
				}
				return nil
			})
		if ctx.Err() != nil {
			return
		}
		// The watch cannot resume (too old, too slow, cache reloaded):
		// start over from a fresh snapshot, which also drops objects
		// deleted while it was not following.
		f.log.Warn("authorization index restarting its watch", "kind", kind, "error", err)
		objs, r := src.Snapshot()
		sink.Reset(kind, objs)
		f.advance(kind, r)
		rev = r
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
