module github.com/kplane/kplane/test/chaos

go 1.26.0

require (
	github.com/kplane/kplane/pkg v0.0.0
	github.com/kplane/kplane/proto v0.0.0
	github.com/kplane/kplane/services/daemonsetctl v0.0.0
	github.com/kplane/kplane/test/e2e v0.0.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/fatih/color v1.13.0 // indirect
	github.com/hashicorp/go-hclog v1.6.3 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.14 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)

replace (
	github.com/kplane/kplane/pkg => ../../pkg
	github.com/kplane/kplane/proto => ../../proto
	github.com/kplane/kplane/services/apiserver => ../../services/apiserver
	github.com/kplane/kplane/services/daemonsetctl => ../../services/daemonsetctl
	github.com/kplane/kplane/test/e2e => ../e2e
)
