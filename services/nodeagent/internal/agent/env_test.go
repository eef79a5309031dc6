package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplane/kplane/pkg/client"
	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two", "EMPTY": ""}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	for in, want := range map[string]string{
		"plain":            "plain",
		"$(A)":             "1",
		"x$(A)y$(B)z":      "x1ytwoz",
		"$(MISSING)":       "$(MISSING)",
		"$$(A)":            "$(A)",
		"$$$(A)":           "$1",
		"$$":               "$",
		"$":                "$",
		"a$b":              "a$b",
		"$(A":              "$(A",
		"$()":              "$()",
		"[$(EMPTY)]":       "[]",
		"$(A)$(B)$(A)":     "1two1",
		"cost: $5 $(B) $$": "cost: $5 two $",
	} {
		if got := expand(in, lookup); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// The environment of a real process: plain values with $(VAR) references,
// a Secret's key, every key of a Secret with a prefix, downward-API fields
// and a resource limit; command and args are expanded with it. A missing
// Secret holds the container in CreateContainerConfigError until it
// exists.
func TestEnvReachesProcess(t *testing.T) {
	e := newEnv(t)
	e.startAgent("--memory", "4Gi")
	ref := func(path string) *kplanev1.EnvVarSource {
		return &kplanev1.EnvVarSource{FieldRef: &kplanev1.ObjectFieldSelector{FieldPath: path}}
	}
	p := e.createPod("envy", "node-a", func(p *kplanev1.Pod) {
		p.Metadata.Labels = map[string]string{"app": "envy"}
		p.Spec.ServiceAccountName = "builder"
		c := p.Spec.Containers[0]
		c.Resources = &kplanev1.ResourceRequirements{Limits: map[string]string{"cpu": "1500m"}}
		c.EnvFrom = []*kplanev1.EnvFromSource{
			{Prefix: "DB_", SecretRef: &kplanev1.SecretEnvSource{Name: "db"}},
			// Without a prefix, key "1st" is no variable name: skipped.
			{SecretRef: &kplanev1.SecretEnvSource{Name: "db"}},
			{SecretRef: &kplanev1.SecretEnvSource{Name: "absent", Optional: ptrBool(true)}},
		}
		c.Env = []*kplanev1.EnvVar{
			{Name: "GREETING", Value: "hello"},
			{Name: "MESSAGE", Value: "$(GREETING) world, $$(GREETING) stays"},
			{Name: "PASSWORD", ValueFrom: &kplanev1.EnvVarSource{SecretKeyRef: &kplanev1.SecretKeySelector{Name: "db", Key: "password"}}},
			{Name: "OPT", ValueFrom: &kplanev1.EnvVarSource{SecretKeyRef: &kplanev1.SecretKeySelector{Name: "db", Key: "absent", Optional: ptrBool(true)}}},
			{Name: "MY_NAME", ValueFrom: ref("metadata.name")},
			{Name: "MY_NS", ValueFrom: ref("metadata.namespace")},
			{Name: "MY_UID", ValueFrom: ref("metadata.uid")},
			{Name: "MY_APP", ValueFrom: ref("metadata.labels['app']")},
			{Name: "MY_NODE", ValueFrom: ref("spec.nodeName")},
			{Name: "MY_SA", ValueFrom: ref("spec.serviceAccountName")},
			{Name: "MY_IP", ValueFrom: ref("status.podIP")},
			{Name: "MY_HOST", ValueFrom: ref("status.hostIP")},
			{Name: "CPU_M", ValueFrom: &kplanev1.EnvVarSource{ResourceFieldRef: &kplanev1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: "1m"}}},
			{Name: "CPU", ValueFrom: &kplanev1.EnvVarSource{ResourceFieldRef: &kplanev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
			{Name: "MEM_MI", ValueFrom: &kplanev1.EnvVarSource{ResourceFieldRef: &kplanev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: "1Mi"}}},
		}
		// The shell sees the expanded args as $1 and $2.
		c.Command = []string{"sh", "-c", `env | sort > env.txt; printf 'arg: %s %s\n' "$1" "$2" > arg.txt; exec sleep 300`, "sh"}
		c.Args = []string{"$(MESSAGE)", "$(NOPE)"}
	})
	e.waitCreated(p, "waiting for its Secret", func(p *kplanev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) == 1 && cs[0].GetState().GetWaiting().GetReason() == ReasonCreateConfigError &&
			cs[0].GetState().GetWaiting().GetMessage() == `secret "db" not found`
	})
	if _, err := client.For[*kplanev1.Secret](e.api).Create(e.ctx, &kplanev1.Secret{
		Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "db"},
		Data:     map[string][]byte{"password": []byte("s3cret"), "user": []byte("app"), "1st": []byte("x")},
	}); err != nil {
		t.Fatal(err)
	}
	p = e.waitPod("envy", "Running", phase(kplanev1.PodRunning))
	dir := filepath.Join(e.root, podsDir, p.GetMetadata().GetUid(), "main")
	var env, arg string
	waitFor(t, e.ctx, "env.txt and arg.txt", func() bool {
		b1, err1 := os.ReadFile(filepath.Join(dir, "env.txt"))
		b2, err2 := os.ReadFile(filepath.Join(dir, "arg.txt"))
		env, arg = "\n"+string(b1), string(b2)
		return err1 == nil && err2 == nil && strings.HasSuffix(arg, "\n")
	})
	for _, want := range []string{
		"GREETING=hello", "MESSAGE=hello world, $(GREETING) stays", "PASSWORD=s3cret", "DB_password=s3cret", "DB_user=app", "DB_1st=x", "user=app",
		"MY_NAME=envy", "MY_NS=default", "MY_UID=" + p.GetMetadata().GetUid(), "MY_APP=envy", "MY_NODE=node-a",
		"MY_SA=builder", "MY_IP=" + p.GetStatus().GetPodIp(), "MY_HOST=127.0.0.1", "CPU_M=1500", "CPU=2", "MEM_MI=4096",
	} {
		if !strings.Contains(env, "\n"+want+"\n") {
			t.Errorf("process environment lacks %s:\n%s", want, env)
		}
	}
	if strings.Contains(env, "OPT=") || strings.Contains(env, "\n1st=") {
		t.Errorf("optional absent key or invalid envFrom key set:\n%s", env)
	}
	if want := "arg: hello world, $(GREETING) stays $(NOPE)\n"; arg != want {
		t.Errorf("expanded args wrote %q, want %q", arg, want)
	}
	waitFor(t, e.ctx, "an InvalidEnvironmentVariableNames event", func() bool {
		return e.hasEvent(p, "InvalidEnvironmentVariableNames: Keys [1st]")
	})
}

func ptrBool(b bool) *bool { return &b }
