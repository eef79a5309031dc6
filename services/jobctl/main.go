// Command jobctl is the Job controller: it runs the pods of every Job
// until enough of them succeed (or the Job fails), counting each finished
// pod exactly once through the batch.kubernetes.io/job-tracking
// finalizer, and reports the outcome in the Job's status and conditions.
// Like every kplane controller it is its own leader-elected process.
package main

import (
	"github.com/kplane/kplane/pkg/app"
	"github.com/kplane/kplane/services/jobctl/job"
)

func main() { app.Main(job.NewService()) }
