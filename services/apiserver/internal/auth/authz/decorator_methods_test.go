package authz

import (
	"os"
	"strings"
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TestDecoratorCoversEveryRPC: every method of the Resources service has
// its own Decorator method. One left to the embedded
// UnimplementedResourcesServer would answer Unimplemented, so a new RPC
// must be authorized here before it works at all.
func TestDecoratorCoversEveryRPC(t *testing.T) {
	src, err := os.ReadFile("decorator.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range kplanev1.Resources_ServiceDesc.Methods {
		names = append(names, m.MethodName)
	}
	for _, s := range kplanev1.Resources_ServiceDesc.Streams {
		names = append(names, s.StreamName)
	}
	for _, n := range names {
		if !strings.Contains(string(src), "func (d *Decorator) "+n+"(") {
			t.Errorf("RPC %s has no Decorator method: it is neither authorized nor served", n)
		}
	}
}
