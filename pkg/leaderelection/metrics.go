package leaderelection

// Transition names, used as the "transition" label of
// kplane_leader_transitions_total.
const (
	// TransitionAcquired: this candidate became the leader.
	TransitionAcquired = "acquired"
	// TransitionLost: the leader failed to renew or saw the lease taken.
	TransitionLost = "lost"
	// TransitionReleased: the leader stopped on request and cleared the lease.
	TransitionReleased = "released"
	// TransitionStopped: the leader stopped on request and left the lease
	// to expire (ReleaseOnCancel unset, or the release failed).
	TransitionStopped = "stopped"
)

// Metrics records the leadership of the candidates of one process.
// Implementations must be safe for concurrent use.
type Metrics interface {
	// SetLeading records whether this process leads the election name.
	SetLeading(name string, leading bool)
	// Transition counts one change of this process's leadership of name;
	// transition is one of the Transition* constants.
	Transition(name, transition string)
}

type noopMetrics struct{}

func (noopMetrics) SetLeading(string, bool)   {}
func (noopMetrics) Transition(string, string) {}
