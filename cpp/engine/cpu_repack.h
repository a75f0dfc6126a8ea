// engine/cpu_repack.h: which weights of a model on the CPU go to llama.cpp's CPU_REPACK buffer
// where specllama loads without llama.cpp's extra buffer types.
//
// llama.cpp repacks quantized matrix weights into interleaved blocks that its CPU kernels multiply
// faster (the CPU_REPACK buffer type, one of its "extra" buffer types). On a CPU with AMX the pinned
// llama.cpp puts those weights in its AMX buffer type instead, whose kernels crash
// (ggml-org/llama.cpp#20824), so specllama loads there without extra buffer types and names the
// repackable weights for CPU_REPACK itself, through llama_model_params.tensor_buft_overrides.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "llama.h"

namespace specllama {

// the overrides for the model at path: per kind of layer matrix (attn_q, ffn_up, ...) one pattern
// naming the layers whose matrix CPU_REPACK takes on this CPU, then the terminating entry. Empty
// where the CPU backend has no CPU_REPACK buffer type or no weight qualifies.
class repack_overrides {
  public:
    explicit repack_overrides(const std::string & path);
    // for llama_model_params.tensor_buft_overrides (nullptr where empty); valid while this lives
    const llama_model_tensor_buft_override * get() const { return entries_.empty() ? nullptr : entries_.data(); }
    // how many weights the patterns name
    int32_t n_tensors() const { return n_tensors_; }

  private:
    std::vector<std::string>                      patterns_;
    std::vector<llama_model_tensor_buft_override> entries_;
    int32_t                                       n_tensors_ = 0;
};

}  // namespace specllama
