#!/usr/bin/env bash
# The llama-cpp-python 0.3.36 sdist trimmed to what a CUDA build of it and of llama.cpp's
# llama-server and llama-speculative-simple needs (no model vocabularies, docs, tests, other GPU
# backends), and the gguf package's wheel: what benchmarks/gpu/run.sh builds and runs from on a
# GPU machine that reaches no package registry. Writes them under OUT (default .gpu/, which
# .gitignore leaves out of commits; the device tool carries it) and prints its size.
#   usage: bash benchmarks/gpu/pack.sh [OUT]
set -euo pipefail
VERSION=0.3.36
OUT="${1:-.gpu}"
CACHE="${SPECLLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specllama}/llama.cpp-$VERSION"
SDIST="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$CACHE/sdist" \
    "llama-cpp-python==$VERSION" >&2
fi
mkdir -p "$OUT"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
tar -xzf "$SDIST" -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION"
V="$SRC/vendor/llama.cpp"
rm -rf "$SRC/.git" "$SRC/.github" "$SRC/docs" "$SRC/examples" "$SRC/tests" "$SRC/docker" \
  "$V/models" "$V/docs" "$V/tests" "$V/benches" "$V/media" "$V/conversion" "$V/gguf-py" "$V/ci" "$V/skills" \
  "$V/.github" "$V/.devops" "$V/tools/ui/tests" 2>/dev/null || true
for b in "$V"/ggml/src/ggml-*/; do
  case "$(basename "$b")" in
    ggml-cpu|ggml-cuda|ggml-blas|ggml-rpc) ;;
    ggml-hip|ggml-musa) ;;  # (their CMake files are read by the CUDA build's)
    *) rm -rf "$b" ;;
  esac
done
# the CMake files of tests/ are read even with tests off: keep an empty one
mkdir -p "$V/tests" && : > "$V/tests/CMakeLists.txt"
tar -czf "$OUT/llama_cpp_python-$VERSION-trimmed.tar.gz" -C "$WORK" "llama_cpp_python-$VERSION"
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$OUT" "gguf==0.19.0" >&2
du -sh "$OUT" | cut -f1
