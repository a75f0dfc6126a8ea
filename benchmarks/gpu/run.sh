#!/usr/bin/env bash
# The GPU measurement of docs/gpu.md in one command, on a machine with CUDA that reaches no package
# registry: build llama-cpp-python with CUDA (and llama.cpp's llama-server and
# llama-speculative-simple in the same build) from the trimmed sdist that pack.sh put in .gpu/,
# build specllama against it, write the shaped pair (shaped_models.py), load it as a decoder given no
# layers does (placement.log), then run overlap.py on the pair, shaped_bench.py on it and
# verify_shapes.py on its target (with CUDA graphs and without); check runs the tests of sampling on
# the device with the suite's models on the GPU.
#
#   bash benchmarks/gpu/pack.sh                 # here, once: .gpu/ (about 7 MB)
#   bash benchmarks/gpu/prebuild.sh             # here, once, where nvcc is: llama.cpp's part built ahead
#   bash benchmarks/gpu/run.sh [build|measure|all] [shaped_bench.py options...]
#   bash benchmarks/gpu/run.sh check [pytest options...]
#
# build unpacks prebuild.sh's build where one for this architecture is in .gpu/ and loads here
# (SPECLLAMA_GPU_PREBUILT=0: never), and builds llama-cpp-python from the sources otherwise.
#
# Reports go to $OUT (the device tool's folder that comes back) or .gpu/out. Environment:
# SPECLLAMA_CUDA_ARCH (default 90: H100/H200), SPECLLAMA_COMMIT (the commit measured, recorded in
# every report), SPECLLAMA_GPU_SHAPE (default qwen7b; qwen14b for a 14B-shaped target; small for a
# smoke test), SPECLLAMA_GPU_CUDA=0 for a CPU build of the same steps, SPECLLAMA_GPU_PEERS=0 to
# build without llama.cpp's programs (shaped_bench.py then measures specllama alone),
# SPECLLAMA_VERIFY_REPS (verify_shapes.py's --reps; 0 leaves it out), SPECLLAMA_GPU_FA=0 to build
# without CUDA flash-attention kernels, SPECLLAMA_GPU_GRAPH_OPT=0 to leave out overlap.py's second
# and third runs, with ggml's concurrent CUDA streams (GGML_CUDA_GRAPH_OPT=1) and without CUDA graphs
# (GGML_CUDA_DISABLE_GRAPHS=1), SPECLLAMA_GPU_TYPE (the pair's
# number format, default f16: one that is not takes one acceptance), SPECLLAMA_PYTHON (default
# python3: the interpreter whose packages the build uses: numpy, scikit-build-core, pybind11, cmake,
# ninja, httpx, click), SPECLLAMA_GPU_DIR (default .gpu in the repository), SPECLLAMA_GPU_PORTABLE=1
# (the CPU backend for any x86-64-v3 processor), SPECLLAMA_GPU_CMAKE_ARGS (more CMake arguments).
# Everything is installed into .gpu/site (pip --target; a venv made from a venv's python would not
# see that venv's packages).
set -euo pipefail
PHASE="${1:-all}"
shift || true
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
G="${SPECLLAMA_GPU_DIR:-$ROOT/.gpu}"
REPORTS="${OUT:-$G/out}"
SITE="$G/site"
PY="${SPECLLAMA_PYTHON:-python3}"
BIN="$G/build-lcp/bin"
ARCH="${SPECLLAMA_CUDA_ARCH:-90}"
PEERS="${SPECLLAMA_GPU_PEERS:-1}"
FA=ON
[ "${SPECLLAMA_GPU_FA:-1}" = 1 ] || FA=OFF
# where build unpacked prebuild.sh's build: CUDA's libraries for every phase after it
[ ! -f "$G/prebuilt.env" ] || . "$G/prebuilt.env"
mkdir -p "$REPORTS"

