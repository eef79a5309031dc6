# kplane: every binary is static (CGO_ENABLED=0) so the same files run
# locally and in FROM-scratch images.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

GO        ?= go
BIN       := $(CURDIR)/bin
TOOLS     := $(CURDIR)/.tools/bin
export PATH := $(TOOLS):$(PATH)

# Modules are read from go.work; every module under services/ and cmd/
# builds one binary named after its directory; examples/scheduler-plugin
# builds the example custom scheduler (bin/scheduler-plugin).
MODULES   := $(shell sed -n 's@^[[:space:]]*\./@@p' go.work)
BINARIES  := $(foreach m,$(filter services/% cmd/%,$(MODULES)),$(m):$(notdir $(m))) \
             examples/scheduler-plugin:scheduler-plugin

# Pinned tools (make tools installs them into .tools/bin): code generation
# and the linters (.golangci.yml says which).
BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
GOLANGCI_LINT_VERSION      := v2.15.0
# grpcurl for the README's examples and the quick-start smoke (make tools).
GRPCURL_VERSION            := v1.9.3

.PHONY: busybox all build test lint proto proto-check tools up up-mono down dev chaos chaos-mono bench-mono images bench-apiserver bench-scheduler bench-endpoints clean

all: build

build:
	@mkdir -p $(BIN)
	@for b in $(BINARIES); do \
		dir=$${b%%:*}; name=$${b##*:}; \
		echo "build bin/$$name"; \
		(cd $$dir && CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/$$name .); \
	done

# Every module's tests, with the race detector (goroutines live everywhere).
# The e2e tests run the binaries that build just wrote; TestCompose builds
# the images, so it needs the node image's busybox as make up does. Every
# module runs even when an earlier one failed, so one run shows every
# failure; the failed modules are listed at the end.
#
# test/e2e runs beside the other modules: its tests wait on processes,
# sockets and Docker more than they compute (about a third of two cores),
# so the two overlap well; its output is printed once it is done. The
# modules whose tests program the host's network (netlink links, routes)
# wait for it, so they never overlap the compose tests' Docker networks.
E2E_MODULE      := test/e2e
HOSTNET_MODULES := services/nodeagent
test: build busybox
	@logs=$$(mktemp -d); failed=""; \
	run() { echo "== go test -race $$1"; t=$$(date +%s); \
		(cd $$1 && KPLANE_BIN=$(BIN) $(GO) test -race -count=1 -timeout 20m ./...) || failed="$$failed $$1"; \
		echo "== $$1: $$(( $$(date +%s) - t ))s"; }; \
	(run $(E2E_MODULE); echo "$$failed" > $$logs/failed) > $$logs/e2e.log 2>&1 & e2e=$$!; \
	for m in $(filter-out $(E2E_MODULE) $(HOSTNET_MODULES),$(MODULES)); do run $$m; done; \
	wait $$e2e; cat $$logs/e2e.log; failed="$$failed$$(cat $$logs/failed 2>/dev/null || echo ' $(E2E_MODULE)')"; \
	for m in $(filter $(HOSTNET_MODULES),$(MODULES)); do run $$m; done; \
	rm -rf $$logs; \
	if [ -n "$$failed" ]; then echo "FAILED modules:$$failed"; exit 1; fi

# gofmt, go vet, golangci-lint (staticcheck, errcheck, ... per
# .golangci.yml) in every module, and buf lint. golangci-lint takes every
# module of go.work in one run (the workspace shares one type-checked
# graph, which is several times faster than a run per module).
lint: tools
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done
	golangci-lint run --allow-parallel-runners $(addsuffix /...,$(addprefix ./,$(MODULES)))
	cd proto && buf lint

tools:
	@mkdir -p $(TOOLS)
	@test -x $(TOOLS)/buf || GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	@test -x $(TOOLS)/protoc-gen-go || GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@test -x $(TOOLS)/protoc-gen-go-grpc || GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@$(TOOLS)/golangci-lint version 2>/dev/null | grep -q ' $(GOLANGCI_LINT_VERSION:v%=%) ' || \
		GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@test -x $(TOOLS)/grpcurl || GOBIN=$(TOOLS) $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

proto: tools
	cd proto && buf lint && buf generate && buf build --exclude-imports -o kplane/v1/descriptors.binpb
	cd proto && $(GO) run ./internal/genkinds > kplane/v1/object_kinds.go.tmp && mv kplane/v1/object_kinds.go.tmp kplane/v1/object_kinds.go

# Fails when the committed generated code differs from what make proto writes.
proto-check: proto
	@if [ -n "$$(git status --porcelain -- proto/)" ]; then git status --short -- proto/; git diff -- proto/ | head -50; echo "generated code is stale: run make proto and commit"; exit 1; fi

# The compose deployment (deploy/compose): one FROM-scratch image per
# service from the static binaries; nothing is pulled. The docker compose
# plugin is used when present, else the standalone docker-compose.
KPLANE_PROJECT ?= kplane
COMMA := ,
COMPOSE ?= $(shell if docker compose version >/dev/null 2>&1; then echo "docker compose"; else echo docker-compose; fi) \
	-f $(CURDIR)/deploy/compose/compose.yaml -p $(KPLANE_PROJECT)

images: build busybox
	deploy/compose/build-images.sh

# The node image's shell for example pods: Debian's static busybox,
# installed when missing and no BUSYBOX=/path/to/static/busybox is given
# (apt-get, as root on Debian like CI; sudo otherwise). Without Docker no
# image is built and nothing is installed.
busybox:
	@if command -v docker >/dev/null 2>&1 && [ -z "$${BUSYBOX:-}" ] && ! [ -x /bin/busybox ] && ! command -v busybox >/dev/null 2>&1; then \
		if ! command -v apt-get >/dev/null 2>&1; then \
			echo "busybox: no busybox and no apt-get: install a static busybox and set BUSYBOX=/path/to/it" >&2; exit 1; \
		fi; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		echo "installing busybox-static (apt-get)"; \
		$$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; \
	fi

# Build binaries and images, write the cluster's certificates into
# CERTS_DIR (kept when they exist: the CA never rotates by itself), then
# start the stack in the background. Every container mounts CERTS_DIR
# read-only (KPLANE_CERTS); the admin kubeconfig names the published port.
KPLANE_API_PORT ?= 6443
up: images
	$(BIN)/kpctl certs --server 127.0.0.1:$(KPLANE_API_PORT) --dir $(CERTS_DIR) --nodes $(CERTS_NODES) $(if $(CERTS_HOSTS),--hosts $(CERTS_HOSTS))
	KPLANE_CERTS=$(CERTS_DIR) KPLANE_API_PORT=$(KPLANE_API_PORT) $(COMPOSE) up -d
	@echo "kplane is up: apiserver on https://127.0.0.1:$(KPLANE_API_PORT) (TLS, client certificates)."
	@echo "export KUBECONFIG=$(CERTS_DIR)/admin.kubeconfig"
	@echo "Then try: bin/kpctl get nodes; bin/kpctl get leases -n kplane-system"

# The same stack in the mono shape: two kcm replicas (every controller
# loop but the scheduler's in one process) instead of two replicas of each
# controller (compose profile mono; docs/architecture.md, "One process or
# many"). make down stops either shape.
up-mono: images
	$(BIN)/kpctl certs --server 127.0.0.1:$(KPLANE_API_PORT) --dir $(CERTS_DIR) --nodes $(CERTS_NODES) $(if $(CERTS_HOSTS),--hosts $(CERTS_HOSTS))
	KPLANE_CERTS=$(CERTS_DIR) KPLANE_API_PORT=$(KPLANE_API_PORT) KPLANE_CONTROLLER_REPLICAS=0 COMPOSE_PROFILES=mono $(COMPOSE) up -d
	@echo "kplane (mono: kcm) is up: apiserver on https://127.0.0.1:$(KPLANE_API_PORT) (TLS, client certificates)."
	@echo "export KUBECONFIG=$(CERTS_DIR)/admin.kubeconfig"

# The same stack with the simulated cloud (compose profile "cloud"):
# cloudsim, cloudctl, node agents with --cloud-provider=external; load
# balancers on 127.0.0.1:30800-30809 (KPLANE_LB_PORTS), cloudsim's API on
# 127.0.0.1:7070 (KPLANE_CLOUD_PORT): bin/cloudsim lb list.
.PHONY: up-cloud
up-cloud: images
	$(BIN)/kpctl certs --server 127.0.0.1:$(KPLANE_API_PORT) --dir $(CERTS_DIR) --nodes $(CERTS_NODES) $(if $(CERTS_HOSTS),--hosts $(CERTS_HOSTS))
	KPLANE_CERTS=$(CERTS_DIR) KPLANE_API_PORT=$(KPLANE_API_PORT) KPLANE_CLOUD_PROVIDER=external KPLANE_CLOUD_ROUTES=cloudsim:7070 $(COMPOSE) --profile cloud up -d
	@echo "kplane is up with the simulated cloud: bin/cloudsim instance list; bin/cloudsim lb list"

# Stop and remove the containers; the volumes (etcd data, node root dirs)
# stay for the next `make up` (docker-compose down -v removes them too).
# deploy/compose/down.sh clears an endpoint Docker left on the network.
down:
	KPLANE_CERTS=$(CERTS_DIR) COMPOSE_PROFILES=mono deploy/compose/down.sh $(KPLANE_PROJECT) $(COMPOSE) --profile cloud down --remove-orphans

# The HA profile (deploy/compose/compose.ha.yaml): three apiservers, each
# embedding one etcd member; every other service gets all three. Its own
# certificates (CERTS_HA_DIR) name apiserver-2 and apiserver-3 as well.
CERTS_HA_DIR ?= $(CURDIR)/certs-ha
KPLANE_HA_APISERVERS := apiserver:6443,apiserver-2:6443,apiserver-3:6443
# The second and third apiservers' published ports (the first is
# KPLANE_API_PORT).
KPLANE_API_PORT_2 ?= 6453
KPLANE_API_PORT_3 ?= 6463
COMPOSE_HA = $(COMPOSE) -f $(CURDIR)/deploy/compose/compose.ha.yaml
.PHONY: up-ha down-ha
up-ha: images
	$(BIN)/kpctl certs --server 127.0.0.1:$(KPLANE_API_PORT) --dir $(CERTS_HA_DIR) --nodes $(CERTS_NODES) --hosts apiserver-2,apiserver-3$(if $(CERTS_HOSTS),$(COMMA)$(CERTS_HOSTS))
	KPLANE_CERTS=$(CERTS_HA_DIR) KPLANE_API_PORT=$(KPLANE_API_PORT) KPLANE_API_PORT_2=$(KPLANE_API_PORT_2) KPLANE_API_PORT_3=$(KPLANE_API_PORT_3) \
		KPLANE_APISERVERS=$(KPLANE_HA_APISERVERS) $(COMPOSE_HA) up -d
	@echo "kplane HA is up: three apiservers (stacked etcd) on 127.0.0.1:$(KPLANE_API_PORT), :$(KPLANE_API_PORT_2) and :$(KPLANE_API_PORT_3)."
	@echo "export KUBECONFIG=$(CERTS_HA_DIR)/admin.kubeconfig"
	@echo "Then try: bin/kpctl admin etcd member list"

down-ha:
	KPLANE_CERTS=$(CERTS_HA_DIR) KPLANE_APISERVERS=$(KPLANE_HA_APISERVERS) deploy/compose/down.sh $(KPLANE_PROJECT) $(COMPOSE_HA) down --remove-orphans

# The same set as local processes (no Docker): data under ./data, logs in
# ./data/logs, Ctrl-C stops everything.
dev: build
	cd test/e2e && CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/kplane-dev ./cmd/kplane-dev
	$(BIN)/kplane-dev --bin $(BIN) --data $(CURDIR)/data

# The chaos harness (test/chaos): kills services while a workload runs,
# then checks the invariants. CHAOS_TARGET=compose runs it against the
# stack `make up` started, CHAOS_TARGET=compose-ha against `make up-ha`'s
# (the same KPLANE_PROJECT and KPLANE_API_PORT*).
CHAOS_DURATION ?= 2m
CHAOS_SEED     ?= 0
CHAOS_TARGET   ?= local
CHAOS_FLAGS    ?=
chaos: build
	cd test/chaos && $(GO) run . --bin $(BIN) --target $(CHAOS_TARGET) --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED) \
		$(if $(filter compose,$(CHAOS_TARGET)),--certs $(CERTS_DIR) --project $(KPLANE_PROJECT) --server 127.0.0.1:$(KPLANE_API_PORT)) \
		$(if $(filter compose-ha,$(CHAOS_TARGET)),--certs $(CERTS_HA_DIR) --project $(KPLANE_PROJECT) --server 127.0.0.1:$(KPLANE_API_PORT)$(COMMA)127.0.0.1:$(KPLANE_API_PORT_2)$(COMMA)127.0.0.1:$(KPLANE_API_PORT_3)) \
		$(CHAOS_FLAGS)

