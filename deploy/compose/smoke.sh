#!/usr/bin/env bash
# The README's quick-start examples, as the README writes them, against the
# stack `make up` started (project kplane, apiserver on 127.0.0.1:6443).
# .ci/run runs it between `make up` and `make down`; every step has a
# deadline, and on a failure the stack's state and logs are printed.
#
# Usage: deploy/compose/smoke.sh   (from anywhere; needs make up and make tools)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
# The README: make tools puts the pinned grpcurl into .tools/bin.
export PATH="$root/.tools/bin:$PATH"
# The README: make up writes certs/ and prints this export; kpctl (and
# kubectl) authenticate as the admin through it. KPLANE_CERTS names
# another directory, as for compose.
certs="${KPLANE_CERTS:-$root/certs}"
export KUBECONFIG="$certs/admin.kubeconfig"
[ -r "$KUBECONFIG" ] || { echo "smoke: $KUBECONFIG is missing; run make up first" >&2; exit 1; }
# grpcurl and curl as the README writes them: TLS verified against the
# cluster's CA, the admin's client certificate; paths relative to the
# repo root, like the README's commands.
grpc_tls=(-cacert certs/ca.crt -cert certs/admin.crt -key certs/admin.key)
curl_tls=(--cacert certs/ca.crt --cert certs/admin.crt --key certs/admin.key)
if [ "$certs" != "$root/certs" ]; then
	grpc_tls=(-cacert "$certs/ca.crt" -cert "$certs/admin.crt" -key "$certs/admin.key")
	curl_tls=(--cacert "$certs/ca.crt" --cert "$certs/admin.crt" --key "$certs/admin.key")
fi
# The compose command the Makefile uses: the plugin when present.
if docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
else
	compose=(docker-compose)
fi

started=$SECONDS
fail() {
	echo "smoke: FAILED: $*" >&2
	(
		cd "$root/deploy/compose"
		echo "==== ${compose[*]} ps"
		"${compose[@]}" ps
		echo "==== bin/kpctl get nodes,pods,leases"
		"$root/bin/kpctl" get nodes -o wide
		"$root/bin/kpctl" get pods -o wide
		"$root/bin/kpctl" get leases -n kplane-system
		echo "==== ${compose[*]} logs"
		"${compose[@]}" logs --no-color --tail 60
	) >&2 2>&1 || true
	exit 1
}

# run CMD...: runs a README command, echoing it; its failure, or taking
# more than two minutes, fails the smoke.
run() {
	echo "+ $*"
	timeout 120 "$@" || fail "$* exited with status $? (124: timed out)"
}

# wait_for WHAT SECONDS CMD...: polls CMD once a second until it succeeds.
wait_for() {
	local what=$1 secs=$2 deadline=$((SECONDS + $2))
	shift 2
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			fail "$what: not within ${secs}s"
		fi
		sleep 1 # polling interval
	done
	echo "ok: $what (at ${SECONDS}s)"
}

count() { grep -c "$@" || true; }
kpctl="$root/bin/kpctl"
nodes_ready() { [ "$("$kpctl" get nodes --no-headers | awk '$2 == "Ready"' | wc -l)" -eq 3 ]; }
web_running() { [ "$("$kpctl" get pods -l app=web --no-headers | awk '$3 == "Running"' | wc -l)" -eq "$1" ]; }
lease_holder() { "$kpctl" get lease "$1" -n kplane-system --no-headers | awk '{print $2}'; }
running() { docker ps -q --filter label=com.docker.compose.project=kplane --filter "label=com.docker.compose.service=$1" | wc -l; }
replicactl_running() { [ "$(running replicactl)" -eq "$1" ]; }