# llama-cpp-python with CUDA (and llama.cpp's two programs in the same build) from the trimmed sdist;
# SPECLLAMA_GPU_PORTABLE=1 builds the CPU backend for any x86-64-v3 processor (AVX2, FMA, F16C)
# instead of this one, as prebuild.sh does for another machine
build_llama() {
  # extracted once: a build cut short by a command's time limit goes on where it stopped
  if [ ! -f "$G/src/.extracted" ]; then
    rm -rf "$G/src" && mkdir -p "$G/src"
    tar -xzf "$G"/llama_cpp_python-*-trimmed.tar.gz -C "$G/src"
    touch "$G/src/.extracted"
  fi
  local on=ON
  [ "$PEERS" = 1 ] || on=OFF
  local args="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=$on -DLLAMA_BUILD_SERVER=$on -DLLAMA_BUILD_EXAMPLES=$on"
  args="$args -DLLAMA_BUILD_TESTS=OFF -DLLAMA_OPENSSL=OFF"
  if [ "${SPECLLAMA_GPU_PORTABLE:-0}" = 1 ]; then
    args="$args -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  fi
  if [ "${SPECLLAMA_GPU_CUDA:-1}" = 1 ]; then
    # flash-attention kernels as llama.cpp builds them by default (SPECLLAMA_GPU_FA=0 leaves them
    # out: a third of the build's time; both specllama and llama.cpp's programs then run without)
    args="$args -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$ARCH -DGGML_CUDA_FA=$FA"
  fi
  args="$args ${SPECLLAMA_GPU_CMAKE_ARGS:-}"
  CMAKE_ARGS="$args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PY" -m pip install -q --no-index --no-deps \
    --no-build-isolation --upgrade --target "$SITE" -C build-dir="$G/build-lcp" "$G"/src/llama_cpp_python-*/
  if [ "$PEERS" = 1 ] && { [ ! -x "$BIN/llama-server" ] || [ ! -x "$BIN/llama-speculative-simple" ]; }; then
    echo "run.sh: llama-server or llama-speculative-simple not built in $BIN" >&2
    exit 1
  fi
}

# what build_llama and use_prebuilt put in .gpu/ (the llama_cpp package, its libraries' headers and
# CMake packages, its record, llama.cpp's programs, the prebuilt build's environment), removed
clear_llama() {
  rm -rf "$SITE/llama_cpp" "$SITE/lib" "$SITE/include" "$SITE"/llama_cpp_python-*.dist-info "$BIN" "$G/prebuilt.env"
}

# the CUDA toolkit of the nvcc on the PATH, or nothing (nvcc may be a script that runs another: its
# own account of where its toolkit is)
cuda_home() {
  local top
  top="$(nvcc --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p')" || true
  [ -z "$top" ] || readlink -f "$top"
}

# the build prebuild.sh made on another machine (.gpu/prebuilt-*.tar.xz), unpacked in place of
# build_llama's where it was made for this GPU's architecture and its libraries load here: CUDA's
# runtime and cuBLAS found (in the lib64 of the CUDA whose nvcc is on the PATH, kept for the later
# phases in .gpu/prebuilt.env) and a GPU seen. Otherwise nothing of it is kept.
use_prebuilt() {
  local f tarball="" saved="${LD_LIBRARY_PATH:-}" cuda
  for f in "$G"/prebuilt-llama_cpp_python-*-cuda"$ARCH"-fa"$FA".tar.xz; do
    [ ! -f "$f" ] || { tarball="$f"; break; }
  done
  [ -n "$tarball" ] && [ "${SPECLLAMA_GPU_PREBUILT:-1}" = 1 ] && [ "${SPECLLAMA_GPU_CUDA:-1}" = 1 ] || return 1
  echo "run.sh: unpacking $(basename "$tarball")"
  clear_llama
  mkdir -p "$SITE" "$BIN"
  "$PY" -c "import sys, tarfile
kw = {'filter': 'tar'} if hasattr(tarfile, 'tar_filter') else {}
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **kw)" "$tarball" "$G"
  cuda="$(cuda_home)"
  if [ -n "$cuda" ]; then
    cuda="$cuda/lib64"
    echo "export LD_LIBRARY_PATH=\"$cuda\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"" > "$G/prebuilt.env"
    . "$G/prebuilt.env"
  fi
  # libllama loaded as llama_cpp loads it (by ctypes, its libraries by their RUNPATH $ORIGIN, CUDA's by the
  # search path), without llama_cpp's Python package and what it imports
  if "$PY" -c "import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.llama_supports_gpu_offload.restype = ctypes.c_bool
