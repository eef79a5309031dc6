// Command leakctl is the test-only misbehaving loop (internal/leakctl) in
// a process of its own, for make bench-mono.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/test/e2e/internal/leakctl"
)

func main() { app.Main(leakctl.NewService()) }
