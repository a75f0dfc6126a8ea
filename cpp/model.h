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

// where a model's weights and KV cache live, spelled as llama.cpp's flags spell it (-dev, -sm, -ts, -mg)
struct placement {
    // device names as list_devices() gives them (case-insensitive), or an rpc-server's HOST:PORT for
    // every device it serves; "none" (or "cpu"): no offload. Empty: llama.cpp's default, every GPU.
    std::vector<std::string> devices;
    std::string              split_mode = "layer";  // none | layer | row: how a model spans several devices
    int32_t                  main_gpu   = 0;        // with split_mode none: which of the devices holds the model
    std::vector<float>       tensor_split;          // each device's share of the layers; empty: by free memory

    bool operator==(const placement & o) const {
        return devices == o.devices && split_mode == o.split_mode && main_gpu == o.main_gpu &&
               tensor_split == o.tensor_split;
    }
};

struct model_params {
    std::string path;
    int32_t n_gpu_layers = 0;  // layers to offload to the GPU backend, -1 = all; no effect on a CPU-only build
    placement place;
};

// one device the installed libllama can use
struct device_info {
    std::string name;         // what placement::devices names it by ("CPU", "CUDA0", "RPC0", ...)
    std::string description;  // the hardware (an rpc-server's device: its HOST:PORT)
    std::string type;         // cpu | gpu | igpu | accel
    size_t      memory_free  = 0;
    size_t      memory_total = 0;
};

// every device llama.cpp knows of, the CPU and the rpc-servers registered so far included
std::vector<device_info> list_devices();

// whether loading with these parameters puts any layer on a device other than the CPU
bool offloads(const model_params & params);

// whether the installed libllama was built with llama.cpp's RPC backend (-DGGML_RPC=ON)
bool supports_rpc();

// register rpc-servers (HOST:PORT each) so that their devices can be named; each is reached first
// with a plain TCP connect bounded by timeout_ms, so that an unreachable one is an error here
// (std::invalid_argument), not inside llama.cpp. Returns the names of the servers' devices.
std::vector<std::string> rpc_add_servers(const std::vector<std::string> & endpoints, int32_t timeout_ms = 5000);

// llama.cpp's RPC client ends the process when a connection to an rpc-server breaks (ggml-rpc.cpp,
// "Remote RPC server crashed or returned malformed response", raised in the thread that owns the
// connection, or in the loading thread when it cannot connect). After rpc_park_breaks(), that abort
// is intercepted: the thread that met it is parked for good (llama.cpp's client cannot go on with
// the connection, and returning would abort), and the break is counted, so that whoever waits on
// that connection can give up on it. Only for callers that watch rpc_failures() while they wait
// (specllama.rpc_guard): anyone else waiting on the connection waits for ever. Other aborts keep
// their course. (llama.cpp opens its connection to an rpc-server once, right after
// rpc_add_servers' own handshake; a server that dies in that instant parks a thread that holds
// llama.cpp's lock on its connections, and later loads on rpc-servers in the process then wait.)
void        rpc_park_breaks();
uint64_t    rpc_failures();
std::string rpc_failure_message();  // the latest break's message ("" when none)

// the rpc-server (HOST:PORT) that serves the device named name, or "" when no registered one does
std::string rpc_endpoint(const std::string & device);

// serve this machine's devices (names; empty: every GPU, else the CPU) to llama.cpp's RPC clients
// at HOST:PORT: llama.cpp's rpc-server, run in this thread. n_threads: the CPU device's threads (0:
// half the cores, as rpc-server); cache_dir: where received tensors are cached ("" for none).
// Returns only when it could not start (std::runtime_error).
void rpc_serve(const std::string & endpoint, int32_t n_threads, const std::vector<std::string> & devices,
               const std::string & cache_dir);

// "a,b,c" split at commas, spaces trimmed, empty parts refused (what = the option, for the message)
std::vector<std::string> split_list(const std::string & s, const std::string & what);

struct model {
    llama_model_ptr     ptr;
    const llama_vocab * vocab   = nullptr;
    std::string         path;
    int32_t             n_vocab = 0;
    int32_t             max_piece_bytes = 1;  // the longest token's text (special tokens included), in bytes
    bool                offloaded = false;    // some layer is on a device other than the CPU (offloads())

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