sys.exit(0 if lib.llama_supports_gpu_offload() else 1)" "$SITE/llama_cpp/lib/libllama.so" \
    && { [ "$PEERS" != 1 ] || "$BIN/llama-server" --version > /dev/null 2>&1; }; then
    PREBUILT="$(basename "$tarball")"
    return 0
  fi
  echo "run.sh: $(basename "$tarball") does not load here; building from the sources" >&2
  clear_llama
  export LD_LIBRARY_PATH="$saved"
  return 1
}

build() {
  local t0=$SECONDS
  mkdir -p "$SITE"
  export PYTHONPATH="$SITE"
  "$PY" -m pip install -q --no-index --no-deps --upgrade --target "$SITE" "$G"/gguf-*.whl
  PREBUILT=""
  use_prebuilt || build_llama
  # specllama against that libllama: its CMake package is under the target directory
  CMAKE_PREFIX_PATH="$SITE" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PY" -m pip install -q --no-index --no-deps \
    --no-build-isolation --upgrade --target "$SITE" -C build-dir="$G/build-specllama" "$ROOT"
  local fa="$FA"
  [ "${SPECLLAMA_GPU_CUDA:-1}" = 1 ] || fa="n/a (no CUDA)"
  {
    echo "build seconds: $((SECONDS - t0)), CUDA flash attention $fa, llama.cpp ${PREBUILT:-built here}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    nvcc --version 2>/dev/null | tail -1 || echo "no nvcc"
    (cd /tmp && "$PY" -c "import specllama; print('specllama', specllama.__version__, 'offload',
      specllama.supports_gpu_offload(), specllama.__file__)")
  } | tee "$REPORTS/build.txt"
}

