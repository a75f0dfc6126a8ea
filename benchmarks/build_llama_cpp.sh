#!/usr/bin/env bash
# Build llama.cpp's own llama-speculative-simple, llama-server and rpc-server (ggml-rpc-server) from the
# llama-cpp-python 0.3.36 sdist's vendored sources, for benchmarks/compare.py,
# benchmarks/serve_bench.py and tests/test_devices.py (specllama on llama.cpp's own rpc-server).
# Nothing of llama.cpp is committed here: the sdist comes from PyPI into a cache directory and is
# built there.
#   usage: benchmarks/build_llama_cpp.sh [CACHE_DIR]     (prints the bin directory)
#   SPECLLAMA_LLAMA_CPP_TARGETS="ggml-rpc-server" builds only those programs (default: all three)
set -euo pipefail
VERSION=0.3.36
CACHE="${1:-${SPECLLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specllama}/llama.cpp-$VERSION}"
BIN="$CACHE/build/bin"
read -r -a TARGETS <<< "${SPECLLAMA_LLAMA_CPP_TARGETS:-llama-speculative-simple llama-server ggml-rpc-server}"
missing=0
for t in "${TARGETS[@]}"; do
  [ -x "$BIN/$t" ] || missing=1
done
if [ "$missing" = 0 ]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$CACHE"
if [ ! -d "$CACHE/src" ]; then
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$CACHE/sdist" \
    "llama-cpp-python==$VERSION" >&2
  mkdir -p "$CACHE/src"
  tar -xzf "$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE/src" --strip-components=3 \
    "llama_cpp_python-$VERSION/vendor/llama.cpp"
fi
cmake -S "$CACHE/src" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF \
  -DGGML_RPC=ON >&2
cmake --build "$CACHE/build" --target "${TARGETS[@]}" -j "$(nproc)" >&2
echo "$BIN"
