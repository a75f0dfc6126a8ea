// engine/footprint.cpp: a model's sizes from its GGUF metadata and tensor table, with ggml's own
// parser (no tensor data is read).
#include "engine/footprint.h"

#include "gguf.h"
#include "engine/context_params.h"
#include "engine/gguf_checks.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

namespace specllama {

namespace {

// a per-layer integer key, one value per layer (a single value holds for every layer)
std::vector<int64_t> per_layer(const gguf_context * ctx, const std::string & name, int64_t n_layer) {
    std::vector<int64_t> v = gguf_ints(ctx, name);
    if (v.size() == 1) {
        v.assign((size_t) std::max<int64_t>(n_layer, 1), v[0]);
    }
    return v;
}

bool starts_with(const char * s, const char * prefix) {
    return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

}  // namespace

model_footprint read_footprint(const std::string & path, const std::string & type_k, const std::string & type_v) {
    const ggml_type tk = cache_type_from_string(type_k, "cache_type_k");  // (checked before the file is read)
    const ggml_type tv = cache_type_from_string(type_v, "cache_type_v");
    gguf_init_params gp{};
    gp.no_alloc = true;
    gp.ctx      = nullptr;
    std::unique_ptr<gguf_context, decltype(&gguf_free)> ctx(gguf_init_from_file(path.c_str(), gp), gguf_free);
    if (!ctx) {
        throw std::invalid_argument("not a readable GGUF file: " + path);
    }
    model_footprint fp;
    const int64_t   arch_key = gguf_find_key(ctx.get(), "general.architecture");
    std::string     arch;
    if (arch_key >= 0 && gguf_get_kv_type(ctx.get(), arch_key) == GGUF_TYPE_STRING) {
        arch = gguf_get_val_str(ctx.get(), arch_key);
    }
    auto get = [&](const char * k) -> int64_t { return gguf_int(ctx.get(), arch + "." + k).value_or(0); };
    fp.n_layer = get("block_count");
    fp.n_embd  = get("embedding_length");
    fp.n_ctx_train = get("context_length");
    const auto heads = per_layer(ctx.get(), arch + ".attention.head_count", fp.n_layer);
    const auto kv    = per_layer(ctx.get(), arch + ".attention.head_count_kv", fp.n_layer);
    fp.n_head        = heads.empty() ? 0 : *std::max_element(heads.begin(), heads.end());
    const int64_t head_default = fp.n_head > 0 ? fp.n_embd / fp.n_head : 0;
    const int64_t key_length   = gguf_int(ctx.get(), arch + ".attention.key_length").value_or(head_default);
    const int64_t value_length = gguf_int(ctx.get(), arch + ".attention.value_length").value_or(head_default);
    // llama.cpp: a layer without head_count_kv has as many key/value heads as query heads
    const auto & kv_heads = kv.empty() ? heads : kv;
    for (int64_t h : kv_heads) {  // (a row of a layer's cache per position, as llama.cpp lays it out)
        fp.kv_bytes_per_position += ggml_row_size(tk, std::max<int64_t>(h, 0) * key_length) +
                                    ggml_row_size(tv, std::max<int64_t>(h, 0) * value_length);
    }
    const int64_t tokens = gguf_find_key(ctx.get(), "tokenizer.ggml.tokens");
    if (tokens >= 0 && gguf_get_kv_type(ctx.get(), tokens) == GGUF_TYPE_ARRAY) {
        fp.n_vocab = (int64_t) gguf_get_arr_n(ctx.get(), tokens);
    }
    bool   tied        = true;
    size_t token_bytes = 0;
    for (int64_t i = 0; i < gguf_get_n_tensors(ctx.get()); ++i) {
        const char * name  = gguf_get_tensor_name(ctx.get(), i);
        const size_t bytes = gguf_get_tensor_size(ctx.get(), i);
        if (starts_with(name, "blk.")) {
            fp.layer_bytes += bytes;
        } else if (std::strcmp(name, "output.weight") == 0 || starts_with(name, "output_norm.")) {
            fp.output_bytes += bytes;
            tied = tied && std::strcmp(name, "output.weight") != 0;
        } else {
            fp.other_bytes += bytes;
            if (std::strcmp(name, "token_embd.weight") == 0) {
                token_bytes = bytes;
            }
        }
    }
    if (tied) {
        fp.output_bytes += token_bytes;  // llama.cpp copies the input embeddings to the output's device
    }
    return fp;
}

}  // namespace specllama
