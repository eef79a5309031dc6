package strategy

import (
	"testing"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

func validPodSpec() *kplanev1.PodSpec {
	return &kplanev1.PodSpec{
		Containers: []*kplanev1.Container{{
			Name:  "web",
			Image: "nginx:1.25",
			Ports: []*kplanev1.ContainerPort{{Name: "http", ContainerPort: 80}},
			Env:   []*kplanev1.EnvVar{{Name: "MODE", Value: "prod"}},
			Resources: &kplanev1.ResourceRequirements{
				Requests: map[string]string{"cpu": "100m", "memory": "64Mi"},
				Limits:   map[string]string{"cpu": "1", "memory": "128Mi", "example.com/gpu": "1"},
			},
			ReadinessProbe: &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Port: kplanev1.IntOrStringFromInt32(80)}},
			LivenessProbe:  &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(80)}},
			VolumeMounts:   []*kplanev1.VolumeMount{{Name: "data", MountPath: "/data"}},
		}},
		InitContainers: []*kplanev1.Container{{Name: "init", Image: "busybox", Command: []string{"true"}}},
		Volumes: []*kplanev1.Volume{
			{Name: "data", PersistentVolumeClaim: &kplanev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}},
			{Name: "tmp", EmptyDir: &kplanev1.EmptyDirVolumeSource{SizeLimit: "1Gi"}},
		},
		Tolerations: []*kplanev1.Toleration{
			{Key: "node.kubernetes.io/unreachable", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: ptr[int64](300)},
			{Key: "dedicated", Value: "web", Effect: "NoSchedule"},
		},
		NodeSelector: map[string]string{"disk": "ssd"},
	}
}

func validPod() *kplanev1.Pod {
	return &kplanev1.Pod{Metadata: &kplanev1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{"app": "web"}},
		Spec: validPodSpec()}
}

func c0(p *kplanev1.Pod) *kplanev1.Container { return p.Spec.Containers[0] }

func TestPodDefaults(t *testing.T) {
	p := created(&kplanev1.Pod{Metadata: meta("default", "p"), Spec: &kplanev1.PodSpec{Containers: []*kplanev1.Container{{
		Name: "c", Image: "nginx",
		Ports:          []*kplanev1.ContainerPort{{ContainerPort: 80}},
		ReadinessProbe: &kplanev1.Probe{HttpGet: &kplanev1.HTTPGetAction{Port: kplanev1.IntOrStringFromInt32(80)}},
		Resources:      &kplanev1.ResourceRequirements{Limits: map[string]string{"cpu": "1", "memory": "1Gi"}},
	}, {Name: "d", Image: "busybox:1.36"}}}})
	s := p.Spec
	if s.RestartPolicy != "Always" || s.GetTerminationGracePeriodSeconds() != 30 || s.SchedulerName != "default-scheduler" ||
		s.ServiceAccountName != "default" {
		t.Errorf("pod spec defaults: %v", s)
	}
	c := s.Containers[0]
	if c.Ports[0].Protocol != "TCP" || c.ImagePullPolicy != "Always" || s.Containers[1].ImagePullPolicy != "IfNotPresent" {
		t.Errorf("container defaults: %v", c)
	}
	pr := c.ReadinessProbe
	if pr.PeriodSeconds != 10 || pr.TimeoutSeconds != 1 || pr.SuccessThreshold != 1 || pr.FailureThreshold != 3 ||
		pr.HttpGet.Path != "/" || pr.HttpGet.Scheme != "HTTP" {
		t.Errorf("probe defaults: %v", pr)
	}
	if c.Resources.Requests["cpu"] != "1" || c.Resources.Requests["memory"] != "1Gi" {
		t.Errorf("requests should default to limits: %v", c.Resources)
	}
	if p.Status.Phase != "Pending" || p.Status.QosClass != "Burstable" {
		t.Errorf("status defaults: %v", p.Status)
	}
	// Set values are kept.
	p = created(&kplanev1.Pod{Spec: &kplanev1.PodSpec{RestartPolicy: "Never", TerminationGracePeriodSeconds: ptr[int64](0),
		Containers: []*kplanev1.Container{{Name: "c", Image: "x:latest", ImagePullPolicy: "Never",
			LivenessProbe: &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"x"}}, PeriodSeconds: 3}}}}})
	if p.Spec.RestartPolicy != "Never" || p.Spec.GetTerminationGracePeriodSeconds() != 0 ||
		p.Spec.Containers[0].ImagePullPolicy != "Never" || p.Spec.Containers[0].LivenessProbe.PeriodSeconds != 3 {
		t.Errorf("explicit values overwritten: %v", p.Spec)
	}
	if p.Status.QosClass != "BestEffort" {
		t.Errorf("qos = %s", p.Status.QosClass)
	}
	// A nil spec gets one, so defaults apply and validation can name fields.
	if p := defaulted(&kplanev1.Pod{}); p.Spec.GetRestartPolicy() != "Always" {
		t.Error("nil spec not defaulted")
	}
	// Default never sets status: it also runs on updates and in clients.
	if p := defaulted(validPod()); p.Status != nil {
		t.Errorf("Default set status %v", p.Status)
	}
	// A status given on create is kept.
	if p := created(&kplanev1.Pod{Status: &kplanev1.PodStatus{Phase: "Running", QosClass: "Guaranteed"}}); p.Status.Phase != "Running" ||
		p.Status.QosClass != "Guaranteed" {
		t.Errorf("create status overwritten: %v", p.Status)
	}
}

