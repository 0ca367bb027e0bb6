#!/usr/bin/env bash
# Provision the real servers and peer tools for the integration tests:
# scripts/provision.sh [vllm] [llamacpp] [peers] (all three when none is named).
#
# The provisionings run in parallel (vLLM's install is network- and disk-bound, llama.cpp's build is
# CPU-bound), each logging to $PLATEAU_CACHE/logs/provision-<name>.log and leaving its outcome in
# $PLATEAU_CACHE/status/<name> ("ok", or "failed (exit N)"). The test fixtures read those, so a server
# that failed to provision makes its tests fail with the log's tail instead of vanishing from the run.
# Exit status: 0 when every named server is provisioned, 1 otherwise.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/provision_common.sh"
status_dir="$PLATEAU_CACHE/status"
mkdir -p "$status_dir"

names=("$@")
[ "${#names[@]}" -eq 0 ] && names=(vllm llamacpp peers)
export PLATEAU_APT_STAMP="$PLATEAU_CACHE/.apt-updated.$$"

declare -A pids started
for name in "${names[@]}"; do
  case "$name" in
    vllm | llamacpp | peers) ;;
    *) echo "unknown name '$name' (expected vllm, llamacpp or peers)" >&2; exit 2 ;;
  esac
  logfile="$PLATEAU_LOG_DIR/provision-$name.log"
  echo "running" >"$status_dir/$name"
  # nice: the CI machine has two cores and a build must not starve whatever else runs there.
  nice -n 10 bash "$here/provision_$name.sh" >"$logfile" 2>&1 &
  pids[$name]=$!
  started[$name]=$(date +%s)
  log "provisioning $name (log: $logfile)"
done

failed=0
for name in "${names[@]}"; do
  wait "${pids[$name]}"
  rc=$?
  took=$(($(date +%s) - ${started[$name]}))
  if [ "$rc" -eq 0 ]; then
    echo "ok" >"$status_dir/$name"
    log "$name provisioned in ${took}s"
  else
    echo "failed (exit $rc)" >"$status_dir/$name"
    failed=1
    log "$name FAILED after ${took}s (exit $rc); last lines of $PLATEAU_LOG_DIR/provision-$name.log:"
    tail -n 30 "$PLATEAU_LOG_DIR/provision-$name.log" | sed 's/^/    /'
  fi
done
rm -f "$PLATEAU_APT_STAMP"
exit "$failed"
