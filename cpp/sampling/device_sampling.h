// sampling/device_sampling.h: the sampling chain run inside llama_decode, on the device that holds the
// model's output layer (llama.cpp's backend samplers), so that for each output row only what the
// acceptance rule reads comes back to the host: the candidates the chain keeps and their final
// logits (top_k(K), top-p, min-p, temperature: 8 * K bytes, against 4 * n_vocab for a row of raw
// logits), the top two logits for a greedy draft, or the argmax for a greedy target. The host turns
// such a row into the chain's distribution (the softmax of the final logits over the candidates the
// chain left), so p and q are the same distributions the host chain (sampling.h) makes, up to the
// device's floating point.
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
        none,     // no chain: raw logits come back (a row of n_vocab floats per output)
        argmax,   // the most likely token only (a greedy target)
        top_two,  // the two most likely tokens and their logits (a greedy draft: its token and margin)
        sample,   // top_k(K), top-p, min-p, temperature: the sampled distribution's support and logits
    };
    kind    what        = kind::none;
    int32_t top_k       = 0;
    float   top_p       = 1.0f;
    float   min_p       = 0.0f;
    float   temperature = 1.0f;

    bool operator==(const device_chain & o) const {
        return what == o.what && top_k == o.top_k && top_p == o.top_p && min_p == o.min_p &&
               temperature == o.temperature;
    }
    bool operator!=(const device_chain & o) const { return !(*this == o); }
};

// the chain for a model's rows under params: the target's (its argmax when greedy) or the draft's
// (its top two when greedy). params must pass device_chain_blocker.
device_chain device_chain_for(const sampling_params & params, bool draft);

// why params cannot be sampled on the device ("" where they can): want_logprobs for a greedy
// generation's log-probabilities; cross_vocab for a draft of another vocabulary
std::string device_chain_blocker(const sampling_params & params, bool want_logprobs, bool cross_vocab);

// a new llama.cpp sampler chain computing c (what == none: nullptr); the caller frees it
llama_sampler * make_device_chain(const device_chain & c);

// what a device chain returned for one output row: its candidates and their final logits (masked
// candidates have -inf)
struct sampled_row {
    const float *       logits = nullptr;
    const llama_token * ids    = nullptr;
    int32_t             n      = 0;
};

// the distribution a sample chain's row stands for: softmax of the finite logits over their candidates
// (then llama.cpp's infill sampler where params.infill is set)
void row_distribution(const sampled_row & row, const sampling_params & params, token_dist & out);

// a top_two row's most likely token (equal logits: the lower id) and its margin 1 - p2/p1
llama_token row_top_with_margin(const sampled_row & row, float & conf);

// an argmax row's token
llama_token row_argmax(const sampled_row & row);

}  // namespace specllama
