// engine/gguf_checks.cpp: what a GGUF file must satisfy before llama.cpp loads it. llama.cpp asserts
// (aborting the process) on some broken metadata instead of reporting it; these checks read the
// file with ggml's own GGUF parser, which fails cleanly, and raise std::invalid_argument instead.
#include "engine/gguf_checks.h"

#include "gguf.h"
#include "llama.h"
#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <sys/stat.h>
#include <vector>

namespace specllama {

std::optional<int64_t> gguf_int_at(const gguf_context * ctx, int64_t k) {
    switch (gguf_get_kv_type(ctx, k)) {
        case GGUF_TYPE_UINT8: return gguf_get_val_u8(ctx, k);
        case GGUF_TYPE_INT8: return gguf_get_val_i8(ctx, k);
        case GGUF_TYPE_UINT16: return gguf_get_val_u16(ctx, k);
        case GGUF_TYPE_INT16: return gguf_get_val_i16(ctx, k);
        case GGUF_TYPE_UINT32: return gguf_get_val_u32(ctx, k);
        case GGUF_TYPE_INT32: return gguf_get_val_i32(ctx, k);
        case GGUF_TYPE_UINT64: return (int64_t) std::min<uint64_t>(gguf_get_val_u64(ctx, k), INT64_MAX);
        case GGUF_TYPE_INT64: return gguf_get_val_i64(ctx, k);
        default: return std::nullopt;  // another type: llama.cpp reports the mismatch itself
    }
}

std::optional<int64_t> gguf_int(const gguf_context * ctx, const std::string & name) {
    const int64_t k = gguf_find_key(ctx, name.c_str());
    return k < 0 ? std::nullopt : gguf_int_at(ctx, k);
}

std::vector<int64_t> gguf_ints(const gguf_context * ctx, const std::string & name) {
    const int64_t k = gguf_find_key(ctx, name.c_str());
    if (k < 0) {
        return {};
    }
    if (gguf_get_kv_type(ctx, k) != GGUF_TYPE_ARRAY) {
        const auto v = gguf_int_at(ctx, k);
        return v ? std::vector<int64_t>{*v} : std::vector<int64_t>{};
    }
    std::vector<int64_t> out;
    const size_t         n    = gguf_get_arr_n(ctx, k);
    const auto           type = gguf_get_arr_type(ctx, k);
    if (type != GGUF_TYPE_INT32 && type != GGUF_TYPE_UINT32) {
        return out;  // llama.cpp reads only these for per-layer values and reports other types itself
    }
    const auto * data = static_cast<const uint8_t *>(gguf_get_arr_data(ctx, k));
    for (size_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, data + 4 * i, 4);
        out.push_back(type == GGUF_TYPE_INT32 ? (int64_t) v : (int64_t) (uint32_t) v);
    }
    return out;
}

