#!/usr/bin/env bash
# Make sure an OpenSSH server binary is installed (for the ssh engine tests, which start their
# own sshd on a loopback port with their own config and keys; nothing here starts a service).
# Idempotent; installs Debian's openssh-server when /usr/sbin/sshd is missing.
set -euo pipefail
[ -x /usr/sbin/sshd ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "need-sshd: installing openssh-server needs root" >&2
  exit 3
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d keeps the package from starting the system's own sshd.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends openssh-server >&2
