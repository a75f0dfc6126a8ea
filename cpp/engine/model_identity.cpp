// engine/model_identity.cpp: a GGUF file's identity from its metadata and tensor table (no tensor
// data is read).
#include "engine/model_identity.h"

#include "ggml.h"
#include "gguf.h"
#include "engine/gguf_checks.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace specllama {

namespace {

std::string str_key(const gguf_context * ctx, const char * name) {
    const int64_t k = gguf_find_key(ctx, name);
    if (k < 0 || gguf_get_kv_type(ctx, k) != GGUF_TYPE_STRING) {
        return "";
    }
    return gguf_get_val_str(ctx, k);
}

// FNV-1a, 64 bits
struct fnv {
    uint64_t h = 1469598103934665603ULL;

    void add(const char * s, size_t n) {
        for (size_t i = 0; i < n; ++i) {
            h = (h ^ (unsigned char) s[i]) * 1099511628211ULL;
        }
    }
};

}  // namespace

model_identity read_identity(const std::string & path) {
    check_regular_file(path);
    ggml_context *   meta = nullptr;
    gguf_init_params gp{};
    gp.no_alloc = true;
    gp.ctx      = &meta;
    std::unique_ptr<gguf_context, decltype(&gguf_free)> ctx(gguf_init_from_file(path.c_str(), gp), gguf_free);
    std::unique_ptr<ggml_context, decltype(&ggml_free)> tensors(meta, ggml_free);
    if (!ctx) {
        throw std::invalid_argument("not a readable GGUF file: " + path);
    }
    model_identity id;
    id.architecture = str_key(ctx.get(), "general.architecture");
    id.type         = str_key(ctx.get(), "general.type");
    id.name         = str_key(ctx.get(), "general.name");
    id.basename     = str_key(ctx.get(), "general.basename");
    id.finetune     = str_key(ctx.get(), "general.finetune");
    id.size_label   = str_key(ctx.get(), "general.size_label");
    id.split_no     = gguf_int(ctx.get(), "split.no").value_or(0);
    id.split_count  = gguf_int(ctx.get(), "split.count").value_or(1);
    for (ggml_tensor * t = tensors ? ggml_get_first_tensor(tensors.get()) : nullptr; t != nullptr;
         t = ggml_get_next_tensor(tensors.get(), t)) {
        id.n_params += ggml_nelements(t);
        id.n_block += std::strncmp(ggml_get_name(t), "blk.", 4) == 0;
    }
    const int64_t tokens = gguf_find_key(ctx.get(), "tokenizer.ggml.tokens");
    if (tokens >= 0 && gguf_get_kv_type(ctx.get(), tokens) == GGUF_TYPE_ARRAY &&
        gguf_get_arr_type(ctx.get(), tokens) == GGUF_TYPE_STRING) {
        id.n_vocab = (int64_t) gguf_get_arr_n(ctx.get(), tokens);
        fnv h;
        const std::string model = str_key(ctx.get(), "tokenizer.ggml.model");
        h.add(model.c_str(), model.size() + 1);
        for (int64_t i = 0; i < id.n_vocab; ++i) {
            const char * s = gguf_get_arr_str(ctx.get(), tokens, (size_t) i);
            h.add(s, std::strlen(s) + 1);  // (with its terminator, so that the texts' boundaries count)
        }
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016" PRIx64, h.h);
        id.vocab_hash = hex;
    }
    return id;
}

}  // namespace specllama