measure() {
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  cd /tmp  # the installed specllama (with its extension), not the source tree's
  local shape="${SPECLLAMA_GPU_SHAPE:-qwen7b}" type="${SPECLLAMA_GPU_TYPE:-f16}" models=/tmp/specllama-shaped
  local target draft ngl=all reps="${SPECLLAMA_VERIFY_REPS:-20}" failed=0
  [ "${SPECLLAMA_GPU_CUDA:-1}" = 1 ] || ngl=0
  # the bench's arguments are checked before the pair is written (minutes at the 7B and 14B shapes)
  "$PY" "$ROOT/benchmarks/gpu/shaped_bench.py" --shape "$shape" --type "$type" --models "$models" \
    --check "$@" || return 2
  # the pair first (the bench retunes it for each acceptance), so that the short overlap probe comes
  # before the bench; each step runs whether or not the one before failed (-X faulthandler: a crash
  # prints where), and a cut by the call's time limit leaves what the steps before wrote
  "$PY" "$ROOT/benchmarks/gpu/shaped_models.py" --shape "$shape" --type "$type" --out "$models" 2>&1 \
    | tail -c 2000 | tee "$REPORTS/shaped_models.log"
  read -r target draft < <("$PY" -c "import json; f = json.load(open('$models/shaped.json'))['files']; \
print(f['target'], f['draft'])")
  [ -n "$draft" ] || { echo "run.sh: no shaped pair in $models" >&2; return 1; }
  # where a decoder given no layers puts the pair (every layer on the GPU where it fits: placement.py)
  "$PY" -c "import specllama, sys; d = specllama.SpeculativeDecoder(sys.argv[1], sys.argv[2], n_ctx=2048); \
print('default placement: target', d.n_gpu_layers, 'draft', d.n_gpu_layers_draft, d.target_model.weight_buffers); \
d.close()" "$target" "$draft" 2>&1 | tail -5 | tee "$REPORTS/placement.log" || failed=1
  # how much of the draft's decodes runs beside a verification (what DSI and draft_ahead can gain);
  # its report's name is the argument, the environment the caller's
  overlap() {
    "$PY" -X faulthandler "$ROOT/benchmarks/gpu/overlap.py" -m "$target" -d "$draft" -ngl "$ngl" --k 1,4,8 \
      --m 4 --reps 20 --out "$REPORTS/$1.json" 2>&1 | tee "$REPORTS/$1.log"
  }
  overlap overlap || failed=1
  # the same with ggml's concurrent CUDA streams (GGML_CUDA_GRAPH_OPT=1: independent kernels of one
  # graph, such as a layer's Q, K and V products, run side by side), which can shorten a decode
  # bound by its launches, as the draft's is; and without CUDA graphs, which shows whether the
  # draft's one-token decodes replay theirs (the same times with and without: they do not)
  if [ "${SPECLLAMA_GPU_CUDA:-1}" = 1 ] && [ "${SPECLLAMA_GPU_GRAPH_OPT:-1}" = 1 ]; then
    GGML_CUDA_GRAPH_OPT=1 overlap overlap_graph_opt || failed=1
    GGML_CUDA_DISABLE_GRAPHS=1 overlap overlap_no_graphs || failed=1
  fi
  SPECLLAMA_COMMIT="${SPECLLAMA_COMMIT:-}" "$PY" -X faulthandler "$ROOT/benchmarks/gpu/shaped_bench.py" \
    --shape "$shape" --type "$type" --models "$models" --bindir "$BIN" \
    --out "$REPORTS/shaped_bench.json" "$@" 2>&1 | tee "$REPORTS/shaped_bench.log" || failed=1
  # what verification lengths cost on the target, with CUDA graphs and without (reps 0: not measured)
  if [ "$reps" != 0 ]; then
    "$PY" -X faulthandler "$ROOT/benchmarks/gpu/verify_shapes.py" -m "$target" -ngl "$ngl" --reps "$reps" \
      --out "$REPORTS/verify_shapes.json" 2>&1 | tee "$REPORTS/verify_shapes.log" || failed=1
    GGML_CUDA_DISABLE_GRAPHS=1 "$PY" -X faulthandler "$ROOT/benchmarks/gpu/verify_shapes.py" -m "$target" \
      -ngl "$ngl" --reps "$reps" --out "$REPORTS/verify_shapes_no_graphs.json" 2>&1 \
      | tee "$REPORTS/verify_shapes_no_graphs.log" || failed=1
  fi
  return "$failed"
}

# the tests meant to hold on a GPU too, run there with the suite's tiny models on the GPU
# (SPECLLAMA_TEST_GPU=1; the suite hides GPUs otherwise): device sampling in the decoder and in
# slots against the host path, exactly, and its sampled output against the target's distribution.
# Arguments go to pytest (-k ...); with SPECLLAMA_GPU_CUDA=0 the same tests run on the CPU.
check() {
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  cd /tmp  # the installed specllama (with its extension), not the source tree's
  [ "${SPECLLAMA_GPU_CUDA:-1}" != 1 ] || export SPECLLAMA_TEST_GPU=1
  "$PY" -m pytest -p no:cacheprovider -rs "$ROOT/tests/test_device_sampling.py" "$@" 2>&1 \
    | tee "$REPORTS/check.log"
}

case "$PHASE" in
  build) build ;;
  build-llama) mkdir -p "$SITE"; build_llama ;;  # (prebuild.sh: llama.cpp's part alone)
  unpack) PREBUILT=""; use_prebuilt ;;  # (prebuild.sh's build alone: 1 where it is not used)
  cuda-home) cuda_home ;;
  measure) measure "$@" ;;
  check) check "$@" ;;
  all) build; measure "$@" ;;  # (not build && measure: errexit would not apply inside build)
  *) echo "usage: run.sh [build|measure|all|check|build-llama|unpack|cuda-home] [shaped_bench.py options, or" \
       "pytest's for check]" >&2; exit 2 ;;
esac
