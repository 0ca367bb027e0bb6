#!/usr/bin/env bash
# Provision SGLang's serving-benchmark client (python -m sglang.benchmark.serving and
# steady_state_serving) that tests/peers/test_peer_sglang.py runs against serve-sim, in its own venv,
# pinned (tests/support/versions.env: SGLANG_BENCH_VERSION) and cached by version.
#
# The full `pip install sglang` brings its engine: CUDA builds of torch, FlashInfer, kernels (gigabytes)
# that a CPU machine cannot use. The client needs none of them, so SGLang goes in without its dependencies
# and the client's own imports are added, pinned where SGLang pins them (transformers, tokenizers);
# tests/support/sglang_bench_entry.py then runs the client without the engine's package initializers.
# Results: $PLATEAU_CACHE/peers/sglang-bench-<version>/venv with a .plateau-ready stamp written last
# (~1.5 min and ~0.8 GB fresh). Its log: $PLATEAU_CACHE/logs/peer-sglang-bench.log.
set -euo pipefail
source "$(dirname "$0")/provision_common.sh"

version="$SGLANG_BENCH_VERSION"
venv="$PLATEAU_CACHE/peers/sglang-bench-$version/venv"
logfile="$PLATEAU_LOG_DIR/peer-sglang-bench.log"
entry="$TESTING_DIR/sglang_bench_entry.py"
# What sglang.benchmark.serving and its datasets import (aiohttp ... pyzmq), at SGLang 0.5.23's pins.
client_deps=(aiohttp msgspec numpy orjson requests tqdm "transformers==5.19.0" "tokenizers==0.23.2" pybase64 pillow
             psutil pyzmq datasets)

install() {
  if [ -f "$venv/.plateau-ready" ]; then
    log "sglang-bench $version already installed: $venv"
    return 0
  fi
  rm -rf "$venv"   # a venv without the stamp is a half-finished install
  mkdir -p "$(dirname "$venv")"
  log "installing SGLang $version's benchmark client with $(command -v python3)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --progress-bar off --upgrade pip
  "$venv/bin/pip" install --quiet --progress-bar off --no-deps "sglang==$version"
  "$venv/bin/pip" install --quiet --progress-bar off "${client_deps[@]}"
  log "checking the client starts"
  "$venv/bin/python" "$entry" sglang.benchmark.serving --help >/dev/null
  "$venv/bin/python" "$entry" sglang.benchmark.steady_state_serving --help >/dev/null
  touch "$venv/.plateau-ready"
  log "sglang-bench ready: $venv ($(du -sh "$venv" | cut -f1))"
}

install >"$logfile" 2>&1
