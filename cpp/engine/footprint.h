// engine/footprint.h: what a model needs in a device's memory, read from its GGUF file before
// llama.cpp loads it, so that a default placement can offload only as many layers as fit.
// Not here: choosing the layers (specllama/placement.py), the devices themselves (devices.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace specllama {

struct model_footprint {
    int64_t n_layer = 0;                // repeating layers (llama.cpp's n_gpu_layers counts one more: the output)
    int64_t n_vocab = 0;
    int64_t n_embd  = 0;
    int64_t n_head  = 0;                // the most query heads of any layer
    int64_t n_ctx_train = 0;            // the context it was trained for (what n_ctx 0 means)
    size_t  layer_bytes  = 0;           // the weights of the repeating layers (blk.*), all together
    size_t  output_bytes = 0;           // the output layer: output.weight (or the tied token_embd), output_norm
    size_t  other_bytes  = 0;           // the rest (the input embeddings: llama.cpp keeps them on the CPU)
    size_t  kv_bytes_per_position = 0;  // keys and values of every attention layer, per cached position
};

// throws std::invalid_argument for a file ggml's GGUF parser cannot read, or a cache format not
// known (context_params::type_k); kv_bytes_per_position in the cache formats named
model_footprint read_footprint(const std::string & path, const std::string & type_k = "f16",
                               const std::string & type_v = "f16");

}  // namespace specllama
