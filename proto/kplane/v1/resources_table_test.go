package kplanev1

import "testing"

// TestResourceTable: every kind the API serves has its line in
// resourceTable, and no line names a kind that does not exist.
func TestResourceTable(t *testing.T) {
	for _, k := range KindNames() {
		if _, ok := resourcesByKind[k]; !ok {
			t.Errorf("kind %s has no line in resourceTable (resources_table.go)", k)
		}
	}
	seen := map[string]string{}
	for _, r := range resourceTable {
		if LookupKind(r.Kind) == nil {
			t.Errorf("resourceTable names %s, which is not a kind of the Object oneof", r.Kind)
		}
		if r.Plural == "" || r.Singular == "" || r.Version == "" {
			t.Errorf("%s: plural, singular and version are required", r.Kind)
		}
		for _, n := range append([]string{r.Plural, r.Singular}, r.ShortNames...) {
			if other, dup := seen[n]; dup && other != r.Kind {
				t.Errorf("name %q is used by both %s and %s", n, other, r.Kind)
			}
			seen[n] = r.Kind
		}
	}
	if got := APIVersion("ReplicaSet"); got != "apps/v1" {
		t.Errorf("APIVersion(ReplicaSet) = %q, want apps/v1", got)
	}
	if got := ResourceOf("Lease").GroupResource(); got != "leases.coordination.k8s.io" {
		t.Errorf("GroupResource(Lease) = %q", got)
	}
}