# --- kpctl and grpcurl against the apiserver ---
wait_for "three nodes Ready" 120 nodes_ready
run bin/kpctl get nodes -o wide
has_leader() { [ -n "$(lease_holder replicactl)" ]; }
wait_for "a replicactl leader" 60 has_leader
run bin/kpctl get leases -n kplane-system
run bin/kpctl apply -f deploy/compose/examples/web.yaml
wait_for "three web pods Running" 120 web_running 3
run bin/kpctl get pods -o wide
pod="$(bin/kpctl get pods -l app=web --no-headers | awk 'NR == 1 {print $1}')"
logs_served() { "$kpctl" logs "$pod" | grep -q "serving on [0-9]"; }
wait_for "kpctl logs $pod shows its httpd" 60 logs_served
run bin/kpctl logs "$pod"
echo "+ grpcurl ${grpc_tls[*]} 127.0.0.1:6443 list"
out="$(grpcurl -max-time 30 "${grpc_tls[@]}" 127.0.0.1:6443 list 2>&1)" || fail "grpcurl list: $out"
echo "$out"
grep -qx kplane.v1.Resources <<<"$out" || fail "grpcurl list does not show kplane.v1.Resources"
echo "+ grpcurl ${grpc_tls[*]} -d '{...app=web}' 127.0.0.1:6443 kplane.v1.Resources/List"
out="$(grpcurl -max-time 30 "${grpc_tls[@]}" -d '{"kind": "Pod", "namespace": "default", "labelSelector": "app=web"}' \
	127.0.0.1:6443 kplane.v1.Resources/List 2>&1)" || fail "grpcurl List: $out"
n="$(count -E '"name": "web-[a-z0-9]+"' <<<"$out")"
[ "$n" -eq 3 ] || fail "grpcurl List app=web shows $n pods, not 3:"$'\n'"$out"
echo "ok: grpcurl List shows the 3 web pods"

# --- the apiserver's pod proxy, from the Docker host (README, "Pods in the compose stack") ---
pod="$("$kpctl" get pods -l app=web --no-headers | awk '$3 == "Running" {print $1; exit}')"
[ -n "$pod" ] || fail "no Running web pod for the pod proxy"
pod_proxy_answers() {
	curl -sS -m 10 "${curl_tls[@]}" "https://127.0.0.1:6443/api/v1/namespaces/default/pods/$pod:8080/proxy/" | grep -q "hello from $pod"
}
echo "+ curl --cacert certs/ca.crt --cert certs/admin.crt --key certs/admin.key https://127.0.0.1:6443/api/v1/namespaces/default/pods/$pod:8080/proxy/"
# Running is not listening yet: the pod's httpd may still be starting.
wait_for "the apiserver's pod proxy reaches $pod" 60 pod_proxy_answers

# --- the apiserver's service proxy, from the Docker host (README, the Service web) ---
# Its answers come from the web pods; over several requests more than one.
svc_seen=""
service_proxy_answers() {
	local body
	body="$(curl -sS -m 10 "${curl_tls[@]}" "https://127.0.0.1:6443/api/v1/namespaces/default/services/web:80/proxy/")" || return 1
	grep -q "^hello from web-" <<<"$body" || return 1
	grep -qxF "$body" <<<"$svc_seen" || svc_seen+="$body"$'\n'
	[ "$(grep -c . <<<"$svc_seen")" -ge 2 ]
}
echo "+ curl --cacert certs/ca.crt --cert certs/admin.crt --key certs/admin.key https://127.0.0.1:6443/api/v1/namespaces/default/services/web:80/proxy/"
# endpointsctl lists a pod once its readiness probe passes.
wait_for "the apiserver's service proxy answers from two web pods" 60 service_proxy_answers
echo -n "$svc_seen"

# --- the README's grpcurl walk-through: health, create, list, watch, delete, an error ---
# grpc_ok WHAT PATTERN ARGS...: grpcurl ARGS must succeed and print PATTERN.
grpc_ok() {
	local what=$1 pattern=$2 out
	shift 2
	echo "+ grpcurl $what"
	out="$(grpcurl -max-time 30 "$@" 2>&1)" || fail "grpcurl $what: $out"
	grep -qE "$pattern" <<<"$out" || fail "grpcurl $what does not show $pattern:"$'\n'"$out"
}
grpc_ok "Health/Check" SERVING "${grpc_tls[@]}" 127.0.0.1:6443 grpc.health.v1.Health/Check
grpc_ok "Create pod hello" '"name": "hello"' "${grpc_tls[@]}" -d '{"object": {"pod": {
  "metadata": {"name": "hello", "namespace": "default", "labels": {"app": "hello"}},
  "spec": {"containers": [{"name": "web", "image": "busybox",
           "command": ["busybox", "httpd", "-f", "-p", "8080"]}]}}}}' \
	127.0.0.1:6443 kplane.v1.Resources/Create
