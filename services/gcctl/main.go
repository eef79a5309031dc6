// Command gcctl is the garbage collector: it deletes objects whose owners
// are gone (background cascade) and finishes the deletions that the
// apiserver marked with the orphan and foregroundDeletion finalizers.
// Like every kplane controller it is its own leader-elected process.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/gcctl/garbagecollector"
)

func main() { app.Main(garbagecollector.NewService()) }
