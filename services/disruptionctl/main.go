// Command disruptionctl is the PodDisruptionBudget controller: it keeps
// each budget's status (expected and healthy pods, disruptions allowed,
// the DisruptionAllowed condition) current from the pods it selects and
// their owners' scale, and forgets evicted pods once they are gone. Like
// every kplane controller it is its own leader-elected process.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/disruptionctl/disruption"
)

func main() { app.Main(disruption.NewService()) }
