// Command statefulsetctl runs the StatefulSet controller: pods with stable
// ordinal identities, each with its own PersistentVolumeClaims, created,
// replaced and removed in order.
package main

import (
	"github.com/kplane/kplane/pkg/app"

	"github.com/kplane/kplane/services/statefulsetctl/statefulset"
)

func main() { app.Main(statefulset.NewService()) }
