#!/usr/bin/env bash
# Runs the control plane as local processes until Ctrl-C: the apiserver
# (embedded etcd in ./data) and every controller binary built so far.
# Logs go to ./data/logs/<service>.log; Ctrl-C stops them all.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data/logs
pids=()
stop() {
	trap - INT TERM EXIT
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait
}
trap stop INT TERM EXIT

bin/apiserver --data-dir ./data --listen 127.0.0.1:6443 --health-addr 127.0.0.1:6444 >>data/logs/apiserver.log 2>&1 &
pids+=($!)
# Wait until the apiserver answers before starting its clients.
for _ in $(seq 1 100); do
	if curl -sf http://127.0.0.1:6444/readyz >/dev/null 2>&1; then break; fi
	sleep 0.1
done
echo "apiserver on 127.0.0.1:6443 (logs: data/logs/apiserver.log)"

port=10260
for svc in gcctl; do
	if [ -x "bin/$svc" ]; then
		"bin/$svc" --apiserver 127.0.0.1:6443 --health-addr "127.0.0.1:$port" >>"data/logs/$svc.log" 2>&1 &
		pids+=($!)
		echo "$svc (health 127.0.0.1:$port, logs: data/logs/$svc.log)"
		port=$((port + 1))
	fi
done
echo "Ctrl-C stops everything."
wait -n "${pids[@]}" || true
