#!/usr/bin/env bash
# The task's setupCommand, run as root from /app during the image build.
set -euo pipefail
./configure
