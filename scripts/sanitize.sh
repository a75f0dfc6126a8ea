#!/usr/bin/env bash
# Build the extension with AddressSanitizer + UndefinedBehaviorSanitizer and run the test suite
# against it (any sanitizer report fails the run). Needs the packages `.ci/run` installs.
#   usage: scripts/sanitize.sh [pytest options, e.g. -q -x -k api]     (about 2 minutes after the build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/build-asan"
# -O1 with line tables (-g1): what the sanitizers need for their reports, at less than half the compile time of
# -O2 -g, whose variable tracking over the pybind11 bindings dominates the build
cmake -S "$root" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DSPECLLAMA_SANITIZE=ON \
  -Dpybind11_DIR="$(python -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v python)" >/dev/null
cmake --build "$out/build"
rm -rf "$out/pkg" && mkdir -p "$out/pkg"
cp -r "$root/specllama" "$out/pkg/"
rm -f "$out"/pkg/specllama/_core*.so
cp "$out"/build/_core*.so "$out/pkg/specllama/"
cd "$out"  # not the source tree, so `import specllama` finds the sanitized build
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"  # Python itself "leaks" at exit by design
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONPATH="$out/pkg"
export SPECLLAMA_SANITIZED=1  # tests that compare wall-clock times skip themselves
# the one-libllama test inspects the installed package, not this build
exec python -m pytest "$root/tests" -c "$root/pyproject.toml" --rootdir "$root" -p no:cacheprovider \
  -k "not one_libllama" "$@"