# The chaos harness against the mono shape: kcm processes (local target),
# or, with CHAOS_TARGET=compose, the stack `make up-mono` started.
chaos-mono: build
	cd test/chaos && $(GO) run . --bin $(BIN) --target $(CHAOS_TARGET) --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED) $(if $(filter compose,$(CHAOS_TARGET)),--certs $(CERTS_DIR),--mono) $(CHAOS_FLAGS)

bench-apiserver:
	cd services/apiserver && $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./bench/... ./internal/apiserver/

# Issue 23's Lists without the scale stack: paginated and one-call List
# and kpctl get pods -A of LIST_SCALE_PODS (100,000) Running pods on a
# secured in-process apiserver, and its heap (docs/benchmarks.md, "Scale").
.PHONY: bench-list
bench-list:
	cd services/apiserver && $(GO) test -run '^$$' -bench BenchmarkListScale -benchtime 1x -timeout 30m ./bench/

# Create throughput plain against TLS + client certificates and TLS +
# static token, same run, printed as ratios (docs/benchmarks.md).
.PHONY: bench-auth
bench-auth:
	cd services/apiserver && $(GO) test -run '^$$' -bench BenchmarkCreateAuth -benchtime 1x -timeout 20m ./bench/

# The cluster's CA, certificates, keys and admin kubeconfig (kpctl certs):
# existing files are kept, so running it again never rotates the CA.
# CERTS_NODES names the node agents that get a certificate.
CERTS_DIR   ?= $(CURDIR)/certs
CERTS_NODES ?= node-1,node-2,node-3
CERTS_HOSTS ?=
.PHONY: certs
certs:
	cd cmd/kpctl && $(GO) run . certs --server 127.0.0.1:$(KPLANE_API_PORT) --dir $(CERTS_DIR) --nodes $(CERTS_NODES) $(if $(CERTS_HOSTS),--hosts $(CERTS_HOSTS))

