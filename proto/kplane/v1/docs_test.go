package kplanev1

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

func TestDoc(t *testing.T) {
	for name, want := range map[string]string{
		"kplane.v1.Container":                         "Container is one process of a pod.",
		"kplane.v1.PodSpec.node_name":                 "nodeName is set by the scheduler when it binds the pod; immutable once set.",
		"kplane.v1.DeploymentStrategy.type":           "type is RollingUpdate (default) or Recreate.",
		"kplane.v1.DeploymentStrategy.rolling_update": "rollingUpdate is set only for type RollingUpdate.",
		"kplane.v1.Container.name":                    "",
	} {
		if got := Doc(protoreflect.FullName(name)); got != want {
			t.Errorf("Doc(%s) = %q, want %q", name, got, want)
		}
	}
	if docsErr != nil {
		t.Fatal(docsErr)
	}
}

func TestDocTextNames(t *testing.T) {
	got := docText("  startup_probe holds back;\n when it fails failure_threshold times (see /dev/x_y).", map[string]string{"startup_probe": "startupProbe"})
	want := "startupProbe holds back; when it fails failureThreshold times (see /dev/x_y)."
	if got != want {
		t.Errorf("docText = %q, want %q", got, want)
	}
}
