#!/usr/bin/env bash
# Provision the peer benchmark tools that tests/peers/ runs against serve-sim, each in its own venv,
# pinned (tests/support/versions.env) and cached by version: AIPerf, GuideLLM, inference-perf and SGLang's
# benchmark client (provision_sglang_bench.sh). vLLM's own `vllm bench serve` comes with the vLLM venv of
# provision_vllm.sh.
#
# GuideLLM needs torch: it gets the CPU build 2.13.0 that this machine image carries on disk, installed
# before GuideLLM so pip does not fetch a CUDA build. inference-perf 0.7 needs Python 3.12.
# Results: $PLATEAU_CACHE/peers/<tool>-<version>/venv, each with a .plateau-ready stamp written last.
# The three installs run in parallel (network- and disk-bound); a failure of one leaves the others.
set -euo pipefail
source "$(dirname "$0")/provision_common.sh"

python_for() {   # the machine's own python3 when it is new enough, else the oldest newer one (the torch on
                 # disk is built for the machine's own)
  local want="$1" candidate
  # pyenv's shims answer only for the selected version, so its interpreters are asked directly too.
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  for candidate in python3 python3.12 python3.13 "$pyenv_root"/versions/3.1[2-9]*/bin/python3; do
    command -v "$candidate" >/dev/null 2>&1 || continue
    "$candidate" -c "import sys; sys.exit(sys.version_info < tuple(map(int, '$want'.split('.'))))" 2>/dev/null \
      && { echo "$candidate"; return 0; }
  done
  echo "no Python >= $want on this machine" >&2
  return 1
}

install_peer() {   # name version min-python pip-args...
  local name="$1" version="$2" want="$3"
  shift 3
  local venv="$PLATEAU_CACHE/peers/$name-$version/venv"
  if [ -f "$venv/.plateau-ready" ]; then
    log "$name $version already installed: $venv"
    return 0
  fi
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  local python
  python="$(python_for "$want")"
  log "installing $name $version with $python"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --progress-bar off --upgrade pip
  "$venv/bin/pip" install --quiet --progress-bar off "$@"
  touch "$venv/.plateau-ready"
  log "$name ready: $venv"
}

declare -A pids
install_peer aiperf "$AIPERF_VERSION" 3.11 "aiperf==$AIPERF_VERSION" >"$PLATEAU_LOG_DIR/peer-aiperf.log" 2>&1 &
pids[aiperf]=$!
install_peer guidellm "$GUIDELLM_VERSION" 3.11 "torch==2.13.0" "guidellm==$GUIDELLM_VERSION" \
  >"$PLATEAU_LOG_DIR/peer-guidellm.log" 2>&1 &
pids[guidellm]=$!
install_peer inference-perf "$INFERENCE_PERF_VERSION" 3.12 "inference-perf==$INFERENCE_PERF_VERSION" \
  >"$PLATEAU_LOG_DIR/peer-inference-perf.log" 2>&1 &
pids[inference-perf]=$!
bash "$(dirname "$0")/provision_sglang_bench.sh" &
pids[sglang-bench]=$!

failed=0
for name in "${!pids[@]}"; do
  if wait "${pids[$name]}"; then
    log "$name ok"
  else
    failed=1
    log "$name FAILED; last lines of $PLATEAU_LOG_DIR/peer-$name.log:"
    tail -n 20 "$PLATEAU_LOG_DIR/peer-$name.log" | sed 's/^/    /'
  fi
done
exit "$failed"
