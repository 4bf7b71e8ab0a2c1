#!/usr/bin/env bash
# Make sure a Docker engine answers. Idempotent: does nothing when `docker info` already works.
# On a machine with only the client (CI, a fresh dev box) it installs Debian's docker.io and
# starts dockerd in the background. Prints the pid of a dockerd it started to
# ${SELFBENCH_DOCKERD_PIDFILE:-/tmp/selfbench-dockerd.pid} so the caller can stop exactly that one.
#
# Storage with per-container size limits (so `--storage-opt size` enforces a task's storage_mb):
#   SELFBENCH_DOCKER_STORAGE=btrfs  data root on a sparse loop file formatted btrfs with quotas
#                                   (Docker's btrfs driver limits each container by qgroup);
#   SELFBENCH_DOCKER_STORAGE=xfs    data root on XFS mounted with pquota (overlay2 quotas); needs
#                                   a kernel built with CONFIG_XFS_QUOTA;
#   unset or `default`              overlay2 on the host's filesystem (no quota: the runner's
#                                   storage watchdog holds storage_mb instead).
# SELFBENCH_DOCKER_STORAGE_SIZE (default 64G, sparse) and SELFBENCH_DOCKER_STORAGE_ROOT (default
# /var/lib/selfbench-docker) size and place it. The mount point is written to "$pidfile.mount"
# so the caller can unmount it after stopping the engine.
set -euo pipefail

pidfile=${SELFBENCH_DOCKERD_PIDFILE:-/tmp/selfbench-dockerd.pid}
logfile=${SELFBENCH_DOCKERD_LOG:-/tmp/selfbench-dockerd.log}
wait_seconds=${SELFBENCH_DOCKERD_WAIT:-60}
storage=${SELFBENCH_DOCKER_STORAGE:-default}
storage_size=${SELFBENCH_DOCKER_STORAGE_SIZE:-64G}
storage_root=${SELFBENCH_DOCKER_STORAGE_ROOT:-/var/lib/selfbench-docker}

say() { echo "start-docker: $*" >&2; }

if docker info >/dev/null 2>&1; then
  say "engine already answers"
  exit 0
fi

need_root() {
  if [ "$(id -u)" != 0 ]; then
    say "$1 needs root; install and start Docker yourself"
    exit 3
  fi
}

apt_install() {
  need_root "installing $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "$@" >&2
}

if ! command -v dockerd >/dev/null 2>&1; then
  say "installing Debian's docker.io"
  # docker.io pulls in containerd and runc; the engine's own CLI may replace the client.
  apt_install docker.io iptables
fi

# mount_storage FSTYPE MOUNT_OPTIONS: a sparse loop file at $storage_root.img on $storage_root.
mount_storage() {
  local fstype=$1 options=$2 image="$storage_root.img"
  need_root "a $fstype data root"
  mkdir -p "$storage_root"
  if ! mountpoint -q "$storage_root"; then
    if [ ! -f "$image" ]; then
      truncate -s "$storage_size" "$image"
      "mkfs.$fstype" -q -f "$image" >&2
    fi
    mount -o "loop,$options" "$image" "$storage_root" || {
      say "cannot mount a $fstype data root with '$options' (see dmesg; XFS quotas need a" \
        "kernel with CONFIG_XFS_QUOTA, btrfs works where the kernel has btrfs)"
      exit 3
    }
  fi
  echo "$storage_root" >"$pidfile.mount"
}

args=()
case "$storage" in
  default | "")
    args=(--storage-driver=overlay2)
    ;;
  btrfs)
    command -v mkfs.btrfs >/dev/null 2>&1 || apt_install btrfs-progs
    mount_storage btrfs defaults
    btrfs quota enable "$storage_root"
    args=(--data-root="$storage_root/data" --storage-driver=btrfs)
    ;;
  xfs)
    command -v mkfs.xfs >/dev/null 2>&1 || apt_install xfsprogs
    mount_storage xfs pquota
    args=(--data-root="$storage_root/data" --storage-driver=overlay2)
    ;;
  *)
    say "SELFBENCH_DOCKER_STORAGE must be default, btrfs or xfs (got '$storage')"
    exit 2
    ;;
esac

say "starting dockerd (storage: $storage; log: $logfile)"
nohup dockerd "${args[@]}" >"$logfile" 2>&1 &
echo $! >"$pidfile"

for _ in $(seq 1 "$wait_seconds"); do
  if docker info >/dev/null 2>&1; then
    say "engine up (pid $(cat "$pidfile"))"
    exit 0
  fi
  if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    say "dockerd exited; last lines of $logfile:"
    tail -n 20 "$logfile" >&2
    exit 3
  fi
  sleep 1
done
say "dockerd did not answer within ${wait_seconds}s; see $logfile"
exit 3
