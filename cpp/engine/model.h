// engine/model.h: loading a GGUF model through llama.cpp's C API, and what the loop needs to know
// of it (its vocabulary's size and longest piece, where it runs, whether a draft's keys and
// values can stand in for a target's).
// Not here: the file's checks before loading (gguf_checks.h), where it is placed (devices.h), its
// vocabulary (vocab.h), contexts and KV caches (kv_cache.h), the decoding loop
// (speculative/decoder.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/devices.h"
#include "llama-cpp.h"

namespace specllama {

// thrown when a model path does not exist (FileNotFoundError in Python)
struct file_not_found : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct model_params {
    std::string path;
    int32_t n_gpu_layers = 0;  // layers to offload to the GPU backend, -1 = all; no effect on a CPU-only build
    placement place;
};

// whether loading with these parameters puts any layer on a device other than the CPU
bool offloads(const model_params & params);

struct model {
    llama_model_ptr     ptr;
    const llama_vocab * vocab   = nullptr;
    std::string         path;
    int32_t             n_vocab = 0;
    int32_t             max_piece_bytes = 1;  // the longest token's text (special tokens included), in bytes
    bool                offloaded = false;    // some layer is on a device other than the CPU (offloads())
    bool                local_gpu = false;    // some layer is on a GPU of this machine (not an rpc-server's)
    // where llama.cpp put the weights: each buffer type's name ("CPU_Mapped", "CPU_REPACK", "CUDA0",
    // ...) and its size in MiB, as its loader reported them
    std::vector<std::pair<std::string, double>> weight_buffers;
    std::vector<llama_token> eog_ids;  // the vocabulary's end-of-generation tokens (llama_vocab_is_eog)

    llama_model * get() const { return ptr.get(); }
    // llama_vocab_is_eog, answered from that short list (no look-up in llama.cpp's vocabulary)
    bool is_eog(llama_token t) const { return std::find(eog_ids.begin(), eog_ids.end(), t) != eog_ids.end(); }
};

// load a GGUF model; throws file_not_found, or std::invalid_argument when the file is not a
// loadable GGUF (the message carries llama.cpp's own reason where it gave one)
std::shared_ptr<model> model_load(const model_params & params);

// whether draft can be target in another number format: the same architecture with the same
// attention shapes and parameter count, so that the target's keys and values can stand in for the
// draft's (the decoder then copies the prompt's from the target instead of processing it twice).
// The weights are not compared: a different model of the same shape passes too, and then drafts
// from the target's view of the prompt, which can cost acceptance but never changes the output.
bool kv_interchangeable(const model & target, const model & draft);

// one-line description: architecture, size, parameters
std::string model_describe(const model & mdl);

// the GGUF's chat template (name ""), or its template of that name (tokenizer.chat_template.NAME,
// "tool_use" say); "" where it has none
std::string model_chat_template(const model & mdl, const std::string & name = "");

}  // namespace specllama
