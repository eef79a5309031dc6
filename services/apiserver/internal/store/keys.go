package store

import (
	"strings"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// registryRoot prefixes every key the apiserver writes, as in Kubernetes.
const registryRoot = "/registry/"

// KindPrefix is the key prefix of every object of a kind:
// /registry/<kind>/ (kind in lower case).
func KindPrefix(k *kplanev1.KindInfo) string {
	return registryRoot + strings.ToLower(k.Name) + "/"
}

// ListPrefix is the key prefix of a kind's objects in one namespace, or
// of all of them when namespace is "" or the kind is cluster-scoped.
func ListPrefix(k *kplanev1.KindInfo, namespace string) string {
	if !k.Namespaced || namespace == "" {
		return KindPrefix(k)
	}
	return KindPrefix(k) + namespace + "/"
}

// ObjectKey is /registry/<kind>/<namespace>/<name>, or
// /registry/<kind>/<name> for cluster-scoped kinds.
func ObjectKey(k *kplanev1.KindInfo, namespace, name string) string {
	if !k.Namespaced {
		return KindPrefix(k) + name
	}
	return KindPrefix(k) + namespace + "/" + name
}

// CacheKeyFromStorageKey turns an etcd key of kind k back into the
// "namespace/name" (or "name") form used by caches.
func CacheKeyFromStorageKey(k *kplanev1.KindInfo, key string) string {
	return strings.TrimPrefix(key, KindPrefix(k))
}
