package validation

import (
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TotalAnnotationSizeLimit bounds the summed size of all annotation keys and
// values of one object (256 KiB), as in Kubernetes.
const TotalAnnotationSizeLimit = 256 * 1024

// NameFn checks an object name; it returns one message per problem. The
// format checks of this package (IsDNS1123Subdomain, IsDNS1123Label, ...)
// are NameFns.
type NameFn func(name string) []string

// ValidateObjectMeta checks the user-settable metadata of an object:
// name or generateName, namespace (required iff namespaced), labels,
// annotations, ownerReferences and finalizers. nameFn checks the name (and
// generateName as a prefix); path is usually "metadata".
func ValidateObjectMeta(meta *kplanev1.ObjectMeta, namespaced bool, nameFn func(string) []string, path string) ErrorList {
	var errs ErrorList
	if meta == nil {
		meta = &kplanev1.ObjectMeta{}
	}
	name, gen := meta.GetName(), meta.GetGenerateName()
	if gen != "" {
		errs.InvalidMsgs(Child(path, "generateName"), gen, nameFn(maskTrailingDash(gen)))
	}
	if name == "" && gen == "" {
		errs.Required(Child(path, "name"), "name or generateName is required")
	}
	if name != "" {
		errs.InvalidMsgs(Child(path, "name"), name, nameFn(name))
	}
	ns := meta.GetNamespace()
	switch {
	case namespaced && ns == "":
		errs.Required(Child(path, "namespace"), "")
	case namespaced:
		errs.InvalidMsgs(Child(path, "namespace"), ns, IsDNS1123Label(ns))
	case ns != "":
		errs.Forbidden(Child(path, "namespace"), "not allowed on this type")
	}
	errs.AddAll(ValidateLabels(meta.GetLabels(), Child(path, "labels")))
	errs.AddAll(ValidateAnnotations(meta.GetAnnotations(), Child(path, "annotations")))
	errs.AddAll(validateOwnerReferences(meta.GetOwnerReferences(), Child(path, "ownerReferences")))
	errs.AddAll(validateFinalizers(meta.GetFinalizers(), Child(path, "finalizers")))
	return errs
}

// ValidateObjectMetaUpdate checks what an update may not change in metadata:
// name and namespace (the store keys objects by them).
func ValidateObjectMetaUpdate(meta, old *kplanev1.ObjectMeta, path string) ErrorList {
	var errs ErrorList
	if meta.GetName() != old.GetName() {
		errs.Invalid(Child(path, "name"), meta.GetName(), "field is immutable")
	}
	if meta.GetNamespace() != old.GetNamespace() {
		errs.Invalid(Child(path, "namespace"), meta.GetNamespace(), "field is immutable")
	}
	return errs
}

// maskTrailingDash lets a generateName prefix end in '-' (the usual
// "web-" form): the server appends a suffix, so the final name is valid.
func maskTrailingDash(s string) string {
	if len(s) > 1 && strings.HasSuffix(s, "-") {
		return s[:len(s)-1] + "a"
	}
	return s
}

// ValidateLabels checks label keys (qualified names) and values.
func ValidateLabels(labels map[string]string, path string) ErrorList {
	var errs ErrorList
	var buf [8]string // most label sets: sorted on the stack
	for _, k := range AppendSortedKeys(buf[:0], labels) {
		errs.InvalidMsgs(path, k, IsQualifiedName(k))
		if msgs := IsValidLabelValue(labels[k]); len(msgs) > 0 {
			errs.InvalidMsgs(Key(path, k), labels[k], msgs) // the path only for an error
		}
	}
	return errs
}

// ValidateAnnotations checks annotation keys (qualified names) and the
// total size of keys and values.
func ValidateAnnotations(annotations map[string]string, path string) ErrorList {
	var errs ErrorList
	total := 0
	var buf [8]string
	for _, k := range AppendSortedKeys(buf[:0], annotations) {
		errs.InvalidMsgs(path, k, IsQualifiedName(strings.ToLower(k)))
		total += len(k) + len(annotations[k])
	}
	if total > TotalAnnotationSizeLimit {
		errs.TooLong(path, TotalAnnotationSizeLimit)
	}
	return errs
}

func validateOwnerReferences(refs []*kplanev1.OwnerReference, path string) ErrorList {
	var errs ErrorList
	var controllers []string
	for i, r := range refs {
		p := Index(path, i)
		if r.GetKind() == "" {
			errs.Required(Child(p, "kind"), "")
		}
		if r.GetName() == "" {
			errs.Required(Child(p, "name"), "")
		}
		if r.GetUid() == "" {
			errs.Required(Child(p, "uid"), "")
		}
		if r.GetController() {
			controllers = append(controllers, r.GetKind()+"/"+r.GetName())
		}
	}
	if len(controllers) > 1 {
		errs.Invalid(path, strings.Join(controllers, ", "), "at most one owner reference may set controller=true")
	}
	return errs
}

func validateFinalizers(finalizers []string, path string) ErrorList {
	var errs ErrorList
	seen := make(map[string]bool, len(finalizers))
	for i, f := range finalizers {
		p := Index(path, i)
		errs.InvalidMsgs(p, f, IsQualifiedName(f))
		if seen[f] {
			errs.Duplicate(p, f)
		}
		seen[f] = true
	}
	return errs
}
