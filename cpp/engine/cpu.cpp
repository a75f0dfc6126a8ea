// engine/cpu.cpp: core counts (Linux: sysfs topology and the affinity mask; elsewhere the standard
// library's count), and the CPU backend's features.
#include "engine/cpu.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "ggml-backend.h"

#if defined(__linux__)
#include <sched.h>
#endif

namespace specllama {

int32_t logical_cores() {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) {
            return n;
        }
    }
#endif
    unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 4 : (int32_t) n;
}

int32_t physical_cores() {
    const int32_t logical = logical_cores();
#if defined(__linux__)
    std::set<std::string> siblings;  // one thread_siblings mask per physical core
    for (int cpu = 0;; ++cpu) {
        std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings");
        if (!f.is_open()) {
            break;
        }
        std::string line;
        if (std::getline(f, line)) {
            siblings.insert(line);
        }
    }
    if (!siblings.empty()) {
        return std::max<int32_t>(1, std::min<int32_t>((int32_t) siblings.size(), logical));
    }
#endif
    return logical;
}

int32_t default_threads() {
    return physical_cores();
}

bool cpu_backend_has(const char * name) {
    ggml_backend_reg_t cpu = ggml_backend_reg_by_name("CPU");
    auto get_features = cpu == nullptr ? nullptr
                                       : (ggml_backend_get_features_t) ggml_backend_reg_get_proc_address(
                                             cpu, "ggml_backend_get_features");
    if (get_features == nullptr) {
        return false;
    }
    for (const ggml_backend_feature * f = get_features(cpu); f != nullptr && f->name != nullptr; ++f) {
        if (std::string(f->name) == name) {
            return std::string(f->value) != "0";
        }
    }
    return false;
}

}  // namespace specllama
