#!/usr/bin/env bash
# The GPU measurement of docs/gpu.md in one command, on a machine with CUDA that reaches no package
# registry: build llama-cpp-python with CUDA (and llama.cpp's llama-server and
# llama-speculative-simple in the same build) from the trimmed sdist that pack.sh put in .gpu/,
# build specllama against it, write the shaped pair (shaped_models.py), run shaped_bench.py on it and
# verify_shapes.py on its target (with CUDA graphs and without).
#
#   bash benchmarks/gpu/pack.sh                 # here, once: .gpu/ (about 7 MB)
#   bash benchmarks/gpu/run.sh [build|measure|all] [shaped_bench.py options...]
#
# Reports go to $OUT (the device tool's folder that comes back) or .gpu/out. Environment:
# SPECLLAMA_CUDA_ARCH (default 90: H100/H200), SPECLLAMA_COMMIT (the commit measured, recorded in
# the report), SPECLLAMA_GPU_SHAPE (default qwen7b; small for a smoke test), SPECLLAMA_GPU_CUDA=0
# for a CPU build of the same steps (what the tests run).
set -euo pipefail
PHASE="${1:-all}"
shift || true
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
G="$ROOT/.gpu"
REPORTS="${OUT:-$G/out}"
VENV="$G/venv"
BIN="$G/build-lcp/bin"
mkdir -p "$REPORTS"

build() {
  local t0=$SECONDS
  python3 -m venv --system-site-packages "$VENV"
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
  python -m pip install -q --no-index --no-deps "$G"/gguf-*.whl
  rm -rf "$G/src" && mkdir -p "$G/src"
  tar -xzf "$G"/llama_cpp_python-*-trimmed.tar.gz -C "$G/src"
  local args="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_EXAMPLES=ON"
  args="$args -DLLAMA_BUILD_TESTS=OFF -DLLAMA_OPENSSL=OFF"
  if [ "${SPECLLAMA_GPU_CUDA:-1}" = 1 ]; then
    # flash-attention kernels off: a third of the build's time; both specllama and llama.cpp's
    # programs run without them
    args="$args -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${SPECLLAMA_CUDA_ARCH:-90} -DGGML_CUDA_FA=OFF"
  fi
  CMAKE_ARGS="$args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" python -m pip install -q --no-index --no-deps \
    --no-build-isolation -C build-dir="$G/build-lcp" "$G"/src/llama_cpp_python-*
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" python -m pip install -q --no-index --no-deps --no-build-isolation \
    -C build-dir="$G/build-specllama" "$ROOT"
  if [ ! -x "$BIN/llama-server" ] || [ ! -x "$BIN/llama-speculative-simple" ]; then
    echo "run.sh: llama-server or llama-speculative-simple not built in $BIN" >&2
    exit 1
  fi
  {
    echo "build seconds: $((SECONDS - t0))"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    nvcc --version 2>/dev/null | tail -1 || echo "no nvcc"
    (cd /tmp && python -c "import specllama; print('specllama', specllama.__version__, 'offload', specllama.supports_gpu_offload())")
  } | tee "$REPORTS/build.txt"
}

measure() {
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
  cd /tmp  # the installed specllama (with its extension), not the source tree's
  SPECLLAMA_COMMIT="${SPECLLAMA_COMMIT:-}" python "$ROOT/benchmarks/gpu/shaped_bench.py" \
    --shape "${SPECLLAMA_GPU_SHAPE:-qwen7b}" --models /tmp/specllama-shaped --bindir "$BIN" \
    --out "$REPORTS/shaped_bench.json" "$@" 2>&1 | tee "$REPORTS/shaped_bench.log"
  # what verification lengths cost on the target, with CUDA graphs and without
  local target ngl=all
  target="$(python -c "import json; print(json.load(open('/tmp/specllama-shaped/shaped.json'))['files']['target'])")"
  [ "${SPECLLAMA_GPU_CUDA:-1}" = 1 ] || ngl=0
  python "$ROOT/benchmarks/gpu/verify_shapes.py" -m "$target" -ngl "$ngl" --out "$REPORTS/verify_shapes.json" \
    2>&1 | tee "$REPORTS/verify_shapes.log"
  GGML_CUDA_DISABLE_GRAPHS=1 python "$ROOT/benchmarks/gpu/verify_shapes.py" -m "$target" -ngl "$ngl" \
    --out "$REPORTS/verify_shapes_no_graphs.json" 2>&1 | tee "$REPORTS/verify_shapes_no_graphs.log"
}

case "$PHASE" in
  build) build ;;
  measure) measure "$@" ;;
  all) build && measure "$@" ;;
  *) echo "usage: run.sh [build|measure|all] [shaped_bench.py options]" >&2; exit 2 ;;
esac
