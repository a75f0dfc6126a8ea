// engine/context_params.h: what a llama.cpp context is made with (positions, batch, threads, the
// KV cache's number formats, flash attention), and its translation into llama_context_params.
// Not here: the contexts themselves (kv_cache.h, the slots' shared_context in slot_batcher.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "llama.h"

namespace specllama {

struct context_params {
    int32_t n_ctx     = 4096;  // positions the KV cache holds (0 = the model's training context)
    int32_t n_batch   = 512;   // tokens per llama_decode call; verification batches must fit in one
    int32_t n_threads = 0;     // CPU threads; 0: the physical cores; -1: tuned, at most those (thread_tuner.h)
    // a sliding-window model (Gemma 2/3 style): true keeps every position in its window layers'
    // cache, so rollback drops a tail as for any KV cache; false keeps only the window (less
    // memory), and rollback goes back to a checkpoint of it as for a recurrent state
    bool    swa_full  = true;
    // where a recurrent or hybrid model's per-step checkpoints live: "device" keeps the copy in the
    // memory that holds the state (llama.cpp's LLAMA_STATE_SEQ_FLAGS_ON_DEVICE: a copy within a GPU's
    // memory, no transfer to the host and back), "host" copies it to host memory, "auto" is "device"
    // where the model is offloaded and "host" otherwise. A model with sliding-window layers always
    // checkpoints to host memory (llama.cpp keeps a device copy of one contiguous range of cells only).
    std::string checkpoint_memory = "auto";
    // the number formats of the cached keys and values (llama.cpp's --cache-type-k / -v; one of
    // k_cache_types) and when attention runs as flash attention ("auto": where the device has the
    // kernels, "on", "off"; a quantized V cache needs it, so "auto" turns it on there)
    std::string type_k     = "f16";
    std::string type_v     = "f16";
    std::string flash_attn = "auto";
};

// the cache formats llama.cpp's programs accept, by ggml's names
extern const char * const k_cache_types[9];

// a cache format by name; std::invalid_argument naming `what` and the formats for another
ggml_type cache_type_from_string(const std::string & name, const char * what);

// the formats and flash attention of p set in c (std::invalid_argument for a name not known, or a
// quantized V cache with flash attention "off", which llama.cpp refuses)
void set_cache_format(const context_params & p, llama_context_params & c);

// llama_init_from_model, or an exception saying why not: std::invalid_argument where llama.cpp
// refused the settings (its logged reason: a cache format the model's head size does not take,
// say), std::runtime_error naming `what` where it gave no reason or ran out of memory
llama_context * init_context(llama_model * mdl, const llama_context_params & c, const std::string & what);

}  // namespace specllama
