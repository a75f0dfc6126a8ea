#!/usr/bin/env bash
# Build llama.cpp's own llama-speculative-simple, llama-server and rpc-server (ggml-rpc-server) from the
# llama-cpp-python 0.3.36 sdist's vendored sources, for benchmarks/compare.py,
# benchmarks/serve_bench.py and tests/test_devices.py (specllama on llama.cpp's own rpc-server).
# Nothing of llama.cpp is committed here: the sdist comes from PyPI into a cache directory and is
# built there. llama-server is built without its web UI (the tests and benchmarks use its API), so the
# build fetches nothing from Hugging Face.
#   usage: benchmarks/build_llama_cpp.sh [CACHE_DIR]     (prints the bin directory)
#   SPECLLAMA_LLAMA_CPP_TARGETS="ggml-rpc-server" builds only those programs (default: all three)
#   SPECLLAMA_LLAMA_CPP_WHEEL=DIR also puts llama-cpp-python's wheel, built from the same sdist with
#     $CMAKE_ARGS, in DIR: one build tree makes both, so that ggml, libllama and llama.cpp's common
#     library compile once, and the programs run on the wheel's own shared libraries. It needs
#     scikit-build-core, cmake and ninja in the current Python (it builds without pip's isolation, so
#     that the tree stays usable). The wheel and the programs are kept in CACHE_DIR and reused while
#     $CMAKE_ARGS, the targets and this script stay the same.
set -euo pipefail
VERSION=0.3.36
CACHE="${1:-${SPECLLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specllama}/llama.cpp-$VERSION}"
BIN="$CACHE/build/bin"
read -r -a TARGETS <<< "${SPECLLAMA_LLAMA_CPP_TARGETS:-llama-speculative-simple llama-server ggml-rpc-server}"
WHEEL_DIR="${SPECLLAMA_LLAMA_CPP_WHEEL:-}"
STAMP="$CACHE/build/specllama-wheel-build"
STAMP_TEXT="llama-cpp-python $VERSION; CMAKE_ARGS=${CMAKE_ARGS:-}; targets=${TARGETS[*]}; script $(cksum < "${BASH_SOURCE[0]}" | cut -d" " -f1)"

missing=0
for t in "${TARGETS[@]}"; do
  [ -x "$BIN/$t" ] || missing=1
done

sdist() {  # the sdist from PyPI, once
  [ -f "$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz" ] && return
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$CACHE/sdist" \
    "llama-cpp-python==$VERSION" >&2
}

if [ -n "$WHEEL_DIR" ]; then
  mkdir -p "$WHEEL_DIR"
  wheel="$(ls "$CACHE"/wheel/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -n 1 || true)"
  if [ "$missing" = 0 ] && [ -n "$wheel" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$STAMP_TEXT" ]; then
    cp "$wheel" "$WHEEL_DIR/"
    echo "$BIN"
    exit 0
  fi
  mkdir -p "$CACHE"
  sdist
  rm -rf "$CACHE/python" "$CACHE/build" "$CACHE/wheel"
  mkdir -p "$CACHE/python" "$CACHE/wheel"
  tar -xzf "$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE/python" --strip-components=1
  # the wheel first, as pip builds it, in a build tree that outlives pip
  python3 -m pip wheel --quiet --no-deps --no-build-isolation -w "$CACHE/wheel" \
    -C build-dir="$CACHE/build" "$CACHE/python" >&2
  # then the programs in the same tree: llama.cpp's options for its tools, nothing else changed but
  # that llama.cpp's tools add its multimodal library (llama-server links it), which
  # llama-cpp-python's LLAVA_BUILD adds from outside them otherwise (it is compiled again)
  cmake -S "$CACHE/python" -B "$CACHE/build" -DCMAKE_MAKE_PROGRAM="$(command -v ninja)" -DLLAVA_BUILD=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >&2
  cmake --build "$CACHE/build" --target "${TARGETS[@]}" -j "$(nproc)" >&2
  echo "$STAMP_TEXT" > "$STAMP"
  cp "$CACHE"/wheel/llama_cpp_python-"$VERSION"-*.whl "$WHEEL_DIR/"
  echo "$BIN"
  exit 0
fi

if [ "$missing" = 0 ]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$CACHE"
if [ ! -d "$CACHE/src" ]; then
  sdist
  mkdir -p "$CACHE/src"
  tar -xzf "$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE/src" --strip-components=3 \
    "llama_cpp_python-$VERSION/vendor/llama.cpp"
fi
if [ -f "$STAMP" ]; then  # a tree the wheel mode made, lacking a program asked for: start again, standalone
  rm -rf "$CACHE/build"
fi
cmake -S "$CACHE/src" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_RPC=ON >&2
cmake --build "$CACHE/build" --target "${TARGETS[@]}" -j "$(nproc)" >&2
echo "$BIN"
