package store

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/pkg/apiutil"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// Encode serialises an object for etcd: the Object wrapper in protobuf
// binary (so a value names its own kind), without resourceVersion, which
// is the key's ModRevision and only exists on read.
func Encode(obj *kplanev1.Object) ([]byte, error) {
	meta := obj.Meta()
	rv := meta.ResourceVersion
	meta.ResourceVersion = ""
	b, err := proto.Marshal(obj)
	meta.ResourceVersion = rv
	if err != nil {
		return nil, fmt.Errorf("encode %s %q: %w", obj.KindName(), obj.Key(), err)
	}
	return b, nil
}

// Decode parses a stored value and stamps it with its revision.
func Decode(value []byte, modRevision int64) (*kplanev1.Object, error) {
	obj := &kplanev1.Object{}
	if err := proto.Unmarshal(value, obj); err != nil {
		return nil, fmt.Errorf("decode stored object: %w", err)
	}
	if obj.Info() == nil {
		return nil, fmt.Errorf("decode stored object: no kind set")
	}
	obj.Meta().ResourceVersion = FormatRevision(modRevision)
	return obj, nil
}

// FormatRevision renders an etcd revision as a resourceVersion.
func FormatRevision(rev int64) string {
	return strconv.FormatInt(rev, 10)
}

// ParseRevision parses a resourceVersion; "" is 0.
func ParseRevision(rv string) (int64, error) { return apiutil.ParseResourceVersion(rv) }
