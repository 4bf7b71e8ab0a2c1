#!/usr/bin/env bash
# Rebuild repo.bundle, the example's repository, reproducibly: fixed author, committer and
# dates, so the base commit is always the one definition.json names.
# Usage: examples/bash-calc/make-repo.sh [OUT.bundle]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/repo.bundle}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GIT_AUTHOR_NAME=example GIT_AUTHOR_EMAIL=example@localhost
export GIT_COMMITTER_NAME=example GIT_COMMITTER_EMAIL=example@localhost
export GIT_AUTHOR_DATE='2026-01-01T00:00:00Z' GIT_COMMITTER_DATE='2026-01-01T00:00:00Z'
git -c init.defaultBranch=main init -q "$work/repo"
cd "$work/repo"
mkdir -p tests
cat > calc.sh <<'SH'
#!/usr/bin/env bash
# calc.sh OP A B: integer arithmetic for the command line.
set -euo pipefail
. "$(dirname "$0")/config.env"
op=${1:?usage: calc.sh OP A B}
a=${2:?usage: calc.sh OP A B}
b=${3:?usage: calc.sh OP A B}
case "$op" in
  add) echo $((a + b)) ;;
  sub) echo $((a - b)) ;;
  *) echo "unknown operation: $op" >&2; exit 2 ;;
esac
SH
cat > configure <<'SH'
#!/usr/bin/env bash
# Writes config.env (not ignored by git: the runner must keep it out of the agent's patch).
set -euo pipefail
printf 'CALC_CONFIGURED=1\n' > config.env
SH
cat > tests/run.sh <<'SH'
#!/usr/bin/env bash
# tests/run.sh TEST...: runs each test script, reports, fails when any fails.
set -uo pipefail
passed=0 failed=0
for test in "$@"; do
  if bash "$test"; then passed=$((passed + 1)); echo "PASS $test"
  else failed=$((failed + 1)); echo "FAIL $test"; fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
SH
cat > tests/test_add.sh <<'SH'
set -eu
[ "$(bash calc.sh add 2 3)" = 5 ]
[ "$(bash calc.sh sub 2 3)" = -1 ]
SH
chmod +x calc.sh configure tests/run.sh
git add -A
git commit -qm "calc: add and sub"
git bundle create -q "$out" HEAD main
git rev-parse HEAD
