# Shared helpers for the toolchain layers (sourced, not run). Written for bash.
# Every artifact is checked before use; a mismatch names the toolchain, the URL and both digests.

selfbench_arch() {
  case "$(uname -m)" in
    x86_64|amd64) echo amd64 ;;
    aarch64|arm64) echo arm64 ;;
    *) echo "selfbench: unsupported architecture $(uname -m)" >&2; return 1 ;;
  esac
}

selfbench_fail() {
  echo "selfbench: $*" >&2
  exit 1
}

# selfbench_download URL DEST
selfbench_download() {
  curl --fail --silent --show-error --location --retry 5 --retry-delay 2 --retry-connrefused \
    --connect-timeout 30 --output "$2" "$1" \
    || selfbench_fail "download failed: $1 (use --toolchain-source or --toolchain-mirror where this host is unreachable)"
}

# selfbench_check TOOLCHAIN URL FILE EXPECTED_SHA256
selfbench_check() {
  local actual
  actual=$(sha256sum "$3" | cut -d' ' -f1)
  if [ "$actual" != "$4" ]; then
    selfbench_fail "toolchain $1: sha256 mismatch for $2: expected $4, got $actual"
  fi
}

# selfbench_sidecar_sha256 URL -> the digest in URL.sha256 (first field)
selfbench_sidecar_sha256() {
  local out
  out=$(mktemp)
  selfbench_download "$1.sha256" "$out"
  cut -d' ' -f1 <"$out" | tr -d '\r\n'
  rm -f "$out"
}

# selfbench_registry_artifact TOOLCHAIN FILE SHA256 -> path of the checked artifact
selfbench_registry_artifact() {
  local path="/opt/selfbench-artifacts/$1/$2"
  [ -f "$path" ] || selfbench_fail "toolchain $1: registry artifact $2 was not provided to this build (selfbench-runner passes it with --toolchain-source $1=registry)"
  selfbench_check "$1" "registry:$2" "$path" "$3"
  echo "$path"
}
