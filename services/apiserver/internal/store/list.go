package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/fields"
	"github.com/kplane/kplane/pkg/labels"
)

// ListOptions select and page a List.
type ListOptions struct {
	Namespace     string
	LabelSelector string
	FieldSelector string
	Limit         int64
	Continue      string
	// ResourceVersion and ResourceVersionMatch choose the revision, as
	// kplanev1.ListRequest describes.
	ResourceVersion      string
	ResourceVersionMatch string
}

// ListResult is one page of a consistent snapshot.
type ListResult struct {
	Items          []*kplanev1.Object
	Revision       int64
	Continue       string
	RemainingCount int64
}

// continueToken remembers the snapshot revision and where the next page
// starts, so every page reads the same snapshot.
type continueToken struct {
	Rev   int64  `json:"rev"`
	Start string `json:"start"`
}

// Filter is a parsed label and field selector pair.
type Filter struct {
	Namespace string
	Label     labels.Selector
	Field     fields.Selector
	// fieldReqs is Field's requirements, kept by NewFilter so that
	// MatchesAttributes does not copy them per object.
	fieldReqs []fields.Requirement
}

// Attributes are what a Filter reads of an object it has not decoded:
// the watch cache keeps them beside each object's wire form.
type Attributes interface {
	Namespace() string
	Labels() map[string]string
	// Field returns the value of a field selector's path, rendered as
	// pkg/fields renders it, and false when it is not at hand.
	Field(path string) (value string, ok bool)
}

// NewFilter parses selectors for a kind, reporting which one is bad.
func NewFilter(k *kplanev1.KindInfo, namespace, labelSelector, fieldSelector string) (*Filter, error) {
	ls, err := labels.Parse(labelSelector)
	if err != nil {
		return nil, invalid("labelSelector: %v", err)
	}
	fs, err := fields.ParseSelector(k.Name, fieldSelector)
	if err != nil {
		return nil, invalid("fieldSelector: %v", err)
	}
	if !k.Namespaced {
		namespace = ""
	}
	return &Filter{Namespace: namespace, Label: ls, Field: fs, fieldReqs: fs.Requirements()}, nil
}

// MatchesAttributes is Matches judged from an object's attributes;
// decided is false when the field selector names a field they lack (and
// every field they have passes), so the decoded object must go through
// Matches. Namespace and labels alone never need the object.
func (f *Filter) MatchesAttributes(a Attributes) (match, decided bool) {
	if f.Namespace != "" && a.Namespace() != f.Namespace {
		return false, true
	}
	if !f.Label.Empty() && !f.Label.Matches(a.Labels()) {
		return false, true
	}
	if f.Field.Empty() {
		return true, true
	}
	reqs := f.fieldReqs
	if reqs == nil {
		reqs = f.Field.Requirements() // a Filter not made by NewFilter
	}
	decided = true
	for _, r := range reqs {
		got, ok := a.Field(r.Field)
		if !ok {
			decided = false
			continue
		}
		if (got == r.Value) != (r.Operator == fields.Equals) {
			return false, true
		}
	}
	return decided, decided
}

// Matches reports whether obj passes the namespace and both selectors.
func (f *Filter) Matches(obj *kplanev1.Object) bool {
	meta := obj.Meta()
	if f.Namespace != "" && meta.Namespace != f.Namespace {
		return false
	}
	if !f.Label.Empty() && !f.Label.Matches(meta.Labels) {
		return false
	}
	return f.Field.Empty() || f.Field.Matches(obj)
}

// Empty is true when the filter selects by namespace at most.
func (f *Filter) Empty() bool { return f.Label.Empty() && f.Field.Empty() }