namespace {

// each check names the llama.cpp assertion it stands in for (scripts/fuzz_gguf.py finds such aborts)
void check_gguf_metadata(const std::string & path) {
    gguf_init_params gp{};
    gp.no_alloc = true;
    gp.ctx      = nullptr;
    std::unique_ptr<gguf_context, decltype(&gguf_free)> ctx(gguf_init_from_file(path.c_str(), gp), gguf_free);
    if (!ctx) {
        return;  // llama.cpp's loader runs the same parser and reports the failure itself
    }
    auto bad = [&](const std::string & what) {
        throw std::invalid_argument("broken model metadata: " + what + ": " + path);
    };
    const int64_t arch_key = gguf_find_key(ctx.get(), "general.architecture");
    if (arch_key >= 0 && gguf_get_kv_type(ctx.get(), arch_key) == GGUF_TYPE_STRING) {
        const std::string arch = gguf_get_val_str(ctx.get(), arch_key);
        auto          get      = [&](const char * k) { return gguf_int(ctx.get(), arch + "." + k); };
        // llama-model.cpp load_hparams
        const auto n_layer = get("block_count");
        if (n_layer && (*n_layer <= 0 || *n_layer > 512)) {
            bad(arch + ".block_count " + std::to_string(*n_layer) + " outside [1, 512]");
        }
        const auto n_nextn = get("nextn_predict_layers");
        if (n_nextn && n_layer && (*n_nextn < 0 || *n_nextn > *n_layer)) {
            bad(arch + ".nextn_predict_layers " + std::to_string(*n_nextn) + " exceeds block_count");
        }
        const int64_t n_expert      = get("expert_count").value_or(0);
        const auto    n_expert_used = get("expert_used_count");
        if (n_expert < 0 || n_expert > 1024) {
            bad(arch + ".expert_count " + std::to_string(n_expert) + " outside [0, 1024]");
        }
        if (n_expert_used && (*n_expert_used < 0 || *n_expert_used > n_expert || (n_expert > 0 && *n_expert_used == 0))) {
            bad(arch + ".expert_used_count " + std::to_string(*n_expert_used) + " does not fit expert_count " +
                std::to_string(n_expert));
        }
        // llama-graph.cpp build_qkv: ggml_reshape_3d(Kcur, n_embd_head_k, n_head_kv, n_tokens) asserts
        // GGML_ASSERT(ggml_nelements(a) == ne0*ne1*ne2) when llama.cpp's 32-bit product of head size and
        // head count wrapped around (the K/V tensor shapes were checked against the wrapped value)
        const auto n_embd = get("embedding_length");
        const auto heads  = gguf_ints(ctx.get(), arch + ".attention.head_count");
        auto       all    = heads;
        for (int64_t h : gguf_ints(ctx.get(), arch + ".attention.head_count_kv")) {
            all.push_back(h);
        }
        for (int64_t h : all) {
            if (h < 0 || (n_embd && h > *n_embd)) {
                bad(arch + ".attention head count " + std::to_string(h) + " outside [0, embedding_length]");
            }
        }
        const int64_t head_default = n_embd && !heads.empty() && heads[0] > 0 ? *n_embd / heads[0] : 0;
        for (const char * k : {"attention.key_length", "attention.value_length"}) {
            const int64_t head = get(k).value_or(head_default);
            for (int64_t h : all) {
                if (head < 0 || (h > 0 && head > (int64_t) UINT32_MAX / h)) {
                    bad(arch + "." + k + " " + std::to_string(head) + " times head count " + std::to_string(h) +
                        " overflows 32 bits");
                }
            }
        }
        // ggml-cpu ops.cpp (norm, rms_norm): GGML_ASSERT(eps >= 0.0f)
        for (const char * k : {"attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon"}) {
            const int64_t id = gguf_find_key(ctx.get(), (arch + "." + k).c_str());
            if (id >= 0 && gguf_get_kv_type(ctx.get(), id) == GGUF_TYPE_FLOAT32) {
                const float eps = gguf_get_val_f32(ctx.get(), id);
                if (!(eps >= 0.0f) || !std::isfinite(eps)) {
                    bad(arch + "." + k + " " + std::to_string(eps) + " is not a finite number >= 0");
                }
            }
        }
        const int64_t rs = gguf_find_key(ctx.get(), (arch + ".rope.scaling.type").c_str());
        if (rs >= 0 && gguf_get_kv_type(ctx.get(), rs) == GGUF_TYPE_STRING) {
            const std::string t = gguf_get_val_str(ctx.get(), rs);
            if (t != "none" && t != "linear" && t != "yarn" && t != "longrope") {
                bad(arch + ".rope.scaling.type '" + t + "' is not none, linear, yarn or longrope");
            }
        }
    }
    const int64_t key = gguf_find_key(ctx.get(), "tokenizer.ggml.tokens");
    if (key >= 0 && gguf_get_kv_type(ctx.get(), key) == GGUF_TYPE_ARRAY &&
        gguf_get_arr_type(ctx.get(), key) == GGUF_TYPE_STRING) {
        // llama-vocab.cpp: GGML_ASSERT(id_to_token.size() == token_to_id.size())
        const size_t                                 n = gguf_get_arr_n(ctx.get(), key);
        std::unordered_map<std::string_view, size_t> seen;
        seen.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            const char * text = gguf_get_arr_str(ctx.get(), key, i);
            auto [it, fresh]  = seen.emplace(std::string_view(text ? text : ""), i);
            if (!fresh) {
                throw std::invalid_argument("broken vocabulary: tokens " + std::to_string(it->second) + " and " +
                                            std::to_string(i) + " have the same text: " + path);
            }
        }
    }
}

}  // namespace

void check_regular_file(const std::string & path) {
    struct stat st{};
    if (stat(path.c_str(), &st) != 0) {
        throw file_not_found("model file not found: " + path);
    }
    if (!S_ISREG(st.st_mode)) {
        throw std::invalid_argument("not a regular file: " + path);
    }
}

// check the path before llama.cpp sees it, so a wrong path or a non-GGUF file gets a clear message
void check_gguf_file(const std::string & path) {
    check_regular_file(path);
    std::ifstream f(path, std::ios::binary);
    char magic[4] = {0, 0, 0, 0};
    if (!f || !f.read(magic, 4)) {
        throw std::invalid_argument("not a GGUF file (shorter than its 4-byte magic): " + path);
    }
    if (std::memcmp(magic, "GGUF", 4) != 0) {
        throw std::invalid_argument("not a GGUF file (no GGUF magic at its start): " + path);
    }
    check_gguf_metadata(path);
}

}  // namespace specllama
