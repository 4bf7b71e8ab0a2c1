# node --test's hook in the verifier's `node` (hooks/node/bin/node sources it, with the command's
# arguments in `args`; it appends to `extra`): the verifier's reporter (reporter.mjs) beside the
# command's own.
testing=0 reporters=0 destinations=0
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --test) testing=1 ;;
    --test-reporter=*) reporters=$((reporters + 1)) ;;
    --test-reporter) reporters=$((reporters + 1)); i=$((i + 1)) ;;
    --test-reporter-destination=*) destinations=$((destinations + 1)) ;;
    --test-reporter-destination) destinations=$((destinations + 1)); i=$((i + 1)) ;;
    -*) ;;
    *) break ;;
  esac
done
# The outermost `node --test` of the verifier's run reports; one its tests start does not. Its
# reporter comes first, then the command's own (spec on stdout when it names none). Node pairs
# reporters and destinations in order and asks one destination each once there are several:
# the command's reporters without one write to stdout, as they would alone. Ours writes only
# evidence, to stderr: node 22.14 fails to flush a reporter destination of /dev/null (fsync:
# EINVAL), and every run then exits 1.
if [ "$testing" = 1 ] && [ -z "${SELFBENCH_EVIDENCE_OWNER:-}" ] \
  && { [ "$destinations" = 0 ] || [ "$destinations" = "$reporters" ]; }; then
  export SELFBENCH_EVIDENCE_OWNER="node-test:$$"
  extra+=("--test-reporter=$hooks/node-test/reporter.mjs" --test-reporter-destination=stderr)
  if [ "$reporters" = 0 ]; then
    extra+=(--test-reporter=spec --test-reporter-destination=stdout)
  elif [ "$destinations" = 0 ]; then
    for ((i = 0; i < reporters; i++)); do extra+=(--test-reporter-destination=stdout); done
  fi
fi
