package rest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// subresource is one subresource beyond status: how discovery names it
// and the handler that serves it. Each has its own file (scale.go,
// log.go, eviction.go).
type subresource struct {
	name string
	// applies reports whether a kind has it.
	applies func(*kplanev1.KindInfo) bool
	// group, version and kind of the object it takes and answers;
	// empty group and version mean the parent's.
	group, version, kind string
	verbs                []string
	serve                func(*Handler, http.ResponseWriter, *http.Request, request)
}

func isPod(k *kplanev1.KindInfo) bool { return k.Name == "Pod" }

// subresources lists the subresources served besides status.
var subresources = []subresource{
	{name: "scale", applies: hasScale, group: "autoscaling", version: "v1", kind: "Scale", verbs: scaleVerbs, serve: (*Handler).serveScale},
	{name: "log", applies: isPod, kind: "Pod", verbs: []string{"get"}, serve: (*Handler).serveLog},
	{name: "eviction", applies: isPod, group: "policy", version: "v1", kind: "Eviction", verbs: []string{"create"}, serve: (*Handler).serveEviction},
	{name: "binding", applies: isPod, kind: "Binding", verbs: []string{"create"}, serve: (*Handler).serveBinding},
	{name: "token", applies: isServiceAccount, group: "authentication.k8s.io", version: "v1", kind: "TokenRequest", verbs: []string{"create"}, serve: (*Handler).serveToken},
}

// subresourceOf returns the subresource name of kind k, or nil.
func subresourceOf(k *kplanev1.KindInfo, name string) *subresource {
	for i := range subresources {
		if s := &subresources[i]; s.name == name && s.applies(k) {
			return s
		}
	}
	return nil
}

// subresourceCodec reads Kubernetes' protobuf of the subresources' own
// types (kubectl's typed clients send Eviction, Scale and
// SelfSubjectAccessReview in it).
var subresourceCodec = func() runtime.Decoder {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, policyv1.AddToScheme, autoscalingv1.AddToScheme, authorizationv1.AddToScheme, authenticationv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("rest: register Kubernetes types: %v", err)) // static registrations cannot fail
		}
	}
	return protobuf.NewSerializer(s, s)
}()

// decodeStrict reads JSON into v, refusing unknown fields by name.
func decodeStrict(body []byte, v any, what string) *metav1.Status {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("%s: the request body is empty", what)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("decode %s: %v", what, err)
	}
	return nil
}

// mediaType is a Content-Type without its parameters ("" when unparsable).
func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return mt
}
