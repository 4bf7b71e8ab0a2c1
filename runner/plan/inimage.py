"""Paths and commands inside the task's images (pure): where the runner's scripts, the
verifier's helper and its logs are, the build steps that run the task's code, and the shell the
hack gate and the cache hand-off run as root."""

from __future__ import annotations

from runner.model.harbor import AGENT_PATCH, BASE_GIT

# Instructions (substrings) whose failure is the task's fault: its setup command and the
# dependency-setup pass. Any other failing step is infrastructure (a download, the engine).
TASK_BUILD_STEPS = (
    "/opt/selfbench-environment/setup.sh",
    "/opt/selfbench-environment/root-setup.sh",
    "selfbench-dependency-setup.patch",
)


# Build steps that run the task's code, so the task's limits hold in them (runner.plan.dockerfile):
# the task's own steps and the verifier's image preparation, which runs the interpreters setup
# installed.
LIMITED_BUILD_STEPS = (*TASK_BUILD_STEPS, "verifier.pl prepare-image")


SETUP_SCRIPT = "/opt/selfbench-environment/setup.sh"


SMOKE_SCRIPT = "/opt/selfbench-environment/smoke.sh"


VERIFIER_LOGS = "/logs/verifier"


SOLUTION_DIR = "/solution"
SOLVE_ARGV = ("bash", f"{SOLUTION_DIR}/solve.sh")  # the oracle's agent side
VERIFIER_TEST_ARGV = ("/tests/test.sh",)  # Harbor's entry point of the verifier
# A gate's container only waits (`sleep N`): every step is an exec into it.
KEEP_ALIVE = "sleep"


# Back to the post-setup snapshot between two exploits (ignored files stay: the collect step
# never sees them either).
_GIT = f"git --git-dir={BASE_GIT} --work-tree=/app"


HACK_RESET_COMMAND = (
    "list=$(mktemp) && "
    f'{_GIT} diff --cached --name-only -z HEAD > "$list" && '
    f"{_GIT} reset -q --hard HEAD && {_GIT} clean -fdq && "
    # reset rewrites files as root: hand them back to the repository's owner (the agent).
    '{ xargs -0r -a "$list" chown -h --reference=/app -- 2>/dev/null; true; } && '
    f'rm -f "$list" {AGENT_PATCH}'
)


# The hack gate's agent side in one exec (HackPlan.driver), as root: each exploit's script (put
# in HACK_IN as `<name>.sh` beforehand) runs as the agent user (setpriv: util-linux, which the
# toolchain layer installs), in /app, with HOME=/home/agent, under its own deadline; then, as
# root, its patch is collected into the stash (when the script ended 0) and the tree is reset to
# the post-setup snapshot before the next. One exec where there were three per exploit (the
# script, collect, reset): an exec costs the engine about 47 ms of CPU (measured on 20.10: 66
# execs of `true`, 3.1 s of CPU), taken from the gates that decide the verdict. What it leaves
# in HACK_OUT: `logs/<name>.log`, `patches/<name>.patch` and `status.tsv`, one line per exploit:
# name, the script's exit code, 1 when it hit its deadline, its milliseconds, the collect
# command's status. Arguments: the collect command, the deadline in seconds, the exploits'
# names in order. Exits DRIVER_RESET_FAILED when a reset failed (the last line names the
# exploit), DRIVER_BROKEN when it could not start.
HACK_IN = "/opt/selfbench/hack-in"
HACK_OUT = "/opt/selfbench/hack-out"
DRIVER_RESET_FAILED = 97
DRIVER_BROKEN = 96
HACK_DRIVER_SCRIPT = f"""set -u
command=$1 limit=$2
shift 2
rm -rf {HACK_OUT} && mkdir -p {HACK_OUT}/logs {HACK_OUT}/patches || exit {DRIVER_BROKEN}
: > {HACK_OUT}/status.tsv || exit {DRIVER_BROKEN}
index=0
for name in "$@"; do
  index=$((index + 1))
  echo "selfbench: exploit $index of $#: $name"
  script=$(cat "{HACK_IN}/$name.sh") || exit {DRIVER_BROKEN}
  started=$(date +%s%N)
  ( cd /app && HOME=/home/agent USER=agent LOGNAME=agent exec timeout -k 5 "$limit" \
      setpriv --reuid=agent --regid=agent --init-groups bash -c "$script" ) \
    < /dev/null > "{HACK_OUT}/logs/$name.log" 2>&1
  code=$?
  ms=$(( ($(date +%s%N) - started) / 1000000 ))
  timed=0
  if {{ [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; }} && [ "$ms" -ge $(( limit * 1000 )) ]; then
    timed=1
  fi
  collected=-1
  if [ "$code" -eq 0 ]; then
    bash -c "$command" > "{HACK_OUT}/logs/$name.collect.log" 2>&1
    collected=$?
    if [ "$collected" -eq 0 ]; then
      if [ -e {AGENT_PATCH} ]; then
        mv -f {AGENT_PATCH} "{HACK_OUT}/patches/$name.patch" || collected=1
      else
        : > "{HACK_OUT}/patches/$name.patch" || collected=1
      fi
    fi
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$code" "$timed" "$ms" "$collected" \
    >> {HACK_OUT}/status.tsv
  if ! ( {HACK_RESET_COMMAND} ); then
    echo "selfbench: resetting the tree after $name failed"
    exit {DRIVER_RESET_FAILED}
  fi
done
"""


# The build caches a trusted run hands forward: what its verifier wrote under the toolchains'
# cache directories (the catalog's `caches`) during its tests, packed as root into one tar.
# Arguments: the largest tar handed (bytes), the tar, the marker (put in before the start, so
# what is newer was written by the run) and the directories. Only regular files and
# directories are taken (no links, no devices), each with its owner, mode and times.
HAND_OFF_ARCHIVE = "/opt/selfbench/handed-caches.tar"
HAND_OFF_MAX_BYTES = 512 * 1024 * 1024
HAND_OFF_TIMEOUT_SECONDS = 120.0
HAND_OFF_SCRIPT = r"""set -u
max=$1 archive=$2 marker=$3
shift 3
cd / || exit 1
roots=()
for path in "$@"; do
  if [ -d "$path" ] && [ ! -L "$path" ]; then roots+=("${path#/}"); fi
done
if [ "${#roots[@]}" -eq 0 ]; then echo "no cache directory"; exit 0; fi
find "${roots[@]}" -xdev -newer "$marker" \( -type f -o -type d \) -print0 |
  tar --null --no-recursion --files-from=- -cf "$archive" || exit 1
size=$(stat -c %s "$archive")
if [ "$size" -gt "$max" ]; then rm -f "$archive"; echo "too large: $size bytes"; exit 3; fi
echo "$(tar -tf "$archive" | wc -l) entries, $size bytes"
"""


# Where the hack gate's policy check finds the exploits' patches (<name>.patch) and writes what
# the policy would keep of each, in a verifier container of their own.
HACK_POLICY_DIR = "/opt/selfbench/exploits"
HACK_POLICY_RESULT = f"{HACK_POLICY_DIR}/policy-check.json"
# The verifier image's trusted helper (dockerfiles/verifier/verifier.pl) and the task facts it
# reads (tests/selfbench-task.json), where test.sh finds them.
VERIFIER_HELPER = ("/usr/bin/perl", "/opt/selfbench-verifier/verifier.pl")
VERIFIER_TASK_FACTS = "/tests/selfbench-task.json"
