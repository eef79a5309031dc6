package strategy

import (
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
)

// Kubernetes keeps a singular field and its dual-stack plural in step
// (podIP/podIPs, hostIP/hostIPs, clusterIP/clusterIPs, podCIDR/podCIDRs):
// a client that writes either one gets both, and the plural's first entry
// must be the singular. kplane does the same in defaulting, which runs on
// every write (status writes included).

// syncFirst fills whichever of one and list is empty from the other.
func syncFirst(one *string, list *[]string) {
	switch {
	case *one != "" && len(*list) == 0:
		*list = []string{*one}
	case *one == "" && len(*list) > 0:
		*one = (*list)[0]
	}
}

// validateFirst checks a plural field: at most two entries (one per IP
// family), each valid by check, no repeats, the first equal to the
// singular field.
func validateFirst(errs *validation.ErrorList, onePath, listPath, one string, list []string, check func(string) []string) {
	if len(list) == 0 {
		return
	}
	if len(list) > 2 {
		errs.Invalid(listPath, strings.Join(list, ","), "may hold at most two entries, one per IP family")
	}
	seen := map[string]bool{}
	for i, v := range list {
		p := index(listPath, i)
		if i > 0 || v != one { // the singular field's own check covers list[0]
			errs.InvalidMsgs(p, v, check(v))
		}
		if seen[v] {
			errs.Duplicate(p, v)
		}
		seen[v] = true
	}
	if list[0] != one {
		errs.Invalid(index(listPath, 0), list[0], "must match `"+onePath+"`")
	}
}

func ipStrings[T interface{ GetIp() string }](list []T) []string {
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = e.GetIp()
	}
	return out
}

// syncPodStatusIPs keeps podIP/podIPs and hostIP/hostIPs in step.
func syncPodStatusIPs(st *kplanev1.PodStatus) {
	if st == nil {
		return
	}
	if ips := ipStrings(st.PodIps); st.PodIp == "" || len(ips) == 0 {
		syncFirst(&st.PodIp, &ips)
		if len(st.PodIps) == 0 && len(ips) > 0 {
			st.PodIps = []*kplanev1.PodIP{{Ip: ips[0]}}
		}
	}
	if ips := ipStrings(st.HostIps); st.HostIp == "" || len(ips) == 0 {
		syncFirst(&st.HostIp, &ips)
		if len(st.HostIps) == 0 && len(ips) > 0 {
			st.HostIps = []*kplanev1.HostIP{{Ip: ips[0]}}
		}
	}
}

func validatePodStatusIPs(errs *validation.ErrorList, st *kplanev1.PodStatus) {
	validateFirst(errs, "status.podIP", "status.podIPs", st.GetPodIp(), ipStrings(st.GetPodIps()), validation.IsValidIP)
	validateFirst(errs, "status.hostIP", "status.hostIPs", st.GetHostIp(), ipStrings(st.GetHostIps()), validation.IsValidIP)
}
