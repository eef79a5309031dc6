// Command kcm-leak is kcm with the test-only misbehaving loop
// (internal/leakctl) among its controllers, for make bench-mono.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/kcm/kcm"
	"github.com/kplane/kplane/test/e2e/internal/leakctl"
)

func main() { app.MainHost(kcm.NewHost(leakctl.NewService())) }
