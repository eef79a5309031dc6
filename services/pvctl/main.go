// Command pvctl is the PersistentVolume controller: it binds claims to
// fitting volumes, provisions local-path volumes for claims that no
// volume fits, reclaims volumes whose claims are gone (Retain or Delete),
// keeps storage in use from disappearing (the pvc-protection and
// pv-protection finalizers) and grows bound volumes whose claims ask for
// more. Like every kplane controller it is its own leader-elected process.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/pvctl/pv"
)

func main() { app.Main(pv.NewService()) }
