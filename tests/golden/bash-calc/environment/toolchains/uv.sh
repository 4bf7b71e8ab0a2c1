#!/usr/bin/env bash
# uv 0.13.9 into /usr/local/bin. Generated from dockerfiles/toolchains.toml.
set -euo pipefail
. /opt/selfbench-toolchains/lib.sh
arch=$(selfbench_arch)
work=$(mktemp -d)
case "${SELFBENCH_UV_SOURCE:-upstream}" in
  registry)
    case "$arch" in
      amd64) file='uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl'; sha256='d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19' ;;
      arm64) file='uv-0.13.9-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64.whl'; sha256='5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe' ;;
    esac
    wheel=$(selfbench_registry_artifact uv "$file" "$sha256")
    unzip -q "$wheel" -d "$work"
    install -m 0755 "$work"/uv-0.13.9.data/scripts/uv /usr/local/bin/uv
    if [ -f "$work"/uv-0.13.9.data/scripts/uvx ]; then
      install -m 0755 "$work"/uv-0.13.9.data/scripts/uvx /usr/local/bin/uvx
    fi
    ;;
  upstream)
    case "$arch" in
      amd64) triple='x86_64-unknown-linux-gnu' ;;
      arm64) triple='aarch64-unknown-linux-gnu' ;;
    esac
    url="${SELFBENCH_UV_MIRROR:-https://github.com/astral-sh/uv/releases/download}/0.13.9/uv-${triple}.tar.gz"
    selfbench_download "$url" "$work/uv.tar.gz"
    selfbench_check uv "$url" "$work/uv.tar.gz" "$(selfbench_sidecar_sha256 "$url")"
    tar -xzf "$work/uv.tar.gz" -C "$work"
    install -m 0755 "$work/uv-$triple/uv" "$work/uv-$triple/uvx" /usr/local/bin/
    ;;
  *) selfbench_fail "toolchain uv: unknown source ${SELFBENCH_UV_SOURCE}" ;;
esac
rm -rf "$work"
uv --version
