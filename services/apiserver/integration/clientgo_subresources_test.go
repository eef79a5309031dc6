package integration

import (
	"context"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

// TestClientGoSubresources: client-go's typed clients, with Kubernetes'
// protobuf as the content type (as kubectl's are), read and update a
// Scale, bind a pod and evict it; the apiserver's answers decode into
// client-go's types and errors.
func TestClientGoSubresources(t *testing.T) {
	srv := testserver.Start(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + srv.Addr(),
		ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf", AcceptContentTypes: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().ReplicaSets("default").Create(ctx, goRS("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sc, err := cs.AppsV1().ReplicaSets("default").GetScale(ctx, "web", metav1.GetOptions{})
	if err != nil || sc.Spec.Replicas != 2 || sc.Status.Selector != "app=web" {
		t.Fatalf("GetScale: %+v %v", sc, err)
	}
	sc.Spec.Replicas = 4
	out, err := cs.AppsV1().ReplicaSets("default").UpdateScale(ctx, "web", sc, metav1.UpdateOptions{})
	if err != nil || out.Spec.Replicas != 4 {
		t.Fatalf("UpdateScale: %+v %v", out, err)
	}
	// The same Scale again carries a stale resourceVersion.
	if _, err := cs.AppsV1().ReplicaSets("default").UpdateScale(ctx, "web", sc, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("stale UpdateScale: %v, want Conflict", err)
	}
	neg := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: autoscalingv1.ScaleSpec{Replicas: -1}}
	if _, err := cs.AppsV1().ReplicaSets("default").UpdateScale(ctx, "web", neg, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("UpdateScale to -1: %v, want Invalid", err)
	}
	rs, err := cs.AppsV1().ReplicaSets("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || *rs.Spec.Replicas != 4 {
		t.Fatalf("the ReplicaSet after scaling: %v %v", rs, err)
	}

	pods := cs.CoreV1().Pods("default")
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
	if err := pods.Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Bind: %v", err)
	}
	if err := pods.Bind(ctx, b, metav1.CreateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("second Bind: %v, want Conflict", err)
	}
	zero := int64(0)
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &zero}}
	if err := pods.EvictV1(ctx, ev); err != nil {
		t.Fatalf("EvictV1: %v", err)
	}
	if _, err := pods.Get(ctx, "p", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod after eviction with grace 0: %v, want NotFound", err)
	}
	if err := pods.EvictV1(ctx, ev); !apierrors.IsNotFound(err) {
		t.Errorf("evicting a missing pod: %v, want NotFound", err)
	}
}