func TestQOSClass(t *testing.T) {
	res := func(req, lim map[string]string) *kplanev1.PodSpec {
		return &kplanev1.PodSpec{Containers: []*kplanev1.Container{{Resources: &kplanev1.ResourceRequirements{Requests: req, Limits: lim}}}}
	}
	cases := []struct {
		spec *kplanev1.PodSpec
		want string
	}{
		{&kplanev1.PodSpec{Containers: []*kplanev1.Container{{}}}, "BestEffort"},
		{res(map[string]string{"cpu": "1"}, nil), "Burstable"},
		{res(nil, map[string]string{"cpu": "1", "memory": "1Gi"}), "Guaranteed"},
		{res(map[string]string{"cpu": "1000m", "memory": "1024Mi"}, map[string]string{"cpu": "1", "memory": "1Gi"}), "Guaranteed"},
		{res(map[string]string{"cpu": "500m", "memory": "1Gi"}, map[string]string{"cpu": "1", "memory": "1Gi"}), "Burstable"},
		{res(nil, map[string]string{"cpu": "1"}), "Burstable"},
	}
	for i, c := range cases {
		if got := qosClass(c.spec); got != c.want {
			t.Errorf("case %d: qos = %s, want %s", i, got, c.want)
		}
	}
}

func TestPodValidate(t *testing.T) {
	dup := func(p *kplanev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, &kplanev1.Container{Name: "web", Image: "x"})
	}
	checkValidate(t, "Pod", validPod, []tc[*kplanev1.Pod]{
		{"no name", func(p *kplanev1.Pod) { p.Metadata.Name = "" }, []string{"metadata.name: Required value: name or generateName is required"}},
		{"bad name", func(p *kplanev1.Pod) { p.Metadata.Name = "Web" }, []string{`metadata.name: Invalid value: "Web": a lowercase RFC 1123 subdomain...`}},
		{"no namespace", func(p *kplanev1.Pod) { p.Metadata.Namespace = "" }, []string{"metadata.namespace: Required value"}},
		{"bad label", func(p *kplanev1.Pod) { p.Metadata.Labels["app"] = "a b" }, []string{`metadata.labels["app"]: Invalid value: "a b": ...`}},
		{"no containers", func(p *kplanev1.Pod) { p.Spec.Containers = nil }, []string{"spec.containers: Required value"}},
		{"container name missing", func(p *kplanev1.Pod) { c0(p).Name = "" }, []string{"spec.containers[0].name: Required value"}},
		{"container name format", func(p *kplanev1.Pod) { c0(p).Name = "Web_1" },
			[]string{`spec.containers[0].name: Invalid value: "Web_1": a lowercase RFC 1123 label...`}},
		{"duplicate container", dup, []string{`spec.containers[1].name: Duplicate value: "web"`}},
		{"init container shares a name", func(p *kplanev1.Pod) { p.Spec.InitContainers[0].Name = "web" },
			[]string{`spec.initContainers[0].name: Duplicate value: "web"`}},
		{"image required", func(p *kplanev1.Pod) { c0(p).Image = " " }, []string{"spec.containers[0].image: Required value"}},
		{"init image required", func(p *kplanev1.Pod) { p.Spec.InitContainers[0].Image = "" }, []string{"spec.initContainers[0].image: Required value"}},
		{"pull policy", func(p *kplanev1.Pod) { c0(p).ImagePullPolicy = "Sometimes" },
			[]string{`spec.containers[0].imagePullPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"`}},
		{"port zero", func(p *kplanev1.Pod) { c0(p).Ports[0].ContainerPort = 0 },
			[]string{"spec.containers[0].ports[0].containerPort: Invalid value: 0: must be between 1 and 65535, inclusive"}},
		{"port too big", func(p *kplanev1.Pod) { c0(p).Ports[0].ContainerPort = 65536 },
			[]string{"spec.containers[0].ports[0].containerPort: Invalid value: 65536: must be between 1 and 65535, inclusive"}},
		{"host port", func(p *kplanev1.Pod) { c0(p).Ports[0].HostPort = -1 },
			[]string{"spec.containers[0].ports[0].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive"}},
		{"port protocol", func(p *kplanev1.Pod) { c0(p).Ports[0].Protocol = "HTTP" },
			[]string{`spec.containers[0].ports[0].protocol: Unsupported value: "HTTP": supported values: "TCP", "UDP", "SCTP"`}},
		{"port name", func(p *kplanev1.Pod) { c0(p).Ports[0].Name = "HTTP" }, []string{`spec.containers[0].ports[0].name: Invalid value: "HTTP": ...`}},
		{"duplicate port name", func(p *kplanev1.Pod) {
			c0(p).Ports = append(c0(p).Ports, &kplanev1.ContainerPort{Name: "http", ContainerPort: 81})
		}, []string{`spec.containers[0].ports[1].name: Duplicate value: "http"`}},
		{"env name missing", func(p *kplanev1.Pod) { c0(p).Env[0].Name = "" }, []string{"spec.containers[0].env[0].name: Required value"}},
		{"env name format", func(p *kplanev1.Pod) { c0(p).Env[0].Name = "1X" },
			[]string{`spec.containers[0].env[0].name: Invalid value: "1X": a valid environment variable name...`}},
		{"resource name", func(p *kplanev1.Pod) { c0(p).Resources.Limits["gpu"] = "1" },
			// Defaulting copies the limit into requests, so both report it.
			[]string{`spec.containers[0].resources.limits: Invalid value: "gpu": must be a standard resource name...`,
				`spec.containers[0].resources.requests: Invalid value: "gpu": must be a standard resource name...`}},
		{"resource quantity", func(p *kplanev1.Pod) { c0(p).Resources.Requests["memory"] = "lots" },
			[]string{`spec.containers[0].resources.requests["memory"]: Invalid value: "lots": quantities must match the regular expression...`}},
		{"negative resource", func(p *kplanev1.Pod) { c0(p).Resources.Requests["cpu"] = "-1" },
			[]string{`spec.containers[0].resources.requests["cpu"]: Invalid value: "-1": must be greater than or equal to 0`}},
		{"request above limit", func(p *kplanev1.Pod) { c0(p).Resources.Requests["cpu"] = "1500m" },
			[]string{`spec.containers[0].resources.requests["cpu"]: Invalid value: "1500m": must be less than or equal to cpu limit of 1`}},
		{"request equal to its limit, written otherwise", func(p *kplanev1.Pod) { c0(p).Resources.Requests["cpu"] = "1000m" }, nil},
		{"requests above limits, in name order", func(p *kplanev1.Pod) {
			c0(p).Resources.Requests["memory"], c0(p).Resources.Requests["cpu"] = "256Mi", "1500m"
		}, []string{`spec.containers[0].resources.requests["cpu"]: Invalid value: "1500m": must be less than or equal to cpu limit of 1`,
			`spec.containers[0].resources.requests["memory"]: Invalid value: "256Mi": must be less than or equal to memory limit of 128Mi`}},
		{"fractional extended resource", func(p *kplanev1.Pod) { c0(p).Resources.Limits["example.com/gpu"] = "500m" },
			[]string{`spec.containers[0].resources.limits["example.com/gpu"]: Invalid value: "500m": must be an integer`,
				`spec.containers[0].resources.requests["example.com/gpu"]: Invalid value: "500m": must be an integer`}},
		{"restart policy", func(p *kplanev1.Pod) { p.Spec.RestartPolicy = "Sometimes" },
			[]string{`spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"`}},
		{"grace period", func(p *kplanev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr[int64](-1) },
			[]string{"spec.terminationGracePeriodSeconds: must be greater than or equal to 0"}},
		{"active deadline", func(p *kplanev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr[int64](0) },
			[]string{"spec.activeDeadlineSeconds: must be greater than 0"}},
		{"node selector", func(p *kplanev1.Pod) { p.Spec.NodeSelector["bad key"] = "x" },
			[]string{`spec.nodeSelector: Invalid value: "bad key": ...`}},
		{"node name", func(p *kplanev1.Pod) { p.Spec.NodeName = "Node_1" }, []string{`spec.nodeName: Invalid value: "Node_1": ...`}},
		{"service account", func(p *kplanev1.Pod) { p.Spec.ServiceAccountName = "a b" }, []string{`spec.serviceAccountName: Invalid value: "a b": ...`}},
		{"toleration operator", func(p *kplanev1.Pod) { p.Spec.Tolerations[1].Operator = "In" },
			[]string{`spec.tolerations[1].operator: Unsupported value: "In": supported values: "Exists", "Equal"`}},
		{"toleration effect", func(p *kplanev1.Pod) { p.Spec.Tolerations[1].Effect = "NoRun" },
			[]string{`spec.tolerations[1].effect: Unsupported value: "NoRun": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"`}},
		{"toleration empty key with Equal", func(p *kplanev1.Pod) { p.Spec.Tolerations[1].Key = "" },
			[]string{`spec.tolerations[1].operator: Invalid value: "": operator must be Exists when ` + "`key`" + ` is empty (which matches every taint)`}},
		{"toleration Exists with value", func(p *kplanev1.Pod) { p.Spec.Tolerations[0].Value = "x" },
			[]string{`spec.tolerations[0].value: Invalid value: "x": value must be empty when ` + "`operator`" + ` is 'Exists'`}},
		{"tolerationSeconds without NoExecute", func(p *kplanev1.Pod) { p.Spec.Tolerations[1].TolerationSeconds = ptr[int64](5) },
			[]string{"spec.tolerations[1].tolerationSeconds: Invalid value: 5: may only be set when `effect` is 'NoExecute'"}},
		{"toleration key", func(p *kplanev1.Pod) { p.Spec.Tolerations[1].Key = "a/b/c" },
			[]string{`spec.tolerations[1].key: Invalid value: "a/b/c": ...`}},
		{"probe without handler", func(p *kplanev1.Pod) { c0(p).ReadinessProbe.HttpGet = nil },
			[]string{"spec.containers[0].readinessProbe: Required value: must specify a handler type"}},
		{"probe with two handlers", func(p *kplanev1.Pod) { c0(p).ReadinessProbe.Exec = &kplanev1.ExecAction{Command: []string{"x"}} },
			[]string{"spec.containers[0].readinessProbe: Forbidden: may not specify more than 1 handler type"}},
		{"probe negative delay", func(p *kplanev1.Pod) { c0(p).ReadinessProbe.InitialDelaySeconds = -1 },
			[]string{"spec.containers[0].readinessProbe.initialDelaySeconds: must be greater than or equal to 0"}},
		{"probe negative failure threshold", func(p *kplanev1.Pod) { c0(p).LivenessProbe.FailureThreshold = -3 },
			[]string{"spec.containers[0].livenessProbe.failureThreshold: must be greater than or equal to 0"}},
		{"liveness success threshold", func(p *kplanev1.Pod) { c0(p).LivenessProbe.SuccessThreshold = 2 },
			[]string{"spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1"}},
		{"probe port", func(p *kplanev1.Pod) { c0(p).ReadinessProbe.HttpGet.Port = nil },
			[]string{"spec.containers[0].readinessProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive"}},
		{"probe port by name", func(p *kplanev1.Pod) { c0(p).LivenessProbe.TcpSocket.Port = kplanev1.IntOrStringFromString("http") }, nil},
		{"probe port name", func(p *kplanev1.Pod) { c0(p).LivenessProbe.TcpSocket.Port = kplanev1.IntOrStringFromString("-http") },
			[]string{`spec.containers[0].livenessProbe.tcpSocket.port: Invalid value: "-http": a port name must consist of lower case alphanumeric characters or '-', contain at least one letter, and must not start or end with '-' or contain '--' (e.g. 'http' or 'web-80')`}},
		{"probe scheme", func(p *kplanev1.Pod) { c0(p).ReadinessProbe.HttpGet.Scheme = "FTP" },
			[]string{`spec.containers[0].readinessProbe.httpGet.scheme: Unsupported value: "FTP": supported values: "HTTP", "HTTPS"`}},
		{"grpc probe port", func(p *kplanev1.Pod) { c0(p).LivenessProbe = &kplanev1.Probe{Grpc: &kplanev1.GRPCAction{Port: 70000}} },
			[]string{"spec.containers[0].livenessProbe.grpc.port: Invalid value: 70000: must be between 1 and 65535, inclusive"}},
		{"grpc probe beside tcp", func(p *kplanev1.Pod) { c0(p).LivenessProbe.Grpc = &kplanev1.GRPCAction{Port: 9000} },
			[]string{"spec.containers[0].livenessProbe: Forbidden: may not specify more than 1 handler type"}},
		{"http probe header name", func(p *kplanev1.Pod) {
			c0(p).ReadinessProbe.HttpGet.HttpHeaders = []*kplanev1.HTTPHeader{{Name: "X-Ok", Value: "1"}, {Name: "bad header"}, {Value: "v"}}
		}, []string{
			`spec.containers[0].readinessProbe.httpGet.httpHeaders[1].name: Invalid value: "bad header": an HTTP header name must consist of letters, digits or '-' (e.g. 'X-Header-Name')`,
			"spec.containers[0].readinessProbe.httpGet.httpHeaders[2].name: Required value",
		}},
		{"startup success threshold", func(p *kplanev1.Pod) {
			c0(p).StartupProbe = &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"x"}}, SuccessThreshold: 3}
		}, []string{"spec.containers[0].startupProbe.successThreshold: Invalid value: 3: must be 1"}},
		{"readiness probe grace period", func(p *kplanev1.Pod) { c0(p).ReadinessProbe.TerminationGracePeriodSeconds = ptr[int64](5) },
			[]string{"spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes"}},
		{"liveness probe grace period zero", func(p *kplanev1.Pod) { c0(p).LivenessProbe.TerminationGracePeriodSeconds = ptr[int64](0) },
			[]string{"spec.containers[0].livenessProbe.terminationGracePeriodSeconds: must be greater than 0"}},
		{"liveness probe grace period", func(p *kplanev1.Pod) { c0(p).LivenessProbe.TerminationGracePeriodSeconds = ptr[int64](3) }, nil},
		{"init container startup probe", func(p *kplanev1.Pod) {
			p.Spec.InitContainers[0].StartupProbe = &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"x"}}}
		}, []string{"spec.initContainers[0].startupProbe: Forbidden: may not be set for init containers"}},
		{"env from a secret, fields and resources", func(p *kplanev1.Pod) {
			c0(p).Env = append(c0(p).Env,
				&kplanev1.EnvVar{Name: "PW", ValueFrom: &kplanev1.EnvVarSource{SecretKeyRef: &kplanev1.SecretKeySelector{Name: "db", Key: "password"}}},
				&kplanev1.EnvVar{Name: "POD", ValueFrom: &kplanev1.EnvVarSource{FieldRef: &kplanev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				&kplanev1.EnvVar{Name: "APP", ValueFrom: &kplanev1.EnvVarSource{FieldRef: &kplanev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
				&kplanev1.EnvVar{Name: "MEM", ValueFrom: &kplanev1.EnvVarSource{ResourceFieldRef: &kplanev1.ResourceFieldSelector{ContainerName: "web", Resource: "limits.memory", Divisor: "1Mi"}}})
			c0(p).EnvFrom = []*kplanev1.EnvFromSource{{Prefix: "DB_", SecretRef: &kplanev1.SecretEnvSource{Name: "db"}}}
		}, nil},
		{"env value and valueFrom", func(p *kplanev1.Pod) {
			c0(p).Env[0].ValueFrom = &kplanev1.EnvVarSource{FieldRef: &kplanev1.ObjectFieldSelector{FieldPath: "metadata.name"}}
		}, []string{"spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty"}},
		{"env valueFrom without source", func(p *kplanev1.Pod) {
			c0(p).Env = []*kplanev1.EnvVar{{Name: "X", ValueFrom: &kplanev1.EnvVarSource{}}}
		}, []string{"spec.containers[0].env[0].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef` or `secretKeyRef`"}},
		{"env valueFrom with two sources", func(p *kplanev1.Pod) {
			c0(p).Env = []*kplanev1.EnvVar{{Name: "X", ValueFrom: &kplanev1.EnvVarSource{
				FieldRef:     &kplanev1.ObjectFieldSelector{FieldPath: "metadata.name"},
				SecretKeyRef: &kplanev1.SecretKeySelector{Name: "s", Key: "k"}}}}
		}, []string{"spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not have more than one field specified at a time"}},
		{"env fieldRef path", func(p *kplanev1.Pod) {
			c0(p).Env = []*kplanev1.EnvVar{{Name: "X", ValueFrom: &kplanev1.EnvVarSource{FieldRef: &kplanev1.ObjectFieldSelector{FieldPath: "spec.restartPolicy"}}}}
		}, []string{`spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Unsupported value: "spec.restartPolicy": supported values: "metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations", "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"`}},
		{"env secretKeyRef without key", func(p *kplanev1.Pod) {
			c0(p).Env = []*kplanev1.EnvVar{{Name: "X", ValueFrom: &kplanev1.EnvVarSource{SecretKeyRef: &kplanev1.SecretKeySelector{Name: "s"}}}}
		}, []string{"spec.containers[0].env[0].valueFrom.secretKeyRef.key: Required value"}},
		{"env resourceFieldRef", func(p *kplanev1.Pod) {
			c0(p).Env = []*kplanev1.EnvVar{{Name: "X", ValueFrom: &kplanev1.EnvVarSource{ResourceFieldRef: &kplanev1.ResourceFieldSelector{
				ContainerName: "nope", Resource: "limits.gpu"}}}}
		}, []string{
			`spec.containers[0].env[0].valueFrom.resourceFieldRef.resource: Unsupported value: "limits.gpu": supported values: "limits.cpu", "limits.memory", "requests.cpu", "requests.memory"`,
			`spec.containers[0].env[0].valueFrom.resourceFieldRef.containerName: Not found: "nope"`,
		}},
		{"envFrom without source", func(p *kplanev1.Pod) { c0(p).EnvFrom = []*kplanev1.EnvFromSource{{Prefix: "P_"}} },
			[]string{"spec.containers[0].envFrom[0]: Required value: must specify one of: `configMapRef` or `secretRef`"}},
		{"envFrom prefix", func(p *kplanev1.Pod) {
			c0(p).EnvFrom = []*kplanev1.EnvFromSource{{Prefix: "1X", SecretRef: &kplanev1.SecretEnvSource{Name: "s"}}}
		}, []string{`spec.containers[0].envFrom[0].prefix: Invalid value: "1X": a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit (e.g. 'my.env-name' or 'MY_ENV.NAME')`}},
		{"sidecar with probes and hooks", func(p *kplanev1.Pod) {
			ic := p.Spec.InitContainers[0]
			ic.RestartPolicy = ptr("Always")
			ic.ReadinessProbe = &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"x"}}}
			ic.Lifecycle = &kplanev1.Lifecycle{PreStop: &kplanev1.LifecycleHandler{Exec: &kplanev1.ExecAction{Command: []string{"x"}}}}
		}, nil},
		{"restartPolicy on an app container", func(p *kplanev1.Pod) { c0(p).RestartPolicy = ptr("Always") },
			[]string{"spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers"}},
		{"init container restartPolicy", func(p *kplanev1.Pod) { p.Spec.InitContainers[0].RestartPolicy = ptr("Never") },
			[]string{`spec.initContainers[0].restartPolicy: Unsupported value: "Never": supported values: "Always"`}},
		{"init container lifecycle", func(p *kplanev1.Pod) {
			p.Spec.InitContainers[0].Lifecycle = &kplanev1.Lifecycle{PostStart: &kplanev1.LifecycleHandler{Exec: &kplanev1.ExecAction{Command: []string{"x"}}}}
		}, []string{"spec.initContainers[0].lifecycle: Forbidden: may not be set for init containers without restartPolicy=Always"}},
		{"hook without handler", func(p *kplanev1.Pod) { c0(p).Lifecycle = &kplanev1.Lifecycle{PreStop: &kplanev1.LifecycleHandler{}} },
			[]string{"spec.containers[0].lifecycle.preStop: Required value: must specify a handler type"}},
		{"hook httpGet port", func(p *kplanev1.Pod) {
			c0(p).Lifecycle = &kplanev1.Lifecycle{PostStart: &kplanev1.LifecycleHandler{HttpGet: &kplanev1.HTTPGetAction{Port: kplanev1.IntOrStringFromInt32(0)}}}
		}, []string{"spec.containers[0].lifecycle.postStart.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive"}},
		{"termination message policy", func(p *kplanev1.Pod) { c0(p).TerminationMessagePolicy = "Always" },
			[]string{`spec.containers[0].terminationMessagePolicy: Unsupported value: "Always": supported values: "File", "FallbackToLogsOnError"`}},
		{"termination message path", func(p *kplanev1.Pod) { c0(p).TerminationMessagePath = "../x" },
			[]string{`spec.containers[0].terminationMessagePath: Invalid value: "../x": must be an absolute path without '..'`}},
		{"exec without command", func(p *kplanev1.Pod) {
			c0(p).ReadinessProbe = &kplanev1.Probe{Exec: &kplanev1.ExecAction{}}
		}, []string{"spec.containers[0].readinessProbe.exec.command: Required value"}},
		{"init container probe", func(p *kplanev1.Pod) {
			p.Spec.InitContainers[0].ReadinessProbe = &kplanev1.Probe{Exec: &kplanev1.ExecAction{Command: []string{"x"}}}
		}, []string{"spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers"}},
		{"volume without source", func(p *kplanev1.Pod) { p.Spec.Volumes[1].EmptyDir = nil },
			[]string{"spec.volumes[1]: Required value: must specify a volume type"}},
		{"volume with two sources", func(p *kplanev1.Pod) { p.Spec.Volumes[1].HostPath = &kplanev1.HostPathVolumeSource{Path: "/x"} },
			[]string{"spec.volumes[1]: Forbidden: may not specify more than 1 volume type"}},
		{"duplicate volume", func(p *kplanev1.Pod) { p.Spec.Volumes[1].Name = "data" },
			[]string{`spec.volumes[1].name: Duplicate value: "data"`}},
		{"volume name missing", func(p *kplanev1.Pod) { p.Spec.Volumes[1].Name = "" }, []string{"spec.volumes[1].name: Required value"}},
		{"claim name missing", func(p *kplanev1.Pod) { p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "" },
			[]string{"spec.volumes[0].persistentVolumeClaim.claimName: Required value"}},
		{"secret name missing", func(p *kplanev1.Pod) {
			p.Spec.Volumes[1] = &kplanev1.Volume{Name: "tmp", Secret: &kplanev1.SecretVolumeSource{}}
		}, []string{"spec.volumes[1].secret.secretName: Required value"}},
		{"host path", func(p *kplanev1.Pod) {
			p.Spec.Volumes[1] = &kplanev1.Volume{Name: "tmp", HostPath: &kplanev1.HostPathVolumeSource{Type: "Dir"}}
		}, []string{"spec.volumes[1].hostPath.path: Required value",
			`spec.volumes[1].hostPath.type: Unsupported value: "Dir": supported values: "", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"`}},
		{"empty dir size", func(p *kplanev1.Pod) { p.Spec.Volumes[1].EmptyDir.SizeLimit = "1GB" },
			[]string{`spec.volumes[1].emptyDir.sizeLimit: Invalid value: "1GB": unable to parse quantity's suffix`}},
		{"mount of undeclared volume", func(p *kplanev1.Pod) { c0(p).VolumeMounts[0].Name = "nope" },
			[]string{`spec.containers[0].volumeMounts[0].name: Not found: "nope"`}},
		{"sub path absolute", func(p *kplanev1.Pod) { c0(p).VolumeMounts[0].SubPath = "/etc" },
			[]string{`spec.containers[0].volumeMounts[0].subPath: Invalid value: "/etc": must be a relative path`}},
		{"sub path escapes", func(p *kplanev1.Pod) { c0(p).VolumeMounts[0].SubPath = "a/../../b" },
			[]string{`spec.containers[0].volumeMounts[0].subPath: Invalid value: "a/../../b": must not contain '..'`}},
		{"secret default mode", func(p *kplanev1.Pod) {
			m := int32(0o1000)
			p.Spec.Volumes[1] = &kplanev1.Volume{Name: "tmp", Secret: &kplanev1.SecretVolumeSource{SecretName: "s", DefaultMode: &m}}
		}, []string{"spec.volumes[1].secret.defaultMode: Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive"}},
		{"mount path missing", func(p *kplanev1.Pod) { c0(p).VolumeMounts[0].MountPath = "" },
			[]string{"spec.containers[0].volumeMounts[0].mountPath: Required value"}},
		{"mount path twice", func(p *kplanev1.Pod) {
			c0(p).VolumeMounts = append(c0(p).VolumeMounts, &kplanev1.VolumeMount{Name: "tmp", MountPath: "/data"})
		}, []string{`spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/data": must be unique`}},
		{"status phase", func(p *kplanev1.Pod) { p.Status = &kplanev1.PodStatus{Phase: "Done"} },
			[]string{`status.phase: Unsupported value: "Done": supported values: "Pending", "Running", "Succeeded", "Failed", "Unknown"`}},
		{"status pod IP", func(p *kplanev1.Pod) { p.Status = &kplanev1.PodStatus{PodIp: "10.0.0"} },
			[]string{`status.podIP: Invalid value: "10.0.0": must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		{"status pod IPs", func(p *kplanev1.Pod) {
			p.Status = &kplanev1.PodStatus{PodIp: "10.0.0.1", PodIps: []*kplanev1.PodIP{{Ip: "10.0.0.1"}, {Ip: "fd00::1"}}}
		}, nil},
		{"status pod IPs differ", func(p *kplanev1.Pod) {
			p.Status = &kplanev1.PodStatus{PodIp: "10.0.0.1", PodIps: []*kplanev1.PodIP{{Ip: "10.0.0.2"}}}
		}, []string{"status.podIPs[0]: Invalid value: \"10.0.0.2\": must match `status.podIP`"}},
		{"generateName is enough", func(p *kplanev1.Pod) { p.Metadata.Name, p.Metadata.GenerateName = "", "web-" }, nil},
		{"affinity and spread", func(p *kplanev1.Pod) {
			p.Spec.Affinity, p.Spec.TopologySpreadConstraints = validAffinity(), validSpread()
		}, nil},
		{"node affinity without terms", func(p *kplanev1.Pod) {
			p.Spec.Affinity = &kplanev1.Affinity{NodeAffinity: &kplanev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &kplanev1.NodeSelector{}}}
		}, []string{"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: Required value: must have at least one node selector term"}},
		{"node affinity operator", func(p *kplanev1.Pod) {
			p.Spec.Affinity = validAffinity()
			p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Operator = "Is"
		}, []string{`spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: "Is": supported values: "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"`}},
		{"node affinity matchFields on the node name", func(p *kplanev1.Pod) {
			p.Spec.Affinity = validAffinity()
			p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields = []*kplanev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: "In", Values: []string{"node-1"}}}
		}, nil},
		{"node affinity matchFields key", func(p *kplanev1.Pod) {
			p.Spec.Affinity = validAffinity()
			p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields = []*kplanev1.NodeSelectorRequirement{{Key: "metadata.uid", Operator: "In", Values: []string{"x"}}}
		}, []string{`spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].key: Invalid value: "metadata.uid": not a valid field selector key, must be metadata.name`}},
		{"node affinity matchFields operator and values", func(p *kplanev1.Pod) {
			p.Spec.Affinity = validAffinity()
			p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].Preference.MatchFields = []*kplanev1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: "Exists"}, {Key: "metadata.name", Operator: "In", Values: []string{"a", "b"}}}
		}, []string{
			`spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchFields[0].operator: Unsupported value: "Exists": supported values: "In", "NotIn"`,
			"spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchFields[1].values: Required value: must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
		}},
		{"node affinity Gt not a number", func(p *kplanev1.Pod) {
			p.Spec.Affinity = validAffinity()
			p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].Preference.MatchExpressions[0] = &kplanev1.NodeSelectorRequirement{Key: "cores", Operator: "Gt", Values: []string{"many"}}
		}, []string{`spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].values[0]: Invalid value: "many": must be an integer when ` + "`operator`" + ` is 'Lt' or 'Gt'`}},
		{"preferred weight", func(p *kplanev1.Pod) {
			p.Spec.Affinity = validAffinity()
			p.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].Weight = 0
		}, []string{"spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: 0: must be in the range 1-100"}},
		{"topology key missing", func(p *kplanev1.Pod) {
			p.Spec.Affinity = validAffinity()
			p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey = ""
		}, []string{"spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Required value: can not be empty"}},
		{"pod affinity selector", func(p *kplanev1.Pod) {
			p.Spec.Affinity = validAffinity()
			p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchExpressions = []*kplanev1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}
		}, []string{`spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].operator: Unsupported value: "Near": ...`}},
		{"spread maxSkew", func(p *kplanev1.Pod) {
			p.Spec.TopologySpreadConstraints = validSpread()
			p.Spec.TopologySpreadConstraints[0].MaxSkew = 0
		},
			[]string{"spec.topologySpreadConstraints[0].maxSkew: Invalid value: 0: must be greater than zero"}},
		{"spread whenUnsatisfiable", func(p *kplanev1.Pod) {
			p.Spec.TopologySpreadConstraints = validSpread()
			p.Spec.TopologySpreadConstraints[0].WhenUnsatisfiable, p.Spec.TopologySpreadConstraints[0].MinDomains = "", nil
		},
			[]string{`spec.topologySpreadConstraints[0].whenUnsatisfiable: Unsupported value: "": supported values: "DoNotSchedule", "ScheduleAnyway"`}},
		{"spread duplicate", func(p *kplanev1.Pod) {
			p.Spec.TopologySpreadConstraints = append(validSpread(), validSpread()[0])
		}, []string{`spec.topologySpreadConstraints[2]: Duplicate value: "{topology.kubernetes.io/zone, DoNotSchedule}"`}},
		{"spread minDomains with ScheduleAnyway", func(p *kplanev1.Pod) {
			p.Spec.TopologySpreadConstraints = validSpread()
			p.Spec.TopologySpreadConstraints[1].MinDomains = ptr[int32](2)
		}, []string{"spec.topologySpreadConstraints[1].minDomains: Invalid value: 2: can only use minDomains if whenUnsatisfiable=DoNotSchedule"}},
		{"spread policy", func(p *kplanev1.Pod) {
			p.Spec.TopologySpreadConstraints = validSpread()
			p.Spec.TopologySpreadConstraints[0].NodeTaintsPolicy = "Always"
		},
			[]string{`spec.topologySpreadConstraints[0].nodeTaintsPolicy: Unsupported value: "Always": supported values: "Honor", "Ignore"`}},
		{"spread matchLabelKeys overlap", func(p *kplanev1.Pod) {
			p.Spec.TopologySpreadConstraints = validSpread()
			p.Spec.TopologySpreadConstraints[0].MatchLabelKeys = []string{"app"}
		}, []string{`spec.topologySpreadConstraints[0].matchLabelKeys[0]: Invalid value: "app": exists in both matchLabelKeys and labelSelector`}},
	})
}

func validAffinity() *kplanev1.Affinity {
	term := func() *kplanev1.PodAffinityTerm {
		return &kplanev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
	}
	zone := func() *kplanev1.NodeSelectorTerm {
		return &kplanev1.NodeSelectorTerm{MatchExpressions: []*kplanev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: "In", Values: []string{"a"}}}}
	}
	return &kplanev1.Affinity{
		NodeAffinity: &kplanev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution:  &kplanev1.NodeSelector{NodeSelectorTerms: []*kplanev1.NodeSelectorTerm{zone()}},
			PreferredDuringSchedulingIgnoredDuringExecution: []*kplanev1.PreferredSchedulingTerm{{Weight: 10, Preference: zone()}},
		},
		PodAffinity:     &kplanev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*kplanev1.PodAffinityTerm{term()}},
		PodAntiAffinity: &kplanev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*kplanev1.PodAffinityTerm{term()}, PreferredDuringSchedulingIgnoredDuringExecution: []*kplanev1.WeightedPodAffinityTerm{{Weight: 50, PodAffinityTerm: term()}}},
	}
}

func validSpread() []*kplanev1.TopologySpreadConstraint {
	sel := func() *kplanev1.LabelSelector {
		return &kplanev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	}
	return []*kplanev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: "DoNotSchedule", LabelSelector: sel(), MinDomains: ptr[int32](3), NodeAffinityPolicy: "Ignore", MatchLabelKeys: []string{"pod-template-hash"}},
		{MaxSkew: 2, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: "ScheduleAnyway", LabelSelector: sel()},
	}
}

func TestPodUpdate(t *testing.T) {
	bound := func() *kplanev1.Pod { p := validPod(); p.Spec.NodeName = "n1"; return p }
	checkUpdate(t, "Pod", validPod, []utc[*kplanev1.Pod]{
		{"labels", func(p *kplanev1.Pod) { p.Metadata.Labels["x"] = "y" }, nil},
		{"image", func(p *kplanev1.Pod) { c0(p).Image = "nginx:1.26"; p.Spec.InitContainers[0].Image = "busybox:2" }, nil},
		{"bind once", func(p *kplanev1.Pod) { p.Spec.NodeName = "n1" }, nil},
		{"add toleration", func(p *kplanev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, &kplanev1.Toleration{Key: "k", Operator: "Exists"})
		}, nil},
		{"set active deadline", func(p *kplanev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr[int64](60) }, nil},
		{"status", func(p *kplanev1.Pod) { p.Status.Phase = "Running" }, nil},
		{"remove toleration", func(p *kplanev1.Pod) { p.Spec.Tolerations = p.Spec.Tolerations[:1] },
			[]string{"spec.tolerations: Forbidden: existing tolerations may not be removed"}},
		{"change toleration", func(p *kplanev1.Pod) { p.Spec.Tolerations[1].Value = "db" },
			[]string{"spec.tolerations[1]: Forbidden: existing tolerations may not be changed; only additions are allowed"}},
		{"restart policy", func(p *kplanev1.Pod) { p.Spec.RestartPolicy = "Never" },
			[]string{"spec: Forbidden: pod updates may not change fields other than spec.containers[*].image, spec.initContainers[*].image, spec.activeDeadlineSeconds, spec.tolerations (additions only) and spec.nodeName (once, when unset)"}},
		{"env", func(p *kplanev1.Pod) { c0(p).Env[0].Value = "dev" }, []string{"spec: Forbidden: pod updates may not change fields other than..."}},
		{"add container", func(p *kplanev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, &kplanev1.Container{Name: "side", Image: "x"})
		}, []string{"spec: Forbidden: pod updates may not change fields other than..."}},
		{"rename", func(p *kplanev1.Pod) { p.Metadata.Name = "web-2" }, []string{`metadata.name: Invalid value: "web-2": field is immutable`}},
		{"move namespace", func(p *kplanev1.Pod) { p.Metadata.Namespace = "other" }, []string{`metadata.namespace: Invalid value: "other": field is immutable`}},
	})
	checkUpdate(t, "Pod", bound, []utc[*kplanev1.Pod]{
		{"rebind", func(p *kplanev1.Pod) { p.Spec.NodeName = "n2" }, []string{`spec.nodeName: Invalid value: "n2": field is immutable once set`}},
		{"unbind", func(p *kplanev1.Pod) { p.Spec.NodeName = "" }, []string{`spec.nodeName: Invalid value: "": field is immutable once set`}},
	})
	withDeadline := func() *kplanev1.Pod { p := validPod(); p.Spec.ActiveDeadlineSeconds = ptr[int64](60); return p }
	checkUpdate(t, "Pod", withDeadline, []utc[*kplanev1.Pod]{
		{"lower deadline", func(p *kplanev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr[int64](30) }, nil},
		{"raise deadline", func(p *kplanev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr[int64](90) },
			[]string{"spec.activeDeadlineSeconds: Invalid value: 90: may only be lowered"}},
		{"remove deadline", func(p *kplanev1.Pod) { p.Spec.ActiveDeadlineSeconds = nil },
			[]string{`spec.activeDeadlineSeconds: Invalid value: "null": must not be removed once set`}},
	})
}
