package strategy

import (
	"testing"

	"google.golang.org/protobuf/proto"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// BenchmarkPodCreateStrategy is the strategy's share of every pod Create:
// PrepareForCreate, Default and Validate of a valid pod with resources,
// as the apiserver runs them. Its allocations feed the apiserver's
// garbage collector on every create (`go test -bench PodCreateStrategy
// -benchmem ./strategy/` from pkg).
func BenchmarkPodCreateStrategy(b *testing.B) {
	s := For("Pod").(interface {
		Strategy
		PrepareForCreate(*kplanev1.Object)
	})
	objs := make([]*kplanev1.Object, b.N)
	for i := range objs {
		objs[i] = kplanev1.MustWrap(proto.Clone(validPod()).(*kplanev1.Pod))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s.PrepareForCreate(objs[i])
		s.Default(objs[i])
		if errs := s.Validate(objs[i]); len(errs) != 0 {
			b.Fatalf("valid pod rejected: %v", errs)
		}
	}
}