# replicactl with real processes: 1000 pods created by replicactl alone
# (pods/s), then 1000 pods Running on 100 fake nodes (scheduler and node
# agent included). The e2e harness builds the binaries it needs.
# REST/JSON against gRPC/protobuf for GET, LIST and Create, printed as
# ratios (docs/benchmarks.md).
.PHONY: bench-rest
bench-rest:
	cd services/apiserver && $(GO) test -run '^$$' -bench BenchmarkRESTvsGRPC -benchtime 1x -timeout 10m ./bench/

# One process or many (docs/architecture.md): the same workload against
# one process per controller and against kcm, in one run, printed as a
# table (tiny by default; KPLANE_BENCH_MONO=full for the larger run).
KPLANE_BENCH_MONO ?= tiny
bench-mono: build
	cd test/e2e && KPLANE_BIN=$(BIN) KPLANE_BENCH_MONO=$(KPLANE_BENCH_MONO) $(GO) test -run '^$$' -bench BenchmarkShapes -benchtime 1x -timeout 30m .
# HA: Create throughput and p99, one apiserver process (one etcd member)
# against three (one cluster), same run, as ratios; and how long writes
# are unavailable after SIGKILL of the etcd leader's apiserver, 10 times
# (docs/benchmarks.md).
.PHONY: bench-ha
bench-ha: build
	cd test/e2e && KPLANE_BIN=$(BIN) $(GO) test -run '^$$' -bench 'BenchmarkHA' -benchtime 1x -timeout 30m .

