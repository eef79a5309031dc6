#!/usr/bin/env bash
# Builds one FROM-scratch image per kplane service from the static
# binaries in bin/ (run `make build` first; KPLANE_BIN=dir to use another
# directory): kplane/<service>:${KPLANE_TAG:-dev}.
# Nothing is pulled. The node agent's image also gets a static busybox
# (Debian's busybox-static: apt-get install -y busybox-static), so example
# pods have sh, httpd, wget and sleep.
#
# Usage: deploy/compose/build-images.sh [service...]   (default: all)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tag="${KPLANE_TAG:-dev}"
bin="${KPLANE_BIN:-$root/bin}"
services=("$@")
if [ ${#services[@]} -eq 0 ]; then
	services=(apiserver scheduler replicactl nodectl ipamctl gcctl endpointsctl jobctl cronjobctl pvctl deploymentctl statefulsetctl daemonsetctl disruptionctl tokenctl kcm nodeagent proxy kpctl cloudsim cloudctl)
fi

ctx="$here/.context-$tag"
rm -rf "$ctx"
mkdir -p "$ctx/busybox/bin"
for b in healthcheck apiserver scheduler replicactl nodectl ipamctl gcctl endpointsctl jobctl cronjobctl pvctl deploymentctl statefulsetctl daemonsetctl disruptionctl tokenctl kcm nodeagent proxy kpctl cloudsim cloudctl; do
	if [ ! -x "$bin/$b" ]; then
		echo "build-images: $bin/$b is missing; run make build first" >&2
		exit 1
	fi
	# A hard link costs nothing; fall back to a copy across file systems.
	ln "$bin/$b" "$ctx/$b" 2>/dev/null || cp "$bin/$b" "$ctx/$b"
done

busybox="${BUSYBOX:-}"
if [ -z "$busybox" ]; then
	for c in /bin/busybox /usr/bin/busybox "$(command -v busybox || true)"; do
		if [ -n "$c" ] && [ -x "$c" ]; then busybox="$c"; break; fi
	done
fi
if [ -z "$busybox" ]; then
	echo "build-images: no busybox found; install Debian's busybox-static (apt-get install -y busybox-static) or set BUSYBOX=/path/to/static/busybox" >&2
	exit 1
fi
# A scratch image has no libc: only a statically linked busybox runs there.
if ldd "$busybox" >/dev/null 2>&1; then
	echo "build-images: $busybox is dynamically linked; install busybox-static (it replaces the busybox package) or set BUSYBOX" >&2
	exit 1
fi
cp "$busybox" "$ctx/busybox/bin/busybox"
for applet in $("$busybox" --list); do
	[ "$applet" = busybox ] || ln -s busybox "$ctx/busybox/bin/$applet"
done

# Without the buildx plugin the docker CLI needs the classic builder
# asked for explicitly.
if ! docker buildx version >/dev/null 2>&1; then
	export DOCKER_BUILDKIT=0
fi
for s in "${services[@]}"; do
	echo "build-images: kplane/$s:$tag"
	# The classic builder's deprecation notice is noise; show the output
	# only when the build fails.
	if ! out="$(docker build --quiet --target "$s" -t "kplane/$s:$tag" -f "$here/Dockerfile" "$ctx" 2>&1)"; then
		echo "$out" >&2
		exit 1
	fi
done
rm -rf "$ctx"
docker image ls --filter reference='kplane/*' --format '{{.Repository}}:{{.Tag}}\t{{.Size}}'
