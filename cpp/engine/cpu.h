// engine/cpu.h: how many threads llama.cpp gets by default, and what the machine has.
#pragma once

#include <cstdint>

namespace specllama {

// cores this process may run on: distinct physical cores (hyper-threads counted once, as
// llama.cpp's own tools count them), at most the CPUs the process's affinity allows
int32_t physical_cores();

// hardware threads this process may run on
int32_t logical_cores();

// the default thread count of every decode: physical_cores()
int32_t default_threads();

// whether llama.cpp's CPU backend, as built and on this machine, has the feature name ("AMX_INT8",
// "AVX512", ...: the names llama.cpp's system info prints)
bool cpu_backend_has(const char * name);

}  // namespace specllama
