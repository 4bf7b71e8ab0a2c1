#!/bin/bash
# Oracle: apply the reference implementation.
set -euo pipefail
git -C /app apply --binary --whitespace=nowarn /solution/gold.patch
