// Command cronjobctl is the CronJob controller: it creates a Job for each
// run of every CronJob's schedule, as its concurrency policy and starting
// deadline allow, tracks the runs in the CronJob's status and deletes
// finished Jobs beyond the history limits. Like every kplane controller it
// is its own leader-elected process (Lease kplane-system/cronjobctl).
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/cronjobctl/cronjob"
)

func main() { app.Main(cronjob.NewService()) }
