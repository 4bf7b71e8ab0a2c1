#!/usr/bin/env bash
# Make sure a Docker engine answers. Idempotent: does nothing when `docker info` already works.
# On a machine with only the client (CI, a fresh dev box) it installs Debian's docker.io and
# starts dockerd in the background. Prints the pid of a dockerd it started to
# ${SELFBENCH_DOCKERD_PIDFILE:-/tmp/selfbench-dockerd.pid} so the caller can stop exactly that one.
set -euo pipefail

pidfile=${SELFBENCH_DOCKERD_PIDFILE:-/tmp/selfbench-dockerd.pid}
logfile=${SELFBENCH_DOCKERD_LOG:-/tmp/selfbench-dockerd.log}
wait_seconds=${SELFBENCH_DOCKERD_WAIT:-60}

if docker info >/dev/null 2>&1; then
  echo "start-docker: engine already answers" >&2
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "start-docker: no Docker engine and not root; install docker.io (or Docker Engine) and start it" >&2
    exit 3
  fi
  echo "start-docker: installing Debian's docker.io" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # docker.io pulls in containerd and runc; the engine's own CLI may replace the client, which is fine.
  apt-get install -y -qq --no-install-recommends docker.io iptables >&2
fi

echo "start-docker: starting dockerd (log: $logfile)" >&2
nohup dockerd --storage-driver=overlay2 >"$logfile" 2>&1 &
echo $! >"$pidfile"

for _ in $(seq 1 "$wait_seconds"); do
  if docker info >/dev/null 2>&1; then
    echo "start-docker: engine up (pid $(cat "$pidfile"))" >&2
    exit 0
  fi
  if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "start-docker: dockerd exited; last lines of $logfile:" >&2
    tail -n 20 "$logfile" >&2
    exit 3
  fi
  sleep 1
done
echo "start-docker: dockerd did not answer within ${wait_seconds}s; see $logfile" >&2
exit 3
