module github.com/kplane/kplane/services/kcm

go 1.26.0

require (
	github.com/kplane/kplane/pkg v0.0.0
	github.com/kplane/kplane/services/cronjobctl v0.0.0
	github.com/kplane/kplane/services/daemonsetctl v0.0.0
	github.com/kplane/kplane/services/deploymentctl v0.0.0
	github.com/kplane/kplane/services/disruptionctl v0.0.0
	github.com/kplane/kplane/services/endpointsctl v0.0.0
	github.com/kplane/kplane/services/gcctl v0.0.0
	github.com/kplane/kplane/services/ipamctl v0.0.0
	github.com/kplane/kplane/services/jobctl v0.0.0
	github.com/kplane/kplane/services/nodectl v0.0.0
	github.com/kplane/kplane/services/pvctl v0.0.0
	github.com/kplane/kplane/services/replicactl v0.0.0
	github.com/kplane/kplane/services/statefulsetctl v0.0.0
	github.com/kplane/kplane/services/tokenctl v0.0.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/fatih/color v1.13.0 // indirect
	github.com/go-jose/go-jose/v4 v4.1.9 // indirect
	github.com/hashicorp/go-hclog v1.6.3 // indirect
	github.com/kplane/kplane/proto v0.0.0 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.14 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/kplane/kplane/pkg => ../../pkg
	github.com/kplane/kplane/proto => ../../proto
	github.com/kplane/kplane/services/apiserver => ../../services/apiserver
	github.com/kplane/kplane/services/cronjobctl => ../../services/cronjobctl
	github.com/kplane/kplane/services/daemonsetctl => ../../services/daemonsetctl
	github.com/kplane/kplane/services/deploymentctl => ../../services/deploymentctl
	github.com/kplane/kplane/services/disruptionctl => ../../services/disruptionctl
	github.com/kplane/kplane/services/endpointsctl => ../../services/endpointsctl
	github.com/kplane/kplane/services/gcctl => ../../services/gcctl
	github.com/kplane/kplane/services/ipamctl => ../../services/ipamctl
	github.com/kplane/kplane/services/jobctl => ../../services/jobctl
	github.com/kplane/kplane/services/nodeagent => ../../services/nodeagent
	github.com/kplane/kplane/services/nodectl => ../../services/nodectl
	github.com/kplane/kplane/services/pvctl => ../../services/pvctl
	github.com/kplane/kplane/services/replicactl => ../../services/replicactl
	github.com/kplane/kplane/services/scheduler => ../../services/scheduler
	github.com/kplane/kplane/services/statefulsetctl => ../../services/statefulsetctl
	github.com/kplane/kplane/services/tokenctl => ../../services/tokenctl
)