// List reads a consistent snapshot of a kind, filtered and paged.
func (s *Store) List(ctx context.Context, kind string, opts ListOptions) (*ListResult, error) {
	k, filter, prefix, err := opts.Validate(kind)
	if err != nil {
		return nil, err
	}
	exact, atLeast, err := listRevision(opts)
	if err != nil {
		return nil, err
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	start, rev := prefix, exact
	if opts.Continue != "" {
		if rev, start, err = DecodeContinue(opts.Continue, prefix); err != nil {
			return nil, err
		}
	}

	res := &ListResult{}
	// Fetch in batches until the page is full; with selectors a batch may
	// hold fewer matches than it has keys.
	batch := opts.Limit
	if batch > 0 && !filter.Empty() && batch < 500 {
		batch = 500
	}
	for {
		getOpts := []clientv3.OpOption{clientv3.WithRange(end)}
		if rev > 0 {
			getOpts = append(getOpts, clientv3.WithRev(rev))
		}
		if batch > 0 {
			getOpts = append(getOpts, clientv3.WithLimit(batch))
		}
		resp, err := s.cli.Get(ctx, start, getOpts...)
		if err != nil && exact > 0 && isFutureRevision(err) {
			cur, cerr := s.CurrentRevision(ctx)
			if cerr != nil {
				return nil, cerr
			}
			return nil, tooLargeRevision(exact, cur)
		}
		if err != nil && exact > 0 && rev == exact && status.Code(backendError(ctx, "list", err)) == codes.OutOfRange {
			return nil, status.Errorf(codes.OutOfRange, "The resourceVersion for the provided list is too old: revision %d has been compacted", exact)
		}
		if err != nil {
			if status.Code(backendError(ctx, "list", err)) == codes.OutOfRange {
				return nil, status.Errorf(codes.OutOfRange, "continue: the list snapshot at revision %d has been compacted; start the list again", rev)
			}
			return nil, backendError(ctx, "list", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
			// etcd reads linearizably, so a revision the client saw
			// from this store is never newer than this one.
			if rev < atLeast {
				return nil, tooLargeRevision(atLeast, rev)
			}
		}
		for i, kv := range resp.Kvs {
			obj, err := Decode(kv.Value, kv.ModRevision)
			if err != nil {
				return nil, status.Errorf(codes.Internal, "list %s: key %s: %v", k.Name, kv.Key, err)
			}
			if !filter.Matches(obj) {
				continue
			}
			res.Items = append(res.Items, obj)
			if opts.Limit > 0 && int64(len(res.Items)) == opts.Limit {
				next := string(kv.Key) + "\x00"
				more := i < len(resp.Kvs)-1 || resp.More
				if more {
					res.Continue = encodeContinue(continueToken{Rev: rev, Start: next})
					if filter.Empty() {
						cnt, err := s.cli.Get(ctx, next, clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithCountOnly())
						if err != nil {
							return nil, backendError(ctx, "list", err)
						}
						res.RemainingCount = cnt.Count
					}
				}
				res.Revision = rev
				return res, nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	res.Revision = rev
	return res, nil
}

func encodeContinue(t continueToken) string {
	b, err := json.Marshal(t)
	if err != nil {
		panic(fmt.Sprintf("marshal continue token: %v", err)) // two plain fields cannot fail
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (continueToken, error) {
	var t continueToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil || t.Rev <= 0 || t.Start == "" {
		return t, invalid("continue: malformed token %q", s)
	}
	return t, nil
}

// Validate checks a List's options as List does, returning the kind, the
// parsed filter and the etcd key prefix of the selection.
func (o ListOptions) Validate(kind string) (*kplanev1.KindInfo, *Filter, string, error) {
	k, err := LookupKind(kind)
	if err != nil {
		return nil, nil, "", err
	}
	if o.Limit < 0 {
		return nil, nil, "", invalid("limit: must be greater than or equal to 0")
	}
	filter, err := NewFilter(k, o.Namespace, o.LabelSelector, o.FieldSelector)
	if err != nil {
		return nil, nil, "", err
	}
	return k, filter, ListPrefix(k, filter.Namespace), nil
}

// DecodeContinue reads a continue token of a List whose keys start with
// prefix: the snapshot's revision and the etcd key the page starts at.
func DecodeContinue(token, prefix string) (rev int64, start string, err error) {
	tok, err := decodeContinue(token)
	if err != nil {
		return 0, "", err
	}
	if !strings.HasPrefix(tok.Start, prefix) {
		return 0, "", invalid("continue: token does not belong to this list (key prefix %s)", prefix)
	}
	return tok.Rev, tok.Start, nil
}

// EncodeContinue makes the continue token of a page that ends before the
// etcd key start, in snapshot rev: the same token List makes, so either
// the watch cache or etcd can serve the next page.
func EncodeContinue(rev int64, start string) string {
	return encodeContinue(continueToken{Rev: rev, Start: start})
}
