// model.h: loading GGUF models through llama.cpp's C API, checking that a draft's vocabulary
// matches its target's, and re-quantizing a model file.
// Not here: contexts and KV caches (kv_cache.h), sampling (sampling.h), the decoding loop
// (speculative.h).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama-cpp.h"

namespace specllama {

// thrown when a model path does not exist (FileNotFoundError in Python)
struct file_not_found : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct model_params {
    std::string path;
    int32_t n_gpu_layers = 0;  // layers to offload to the GPU backend, -1 = all; no effect on a CPU-only build
};

struct model {
    llama_model_ptr     ptr;
    const llama_vocab * vocab   = nullptr;
    std::string         path;
    int32_t             n_vocab = 0;
    int32_t             max_piece_bytes = 1;  // the longest token's text (special tokens included), in bytes

    llama_model * get() const { return ptr.get(); }
};

// set up llama.cpp once per process and route its log through our filter
void backend_init();

// llama.cpp messages at or above this level go to stderr (GGML_LOG_LEVEL_*; default NONE: load
// errors reach the caller in the exception's message instead)
void log_set_level(int level);

// load a GGUF model; throws file_not_found, or std::invalid_argument when the file is not a
// loadable GGUF (the message carries llama.cpp's own reason where it gave one)
std::shared_ptr<model> model_load(const model_params & params);

// the first difference between the draft's vocabulary and the target's, in words ("" when they are
// one: same tokens with the same ids and texts, same special tokens, same BOS rule). A draft with
// another vocabulary drafts through vocab_map.h.
std::string vocab_difference(const model & target, const model & draft);

// whether draft can be target in another number format: the same architecture with the same
// attention shapes and parameter count, so that the target's keys and values can stand in for the
// draft's (the decoder then copies the prompt's from the target instead of processing it twice).
// The weights are not compared: a different model of the same shape passes too, and then drafts
// from the target's view of the prompt, which can cost acceptance but never changes the output.
bool kv_interchangeable(const model & target, const model & draft);

// one-line description: architecture, size, parameters
std::string model_describe(const model & mdl);

// the model's built-in chat template, or "" when it has none
std::string model_chat_template(const model & mdl);

// render messages (role, content) with a chat template; add_assistant appends the reply header
std::string chat_apply_template(const std::string & tmpl,
                                const std::vector<std::pair<std::string, std::string>> & messages,
                                bool add_assistant);

// tokenize text; add_special adds BOS/EOS as the model asks, parse_special reads "<|im_end|>" etc. as tokens
std::vector<llama_token> tokenize(const model & mdl, const std::string & text, bool add_special, bool parse_special);

// a text with more than a limit of tokens
struct text_too_long : std::invalid_argument {
    int64_t n_tokens_at_least;  // the text's token count where exact, else a lower bound
    bool    exact;
    text_too_long(int64_t n, int64_t limit, bool exact)
        : std::invalid_argument("the text has " + std::string(exact ? "" : "at least ") + std::to_string(n) +
                                " tokens, more than " + std::to_string(limit)),
          n_tokens_at_least(n),
          exact(exact) {}
};

// tokenize, refusing (text_too_long) a text of more than max_tokens tokens at the cost of
// tokenizing a bounded prefix: a text longer than max_tokens tokens of the longest piece each is
// judged by its first (max_tokens + 64) * max_piece_bytes bytes
std::vector<llama_token> tokenize_bounded(const model & mdl, const std::string & text, bool add_special,
                                          bool parse_special, int64_t max_tokens);

// the bytes of one token (special tokens render as "" unless special is true)
std::string token_to_piece(const model & mdl, llama_token token, bool special = false);

// the names accepted by model_quantize ("f32", "f16", "q8_0", "q4_0", ...)
std::vector<std::string> quantize_types();

// write `out` as a copy of `in` with its weights converted to `type` (llama_model_quantize;
// quantized inputs are allowed, so "f32" expands a quantized model); throws on failure
void model_quantize(const std::string & in, const std::string & out, const std::string & type, int32_t n_threads);

}  // namespace specllama
