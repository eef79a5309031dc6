package watchcache

import (
	"context"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/store"
)

// Matcher selects the objects a watcher sees.
type Matcher interface {
	Matches(obj *kplanev1.Object) bool
}

// WatchOptions describe one client watch.
type WatchOptions struct {
	Filter Matcher
	// FromRev streams every change after it. Ignored when Initial.
	FromRev int64
	// Initial first sends an ADDED event for each current object.
	Initial bool
	// BookmarkInterval > 0 sends BOOKMARK events that carry the current
	// revision when nothing else was sent for that long.
	BookmarkInterval time.Duration
}

// Sender delivers one event to a watcher. encodedObject, when not nil,
// is r.Object already marshalled (shared: do not modify).
type Sender func(r *kplanev1.WatchResponse, encodedObject []byte) error

// batchSize bounds how many events a watcher copies per lock.
const batchSize = 256

// Watch streams events to send until ctx ends, send fails, or the
// watcher must start over: OutOfRange (too old, or the cache reloaded)
// or ResourceExhausted (it fell a whole ring behind).
func (c *Cache) Watch(ctx context.Context, opts WatchOptions, send Sender) error {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil
	}
	c.mu.RLock()
	epoch := c.epoch
	var initial []*wireForm
	var pos uint64
	sent := opts.FromRev
	floor := opts.FromRev
	if opts.Initial {
		for _, w := range c.state {
			if opts.Filter.Matches(w.obj) {
				initial = append(initial, w)
			}
		}
		pos, sent, floor = c.next, c.rev, c.rev
	} else {
		if opts.FromRev < c.windowStart {
			window := c.windowStart
			c.mu.RUnlock()
			return errTooOld(opts.FromRev, window)
		}
		pos = c.seqAfter(opts.FromRev)
	}
	c.mu.RUnlock()

	sort.Slice(initial, func(i, j int) bool { return initial[i].obj.Key() < initial[j].obj.Key() })
	for _, w := range initial {
		o := w.obj
		if err := send(&kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_ADDED, Object: o, ResourceVersion: o.Meta().ResourceVersion}, w.get()); err != nil {
			return err
		}
	}

	var tick <-chan time.Time
	if opts.BookmarkInterval > 0 {
		t := time.NewTicker(opts.BookmarkInterval)
		defer t.Stop()
		tick = t.C
	}
	batch := make([]*Event, 0, batchSize)
	for {
		c.mu.RLock()
		if c.epoch != epoch {
			c.mu.RUnlock()
			return status.Error(codes.OutOfRange, "the watch cache was reloaded after etcd compaction; list again")
		}
		if pos < c.oldest() {
			behind := c.next - pos
			c.mu.RUnlock()
			return status.Errorf(codes.ResourceExhausted, "watcher too slow: %d events behind, more than the cache holds; watch again from the last resourceVersion received", behind)
		}
		batch = batch[:0]
		for s := pos; s < c.next && len(batch) < batchSize; s++ {
			batch = append(batch, c.ring[s%uint64(len(c.ring))])
		}
		notify, rev := c.notify, c.rev
		c.mu.RUnlock()

		for _, e := range batch {
			// The cache may not have reached FromRev when the watch began
			// (the client read its revision from a write or a list that
			// etcd acknowledged first); events up to it are not news.
			if e.Rev <= floor {
				pos++
				continue
			}
			if r := transform(e, opts.Filter); r != nil {
				if err := send(r, e.Encoded()); err != nil {
					return err
				}
			}
			sent = e.Rev
			pos++
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-notify:
		case <-tick:
			// Caught up (the ring was empty past pos under the lock), so
			// nothing at or below rev is still unsent.
			if rev > sent {
				if err := send(&kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_BOOKMARK, ResourceVersion: store.FormatRevision(rev)}, nil); err != nil {
					return err
				}
				sent = rev
			}
		}
	}
}

// transform turns a cache event into what one watcher sees: an object
// that starts matching its selectors is ADDED, one that stops matching is
// DELETED, as in Kubernetes.
func transform(e *Event, f Matcher) *kplanev1.WatchResponse {
	rv := store.FormatRevision(e.Rev)
	was := e.Prev != nil && f.Matches(e.Prev)
	switch e.Type {
	case kplanev1.EventType_EVENT_TYPE_DELETED:
		if !was {
			return nil
		}
		return &kplanev1.WatchResponse{Type: e.Type, Object: e.Object, ResourceVersion: rv}
	default:
		is := f.Matches(e.Object)
		switch {
		case is && was:
			return &kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_MODIFIED, Object: e.Object, ResourceVersion: rv}
		case is:
			return &kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_ADDED, Object: e.Object, ResourceVersion: rv}
		case was:
			return &kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_DELETED, Object: e.Object, ResourceVersion: rv}
		}
		return nil
	}
}
