#!/usr/bin/env bash
# Build a local Debian base image when no container registry is reachable.
# debootstrap (minbase, bookworm) from Debian's own mirror, then `docker import`.
# Idempotent: an existing tag is kept unless --force is given.
# Usage: scripts/make-base-image.sh [--force] [TAG]   (default tag: selfbench/debian-base:bookworm)
set -euo pipefail

force=0
if [ "${1:-}" = "--force" ]; then force=1; shift; fi
tag=${1:-${SELFBENCH_LOCAL_BASE_IMAGE:-selfbench/debian-base:bookworm}}
suite=${SELFBENCH_DEBIAN_SUITE:-bookworm}
# Bumped whenever the recipe changes, so an image made by an older recipe is made again.
# 2: the root directory is 0755 (version 1 kept mktemp's 0700, which overlay2 hides but the
#    btrfs driver keeps, locking every non-root user out of /).
recipe=2

if [ "$force" = 0 ] \
  && [ "$(docker image inspect --format '{{ index .Config.Labels "org.selfbench.base-recipe" }}' "$tag" 2>/dev/null)" = "$recipe" ]; then
  echo "make-base-image: $tag already present" >&2
  echo "$tag"
  exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "make-base-image: debootstrap is not installed and this is not root" >&2
    exit 3
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
fi

root=$(mktemp -d /tmp/selfbench-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "make-base-image: debootstrap --variant=minbase $suite (about a minute)" >&2
debootstrap --variant=minbase "$suite" "$root" >"$root.log" 2>&1 || {
  echo "make-base-image: debootstrap failed; last lines of $root.log:" >&2
  tail -n 20 "$root.log" >&2
  exit 3
}
rm -f "$root.log"
# Keep the image small and free of host-specific state.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
# The archive's "./" entry becomes the image's /: mktemp made it 0700.
chmod 0755 "$root"
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' \
  --change 'LABEL org.selfbench.base=debootstrap' \
  --change "LABEL org.selfbench.base-recipe=$recipe" \
  - "$tag" >/dev/null
echo "make-base-image: tagged $tag" >&2
echo "$tag"