.PHONY: bench-replicas
bench-replicas:
	cd test/e2e && $(GO) test -run '^$$' -bench BenchmarkReplicaSet1000 -benchtime 1x -timeout 30m .

# jobctl with real processes: an Indexed Job of 5000 completions at
# parallelism 500 on 100 fake nodes, pods succeeding after 100 ms: time to
# Complete and completions/s.
.PHONY: bench-jobs
bench-jobs:
	cd test/e2e && $(GO) test -run '^$$' -bench BenchmarkJob5000 -benchtime 1x -timeout 30m .

# pvctl: time to bind 100 and 1000 claims, to static volumes and through
# the local-path provisioner (apiserver and pvctl in one process).
.PHONY: bench-pvctl
bench-pvctl:
	cd services/pvctl && $(GO) test -run '^$$' -bench BenchmarkBind -benchtime 1x -timeout 20m ./pv/
# deploymentctl with real processes: a Deployment of 1000 replicas on 100
# fake nodes rolled to a new template with maxSurge/maxUnavailable 25%:
# time to complete and pods replaced/s (bounds checked at every pod event).
# statefulsetctl and daemonsetctl with real processes: a StatefulSet of 100
# replicas (OrderedReady, Parallel, a rolling update) and a DaemonSet on 50
# fake nodes (creation, a rolling update); see docs/benchmarks.md.
.PHONY: bench-sets
bench-sets:
	cd test/e2e && $(GO) test -run '^$$' -bench 'BenchmarkStatefulSet100|BenchmarkDaemonSet50' -benchtime 1x -timeout 30m .