grpc_ok "List app=hello" '"name": "hello"' "${grpc_tls[@]}" -d '{"kind": "Pod", "namespace": "default", "labelSelector": "app=hello"}' \
	127.0.0.1:6443 kplane.v1.Resources/List
watch="$(mktemp)"
timeout 60 grpcurl "${grpc_tls[@]}" -d '{"kind": "Pod", "namespace": "default", "allowBookmarks": true}' \
	127.0.0.1:6443 kplane.v1.Resources/Watch >"$watch" 2>&1 &
watcher=$!
wait_for "grpcurl Watch shows hello ADDED" 30 grep -q ADDED "$watch"
grpc_ok "Delete pod hello" '"name": "hello"' "${grpc_tls[@]}" -d '{"kind": "Pod", "namespace": "default", "name": "hello"}' \
	127.0.0.1:6443 kplane.v1.Resources/Delete
wait_for "grpcurl Watch shows hello DELETED" 60 grep -q DELETED "$watch"
kill "$watcher" 2>/dev/null || true
wait "$watcher" || true
rm -f "$watch"
echo "+ grpcurl Create a ReplicaSet with replicas -1"
if out="$(grpcurl -max-time 30 "${grpc_tls[@]}" -d '{"object": {"replicaSet": {"metadata": {"name": "Bad", "namespace": "default"},
  "spec": {"replicas": -1}}}}' 127.0.0.1:6443 kplane.v1.Resources/Create 2>&1)"; then
	fail "an invalid ReplicaSet was created:"$'\n'"$out"
fi
grep -q InvalidArgument <<<"$out" && grep -q "spec.replicas" <<<"$out" ||
	fail "the invalid ReplicaSet's error names no InvalidArgument and field path:"$'\n'"$out"
echo "$out"

# --- the compose commands, in deploy/compose ---
cd deploy/compose
run "${compose[@]}" ps
# logs -f follows until stopped: stopped once it has shown JSON log lines.
follow="$(mktemp)"
timeout 60 "${compose[@]}" logs -f replicactl >"$follow" 2>&1 </dev/null &
follower=$!
wait_for "${compose[*]} logs -f replicactl shows JSON logs" 30 grep -q '"@message"' "$follow"
kill "$follower" 2>/dev/null || true
wait "$follower" || true
rm -f "$follow"
run "${compose[@]}" up -d --scale replicactl=3
wait_for "three replicactl containers running" 60 replicactl_running 3
holder="$(lease_holder replicactl)"
echo "replicactl leader: $holder"
run docker kill "$(../../bin/kpctl get lease replicactl -n kplane-system --no-headers | awk '{print $2}' | cut -d_ -f1)"
standby_holds() {
	local h
	h="$(lease_holder replicactl)"
	[ -n "$h" ] && [ "$h" != "$holder" ] && docker ps -q --no-trunc | grep -q "^${h%%_*}"
}
# The README promises 15s (the lease duration); the margin is for a loaded machine.
wait_for "a standby holds the replicactl lease" 45 standby_holds
run ../../bin/kpctl get leases -n kplane-system
run "${compose[@]}" up -d
wait_for "replicactl back to its two replicas" 60 replicactl_running 2
run "${compose[@]}" kill nodeagent-2
[ "$(running nodeagent-2)" -eq 0 ] || fail "nodeagent-2 still runs after kill"
run "${compose[@]}" start nodeagent-2
nodeagent2_running() { [ "$(running nodeagent-2)" -eq 1 ]; }
wait_for "nodeagent-2 running again" 60 nodeagent2_running
cd "$root"
wait_for "three nodes Ready" 60 nodes_ready
echo "smoke: passed in $((SECONDS - started))s"
