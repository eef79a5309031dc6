// Package leaderelection elects one leader among the replicas of a
// controller through a Lease object kept by the kplane apiserver.
//
// Every candidate runs an Elector on the same Lease
// (kplane-system/<name> by default). The lease names its holder and how
// long a holder's claim lasts after its last renewal. Every write goes
// through the apiserver with a resourceVersion compare-and-swap, so of two
// candidates racing for the lease exactly one wins.
//
// Time is judged locally: a candidate never compares its clock with
// timestamps written by another machine. It remembers when it last saw the
// lease change (its resourceVersion) and considers the holder gone once
// leaseDurationSeconds have passed on its own clock without a further
// change. The leader in turn gives up as soon as it has failed to renew for
// RenewDeadline, which is shorter than the lease duration, so it stops
// before anyone else may start.
//
// The leader's work runs in Callbacks.OnStartedLeading with a context that
// is cancelled the moment leadership is lost. With ReleaseOnCancel, a
// leader whose Run context is cancelled (SIGTERM) clears the lease so a
// standby takes over at once instead of waiting for it to expire.
package leaderelection
