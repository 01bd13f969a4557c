#!/usr/bin/env bash
# Run a command with a Docker daemon: the one DOCKER_HOST (or the default socket) answers, or SEAL's
# private daemon (.ci/dockerd.sh) if it runs already; otherwise start the private one, run the command,
# and stop the daemon again.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
if docker info >/dev/null 2>&1; then
  exec "$@"
fi
if bash "$here/.ci/dockerd.sh" status >/dev/null 2>&1; then
  DOCKER_HOST="$(bash "$here/.ci/dockerd.sh" start)" exec "$@"
fi
DOCKER_HOST="$(bash "$here/.ci/dockerd.sh" start)" || { echo "could not start dockerd" >&2; exit 1; }
export DOCKER_HOST
trap 'bash "$here/.ci/dockerd.sh" stop' EXIT
"$@"
