#!/usr/bin/env bash
# Build llama.cpp's own llama-speculative-simple and llama-server from the llama-cpp-python 0.3.36
# sdist's vendored sources, for benchmarks/compare.py and benchmarks/serve_bench.py. Nothing of llama.cpp is committed here:
# the sdist comes from PyPI into a cache directory and is built there.
#   usage: benchmarks/build_llama_cpp.sh [CACHE_DIR]     (prints the bin directory)
set -euo pipefail
VERSION=0.3.36
CACHE="${1:-${SPECLLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specllama}/llama.cpp-$VERSION}"
BIN="$CACHE/build/bin"
if [ -x "$BIN/llama-speculative-simple" ] && [ -x "$BIN/llama-server" ]; then
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
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$CACHE/build" --target llama-speculative-simple llama-server -j "$(nproc)" >&2
echo "$BIN"
