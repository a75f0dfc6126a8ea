// sampling/device_sampling.h: the part of the sampling chain run inside llama_decode, on the device
// that holds the model's output layer (llama.cpp's backend samplers), so that for each output row
// only what the acceptance rule reads comes back to the host: the top k candidates and their logits
// (8 * k bytes, against 4 * n_vocab for a row of raw logits), the top two for a greedy draft, the
// argmax for a greedy target. The host applies the rest of the chain (top-p, min-p, temperature,
// infill) to those k candidates exactly as it does after its own top-k over a whole row
// (sparse_distribution), so p and q are the host chain's distributions to the bit. The device chain
// depends on top_k alone: a change of temperature, top-p or min-p does not make llama.cpp rebuild
// its graphs.
// What the device cannot run: grammars, logit bias and penalties (they need each position's history),
// a chain over the whole vocabulary (top_k 0: its rows would come back full length), log-probabilities
// of greedy decoding (a softmax over every token), a draft of another vocabulary (its unshared tokens
// are masked on the host). Those generations sample on the host (device_chain_blocker).
// Not here: attaching a chain to a context (kv_cache::set_device_chain), the acceptance rule.
#pragma once

#include <cstdint>
#include <string>

#include "llama.h"
#include "sampling/sampling.h"

namespace specllama {

// the largest top_k a device chain runs (its rows come back with that many candidates)
constexpr int32_t k_max_device_top_k = 1024;

struct device_chain {
    enum class kind : uint8_t {
        none,    // no chain: raw logits come back (a row of n_vocab floats per output)
        argmax,  // the most likely token only (a greedy target)
        top_k,   // the top_k most likely tokens and their logits (sampling; a greedy draft's top two)
    };
    kind    what  = kind::none;
    int32_t top_k = 0;

    bool operator==(const device_chain & o) const { return what == o.what && top_k == o.top_k; }
    bool operator!=(const device_chain & o) const { return !(*this == o); }
};

// the chain for a model's rows under params: the target's (its argmax when greedy) or the draft's
// (its top two when greedy). params must pass device_chain_blocker.
device_chain device_chain_for(const sampling_params & params, bool draft);

// why params cannot be sampled on the device for a model of n_vocab tokens ("" where they can):
// want_logprobs for a greedy generation's log-probabilities; cross_vocab for a draft of another
// vocabulary
std::string device_chain_blocker(const sampling_params & params, int32_t n_vocab, bool want_logprobs,
                                 bool cross_vocab);

// a new llama.cpp sampler chain computing c (what == none: nullptr); the caller frees it
llama_sampler * make_device_chain(const device_chain & c);

// what a device chain returned for one output row: its candidates and their logits, in no set order
struct sampled_row {
    const float *       logits = nullptr;
    const llama_token * ids    = nullptr;
    int32_t             n      = 0;
};

// what the chain returned for output j of ctx's last decode (n = 0 where llama.cpp returned no
// row); bytes: what llama.cpp copied back for it
sampled_row read_sampled_row(llama_context * ctx, int32_t j, int64_t & bytes);

// the distribution the chain params draws from, given a top_k row (sparse_distribution)
void row_distribution(const sampled_row & row, const sampling_params & params, token_dist & out);

// a top-two row's most likely token (equal logits: the lower id) and its margin (top_two_margin)
llama_token row_top_with_margin(const sampled_row & row, float & conf);

// an argmax row's token
llama_token row_argmax(const sampled_row & row);

}  // namespace specllama
