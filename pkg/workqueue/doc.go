// Package workqueue provides the work queue that sits between a
// controller's informers and its reconcile workers.
//
// A Queue holds string keys ("namespace/name"). It deduplicates: a key
// that is already waiting is not queued twice, so a burst of events for
// one object costs one reconcile. It serialises: a key handed out by Get
// is not handed out again until Done is called for it; a key added while
// it is being processed is remembered and queued again by Done, so the
// latest state is always reconciled once more. On top of that it offers
// delayed adds (AddAfter), rate-limited retries (AddRateLimited, Forget,
// NumRequeues) and metrics hooks.
//
// A typical worker loop:
//
//	for {
//		key, shutdown := q.Get()
//		if shutdown {
//			return
//		}
//		if err := reconcile(ctx, key); err != nil {
//			q.AddRateLimited(key)
//		} else {
//			q.Forget(key)
//		}
//		q.Done(key)
//	}
//
// ShutDown makes the queue stop handing out work: keys still waiting are
// dropped (controllers are level-triggered, so the next leader or the next
// start lists everything again) and work in progress may finish.
// ShutDownWithDrain additionally waits until every key handed out has been
// marked Done.
package workqueue
