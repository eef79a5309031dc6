// Command replicactl is the replication controller: it keeps the number of
// pods of every ReplicaSet and ReplicationController equal to its
// replicas, creating pods from the template, deleting the extra ones
// (the cheapest victims first), adopting matching orphans and releasing
// pods that stop matching, and reports the outcome in the owner's status.
// Like every kplane controller it is its own leader-elected process.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/replicactl/replicaset"
)

func main() { app.Main(replicaset.NewService()) }
