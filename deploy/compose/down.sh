#!/usr/bin/env bash
# Takes a compose project down, networks included.
#
# Usage: deploy/compose/down.sh PROJECT COMMAND...
#   COMMAND is the compose command line that takes project PROJECT down,
#   e.g. down.sh kplane docker-compose -p kplane down --remove-orphans
#
# Docker can keep an endpoint on a network after the container behind it
# is gone ("error while removing network: ... has active endpoints"; seen
# once in CI after a stack whose containers had been killed and restarted).
# Every later down then fails the same way until the endpoint is
# disconnected by force. So when COMMAND fails and the project still has a
# network, this prints what is attached to it, disconnects it with
# `docker network disconnect -f` and runs COMMAND once more; its status is
# the script's. A stale endpoint may also be missing from the network's
# list (seen in CI: "has active endpoints" with none listed); Docker then
# still disconnects it by its container's name, so the names of the
# project's containers are taken before COMMAND removes them and tried.
set -uo pipefail
if [ $# -lt 2 ]; then
	echo "usage: $0 PROJECT COMMAND..." >&2
	exit 2
fi
project=$1
shift
containers=$(docker ps -a --filter "label=com.docker.compose.project=$project" --format '{{.Names}}' 2>/dev/null)
"$@" && exit 0
rc=$?
nets=$(docker network ls -q --filter "label=com.docker.compose.project=$project")
if [ -z "$nets" ]; then
	exit "$rc"
fi
for net in $nets; do
	name=$(docker network inspect -f '{{.Name}}' "$net")
	endpoints=$(docker network inspect -f '{{range .Containers}}{{.Name}} {{end}}' "$net")
	if [ -z "$endpoints" ]; then
		echo "down.sh: network $name of $project has no endpoint Docker lists; disconnecting the project's containers by name:" >&2
		docker network inspect "$net" >&2
		endpoints=$containers
	fi
	for ep in $endpoints; do
		echo "down.sh: disconnecting $ep from network $name of $project" >&2
		docker network disconnect -f "$net" "$ep" 2>/dev/null || true
	done
done
"$@"
