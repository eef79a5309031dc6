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

// AttrMatcher is a Matcher that can also judge an object by the
// attributes the cache keeps beside its wire form (namespace, labels,
// some fields), so selecting by them decodes nothing.
type AttrMatcher interface {
	Matcher
	// MatchesAttributes reports whether the object with attributes a
	// matches; decided is false when that takes the decoded object (a
	// field selector on a field a lacks), which then goes to Matches.
	MatchesAttributes(a store.Attributes) (match, decided bool)
}

// The server's selectors judge by attributes.
var _ AttrMatcher = (*store.Filter)(nil)

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
	// EncodedOnly says the sender reads only the encoded object when it
	// is given (it sends those bytes): the initial ADDED events then carry
	// no decoded Object, and the current objects are not decoded to send
	// them.
	EncodedOnly bool
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
	var initial, undecided []*entry
	var pos uint64
	sent := opts.FromRev
	floor := opts.FromRev
	if opts.Initial {
		initial, undecided = c.selectLocked("", opts.Filter)
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

	// The objects the filter judges by more than their attributes are
	// decoded once, to match and to send.
	objs := map[*entry]*kplanev1.Object{}
	for _, e := range undecided {
		obj, err := e.decode()
		if err == nil && opts.Filter.Matches(obj) {
			initial = append(initial, e)
			objs[e] = obj
		}
	}
	sort.Slice(initial, func(i, j int) bool { return initial[i].key < initial[j].key })
	for _, e := range initial {
		r := &kplanev1.WatchResponse{Type: kplanev1.EventType_EVENT_TYPE_ADDED, Object: objs[e], ResourceVersion: store.FormatRevision(e.rev)}
		if r.Object == nil && !opts.EncodedOnly {
			obj, err := e.decode()
			if err != nil {
				return status.Errorf(codes.Internal, "watch: %v", err)
			}
			r.Object = obj
		}
		if err := send(r, e.b); err != nil {
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
			r, err := transform(e, opts)
			if err != nil {
				return err
			}
			if r != nil {
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
// DELETED, as in Kubernetes. Both states are judged by their attributes
// when the filter can; otherwise the previous state is decoded once per
// event and the new one once for this watcher, which is also the copy it
// is sent unless it sends only the encoded object.
func transform(e *Event, opts WatchOptions) (*kplanev1.WatchResponse, error) {
	f := opts.Filter
	rv := store.FormatRevision(e.Rev)
	was := e.prev != nil && matchEntry(f, e.prev, e.Prev)
	if e.Type == kplanev1.EventType_EVENT_TYPE_DELETED {
		if !was {
			return nil, nil
		}
		return &kplanev1.WatchResponse{Type: e.Type, Object: e.obj, ResourceVersion: rv}, nil
	}
	var obj *kplanev1.Object
	var decodeErr error
	decode := func() *kplanev1.Object {
		if obj == nil && decodeErr == nil {
			obj, decodeErr = e.Object()
		}
		return obj
	}
	is := matchEntry(f, e.cur, decode)
	if decodeErr != nil {
		return nil, status.Errorf(codes.Internal, "watch: %v", decodeErr)
	}
	r := &kplanev1.WatchResponse{ResourceVersion: rv}
	switch {
	case is && was:
		r.Type = kplanev1.EventType_EVENT_TYPE_MODIFIED
	case is:
		r.Type = kplanev1.EventType_EVENT_TYPE_ADDED
	case was:
		r.Type = kplanev1.EventType_EVENT_TYPE_DELETED
	default:
		return nil, nil
	}
	if !opts.EncodedOnly {
		if r.Object = decode(); decodeErr != nil {
			return nil, status.Errorf(codes.Internal, "watch: %v", decodeErr)
		}
	}
	return r, nil
}
