#!/usr/bin/env bash
# The README's `make dev` for a few seconds: start it, wait until its
# apiserver answers and its three nodes are Ready, press Ctrl-C (SIGINT to
# its process group, as a terminal does) and check that everything stops
# cleanly. Run from the repository root, with nothing else on :6443.
set -euo pipefail
log="$(mktemp)"
started=$SECONDS

# make dev in its own process group, so that the SIGINT reaches make and
# kplane-dev together, as Ctrl-C in a terminal does.
setsid make dev >"$log" 2>&1 </dev/null &
dev=$!

fail() {
	echo "make dev: FAILED: $*" >&2
	echo "==== make dev output" >&2
	cat "$log" >&2
	for f in data/logs/*.log; do
		[ -f "$f" ] || continue
		echo "==== $f" >&2
		tail -n 40 "$f" >&2
	done
	kill -KILL -- "-$dev" 2>/dev/null || true
	exit 1
}

wait_for() {
	local what=$1 deadline=$((SECONDS + $2))
	shift 2
	until "$@" >/dev/null 2>&1; do
		kill -0 "$dev" 2>/dev/null || fail "make dev exited while waiting for: $what"
		((SECONDS < deadline)) || fail "$what: not within $((SECONDS - started))s"
		sleep 1 # polling interval
	done
	echo "ok: $what (at $((SECONDS - started))s)"
}

nodes_ready() { [ "$(bin/kpctl get nodes --no-headers | awk '$2 == "Ready"' | wc -l)" -eq 3 ]; }
# Building kplane-dev comes first: a cold build cache takes a while.
wait_for "make dev prints its process table" 300 grep -q "Ctrl-C stops everything" "$log"
# make dev runs with TLS and RBAC; it prints the admin's kubeconfig.
KUBECONFIG="$(sed -n 's/^ *export KUBECONFIG=//p' "$log")"
[ -n "$KUBECONFIG" ] || fail "make dev printed no KUBECONFIG"
export KUBECONFIG
wait_for "the apiserver answers" 30 bin/kpctl get namespaces
wait_for "three nodes Ready" 60 nodes_ready

kill -INT -- "-$dev"
deadline=$((SECONDS + 60))
while kill -0 "$dev" 2>/dev/null; do
	((SECONDS < deadline)) || fail "still running 60s after Ctrl-C"
	sleep 1 # polling interval
done
status=0
wait "$dev" || status=$?
cat "$log"
# make reports the interrupt as its own (130) after kplane-dev returned.
case $status in 0 | 130) ;; *) fail "exit status $status after Ctrl-C" ;; esac
grep -q '^stopped$' "$log" || fail "kplane-dev did not report a clean stop"
if grep -q "exited:" "$log"; then fail "a process died on its own"; fi
if bin/kpctl get namespaces >/dev/null 2>&1; then fail "the apiserver still answers after Ctrl-C"; fi
if left="$(pgrep -af "$PWD/bin/")"; then fail "processes left running after Ctrl-C:"$'\n'"$left"; fi
rm -f "$log"
echo "make dev: started, served and stopped cleanly in $((SECONDS - started))s"
