// engine/context_params.cpp: context_params' names checked and put into llama_context_params.
#include "engine/context_params.h"

#include <stdexcept>

#include "engine/llama_log.h"

namespace specllama {

const char * const k_cache_types[9] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"};

ggml_type cache_type_from_string(const std::string & name, const char * what) {
    std::string names;
    bool        known = false;
    for (const char * t : k_cache_types) {
        known = known || name == t;
        names += std::string(names.empty() ? "" : ", ") + t;
    }
    for (int i = 0; known && i < GGML_TYPE_COUNT; ++i) {  // (the table holds ggml's names only)
        const char * n = ggml_type_name((ggml_type) i);
        if (n != nullptr && name == n) {
            return (ggml_type) i;
        }
    }
    throw std::invalid_argument(std::string(what) + " must be one of " + names + ", got '" + name + "'");
}

void set_cache_format(const context_params & p, llama_context_params & c) {
    c.type_k = cache_type_from_string(p.type_k, "cache_type_k");
    c.type_v = cache_type_from_string(p.type_v, "cache_type_v");
    if (p.flash_attn == "auto") {
        c.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    } else if (p.flash_attn == "on") {
        c.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    } else if (p.flash_attn == "off") {
        c.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    } else {
        throw std::invalid_argument("flash_attn must be 'auto', 'on' or 'off', got '" + p.flash_attn + "'");
    }
    if (ggml_is_quantized(c.type_v) && c.flash_attn_type == LLAMA_FLASH_ATTN_TYPE_DISABLED) {
        throw std::invalid_argument("a quantized V cache (cache_type_v '" + p.type_v +
                                    "') needs flash attention: flash_attn 'auto' or 'on'");
    }
}

llama_context * init_context(llama_model * mdl, const llama_context_params & c, const std::string & what) {
    take_last_error();
    llama_context * raw = llama_init_from_model(mdl, c);
    if (raw != nullptr) {
        return raw;
    }
    const std::string why = take_last_error();
    if (!why.empty() && why.find("alloc") == std::string::npos && why.find("memory") == std::string::npos) {
        throw std::invalid_argument("failed to create " + what + ": " + why);
    }
    throw std::runtime_error("failed to create " + what + "; out of memory?" + (why.empty() ? "" : " (" + why + ")"));
}

}  // namespace specllama