.PHONY: bench-rollout
bench-rollout:
	cd test/e2e && $(GO) test -run '^$$' -bench BenchmarkRollout1000 -benchtime 1x -timeout 30m .

# endpointsctl: a Service over 1000 pods, 100 turning not ready at once,
# with batch periods 0 and 500ms; and the CPU of one reconcile's decision
# over 1000 pods (docs/benchmarks.md).
bench-endpoints:
	cd services/endpointsctl && $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 20m ./bench/...
	cd services/endpointsctl && $(GO) test -run '^$$' -bench Decide1000 -benchmem ./endpoints/...

# 100 nodes, 5000 pods created at once: pods scheduled per second and
# time from the first create to every pod Running.
# The scheduler: BenchmarkScheduler (100 fake nodes, 5,000 pods) and
# BenchmarkSchedulerPerf (scheduler_perf shapes on 1,000 nodes: plain,
# anti-affinity, spread, preemption, replicaset on SCHEDULER_PERF_PLACED
# bound pods; SCHEDULER_PERF_SHAPES=1 for plain only).
bench-scheduler:
	cd services/scheduler && $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 20m ./bench/...

# The service proxy: requests/s, MB/s and p50/p99 latency straight to
# three HTTP backends and through a Service's clusterIP, same run, with
# the ratios. PROXY_BENCH_FLAGS e.g. -proxy-bench-duration=10s.
PROXY_BENCH_FLAGS ?=
.PHONY: bench-proxy
bench-proxy:
	cd services/proxy && $(GO) test -run '^$$' -bench BenchmarkProxy -benchtime 1x -timeout 10m ./proxier/ -args $(PROXY_BENCH_FLAGS)

clean:
	rm -rf $(BIN) ./data

# The scale scenario (issue 23): apiserver, scheduler, replicactl, ipamctl
# (tokenctl when secure) and one node agent faking NODES nodes as
# processes, a ReplicaSet of PODS: pods Running/s by tenth and the
# last/first ratio, every process's RSS and CPU, pod startup p50/p99, API
# p99 per method, paginated and full List and kpctl get pods -A times,
# and a PNG plot (SCALE_PLOT). SCALE_PROFILE_DIR=dir saves CPU and heap
# profiles of every process at each of SCALE_PROFILE_AT (a comma list)
# Running pods. CI runs the
# small version (TestScaleSmall: 100 nodes, 5,000 pods).
NODES ?= 1000
PODS  ?= 100000
SCALE_PLOT ?= $(CURDIR)/docs/bench-scale.png
.PHONY: bench-scale
bench-scale: build
	cd test/e2e && KPLANE_BIN=$(BIN) SCALE_NODES=$(NODES) SCALE_PODS=$(PODS) SCALE_PLOT=$(SCALE_PLOT) \
		$(GO) test -run '^$$' -bench BenchmarkScale -benchtime 1x -timeout 90m .
