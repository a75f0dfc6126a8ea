// engine/cpu_repack.cpp: the CPU_REPACK overrides (cpu_repack.h).
#include "engine/cpu_repack.h"

#include <cstring>
#include <map>
#include <regex>

#include "engine/cpu.h"
#include "ggml-backend.h"
#include "gguf.h"

namespace specllama {

namespace {

ggml_backend_buffer_type_t cpu_repack_buft() {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (cpu == nullptr) {
        return nullptr;
    }
    auto get = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(
        ggml_backend_dev_backend_reg(cpu), "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t * b = get ? get(cpu) : nullptr; b != nullptr && *b != nullptr; ++b) {
        if (std::strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) {
            return *b;
        }
    }
    return nullptr;
}

// whether the pinned llama.cpp repacks a matrix of this type with this many rows on an x86 CPU
// (ggml-cpu/repack.cpp, ggml_repack_get_optimal_repack_type: every x86 layout interleaves 8 rows).
// A weight placed in CPU_REPACK that it would not repack has no layout there, so this must not
// name more than llama.cpp repacks.
bool repacks_on_x86(ggml_type type, int64_t rows) {
    if (rows % 8 != 0 || !cpu_backend_has("AVX2")) {
        return false;
    }
    switch (type) {
        case GGML_TYPE_Q4_0:
        case GGML_TYPE_Q4_K:
        case GGML_TYPE_IQ4_NL:
        case GGML_TYPE_MXFP4:
            return true;
        default:
            return false;
    }
}

}  // namespace

repack_overrides::repack_overrides(const std::string & path) {
#if defined(__x86_64__) || defined(_M_X64)
    ggml_backend_buffer_type_t buft = cpu_repack_buft();
    gguf_init_params gp{};
    gp.no_alloc = true;
    std::unique_ptr<gguf_context, decltype(&gguf_free)> ctx(
        buft ? gguf_init_from_file(path.c_str(), gp) : nullptr, gguf_free);
    if (!ctx) {
        return;
    }
    // the matrices every layer multiplies its activations by (llm_graph's build_lora_mm), by kind
    static const std::regex matrix(
        R"(^blk\.(\d+)\.(attn_q|attn_k|attn_v|attn_qkv|attn_output|ffn_gate|ffn_up|ffn_down|ffn_gate_up)\.weight$)");
    std::map<std::string, std::string> layers;  // kind -> "0|3|5"
    for (int64_t i = 0; i < gguf_get_n_tensors(ctx.get()); ++i) {
        std::cmatch m;
        const int64_t * ne = gguf_get_tensor_ne(ctx.get(), i);
        const bool      two_d = ne[2] == 1 && ne[3] == 1;
        if (two_d && std::regex_match(gguf_get_tensor_name(ctx.get(), i), m, matrix) &&
            repacks_on_x86(gguf_get_tensor_type(ctx.get(), i), ne[1])) {
            std::string & alt = layers[m[2].str()];
            alt += (alt.empty() ? "" : "|") + m[1].str();
            ++n_tensors_;
        }
    }
    for (const auto & [kind, alt] : layers) {
        patterns_.push_back("^blk\\.(" + alt + ")\\." + kind + "\\.weight$");
    }
    for (const std::string & p : patterns_) {
        entries_.push_back({ p.c_str(), buft });
    }
    if (!entries_.empty()) {
        entries_.push_back({ nullptr, nullptr });
    }
#else
    (void) path;
#endif
}

}  // namespace specllama
