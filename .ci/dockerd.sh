#!/usr/bin/env bash
# SEAL's private Docker daemon for tests and development (no registry, no network bridge).
#   bash .ci/dockerd.sh start   # starts it unless it already answers; prints the DOCKER_HOST value
#   bash .ci/dockerd.sh stop    # stops it by its pid file and waits until it has exited
#   bash .ci/dockerd.sh status  # exit 0 when it answers
# Everything lives under SEAL_DOCKER_DIR (default /tmp/seal-docker); the socket path is fixed so that every
# session can use DOCKER_HOST=unix:///tmp/seal-docker/docker.sock. The exec root is kept short because
# unix socket paths are limited to 108 bytes.
set -euo pipefail
dir="${SEAL_DOCKER_DIR:-/tmp/seal-docker}"
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"
log="$dir/dockerd.log"
host="unix://$sock"

ping() {
  if command -v curl >/dev/null; then curl -fsS --max-time 2 --unix-socket "$sock" http://localhost/_ping >/dev/null 2>&1
  else timeout 2 docker -H "$host" version >/dev/null 2>&1; fi
}

start() {
  if ping; then echo "$host"; return 0; fi
  [ "$(id -u)" = 0 ] || { echo "dockerd.sh: starting dockerd needs root" >&2; exit 1; }
  command -v dockerd >/dev/null || { echo "dockerd.sh: dockerd not found; apt-get install -y --no-install-recommends docker.io" >&2; exit 1; }
  mkdir -p "$dir/data" "$dir/x"
  rm -f "$sock"
  nohup dockerd --host "$host" --data-root "$dir/data" --exec-root "$dir/x" --pidfile "$pidfile" \
    --storage-driver=overlay2 --iptables=false --ip-masq=false --bridge=none >"$log" 2>&1 </dev/null &
  for _ in $(seq 1 300); do
    if ping; then echo "$host"; return 0; fi
    sleep 0.1
  done
  echo "dockerd.sh: dockerd did not answer on $sock within 30 s; last log lines:" >&2
  tail -n 20 "$log" >&2
  exit 1
}

stop() {
  [ -f "$pidfile" ] || { echo "dockerd.sh: no pid file $pidfile; not running" >&2; return 0; }
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) ping ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
