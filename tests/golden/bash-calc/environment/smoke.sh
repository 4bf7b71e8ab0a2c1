#!/usr/bin/env bash
# Smoke check: each selected toolchain answers its pinned version and /app is a git work tree.
set -euo pipefail
check() {
  echo "+ $1"
  bash -c "$1" || { echo "smoke: failed: $1" >&2; exit 1; }
}
check 'uv --version'
check 'uv --version | grep -qF '\''uv 0.13.9'\'''
check 'test "$(git -C /app rev-parse --is-inside-work-tree)" = true'

