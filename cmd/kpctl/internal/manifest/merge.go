package manifest

// LastAppliedAnnotation holds the manifest "kpctl apply" wrote last, so that
// the next apply can remove fields the manifest no longer has without
// touching fields that others set.
const LastAppliedAnnotation = "kplane.io/last-applied-configuration"

// Merge computes what apply writes: current with the fields of desired
// laid over it, minus the fields that lastApplied had and desired no
// longer has. Fields set by others (defaults, controllers, the scheduler's
// nodeName, a label added by hand) survive because neither manifest
// mentions them. Objects merge key by key; lists and scalars are replaced
// whole, as in a JSON merge patch. None of the arguments is modified; nil
// maps count as empty.
func Merge(current, lastApplied, desired map[string]any) map[string]any {
	out := make(map[string]any, len(current)+len(desired))
	for k, v := range current {
		out[k] = v
	}
	for k, lv := range lastApplied {
		if _, keep := desired[k]; keep {
			continue
		}
		lm, lok := lv.(map[string]any)
		cm, cok := current[k].(map[string]any)
		if !lok || !cok {
			delete(out, k)
			continue
		}
		// Only what apply set before goes; keys others added stay.
		if rest := Merge(cm, lm, nil); len(rest) > 0 {
			out[k] = rest
		} else {
			delete(out, k)
		}
	}
	for k, dv := range desired {
		dm, ok := dv.(map[string]any)
		if !ok {
			out[k] = dv
			continue
		}
		cm, _ := current[k].(map[string]any)
		lm, _ := lastApplied[k].(map[string]any)
		out[k] = Merge(cm, lm, dm)
	}
	return out
}
