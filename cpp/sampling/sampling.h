// sampling/sampling.h: turning logits into the distribution a sampler draws from ("standardized
// sampling", Leviathan et al. sec. 2.3): the same transforms are applied to the target's p and the
// draft's q, so accepting against them reproduces exactly what plain sampling with these settings
// would produce. Order and meaning as llama.cpp's default chain: top-k; top-p on the softmax of the
// tokens top-k left (of the whole vocabulary without top-k); min-p against the most likely token;
// then temperature on the survivors; then, where asked, llama.cpp's infill sampler.
// Not here: the acceptance rule (acceptance.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "llama.h"
#include "sampling/vocab_scan.h"

namespace specllama {

struct logit_controls;  // controls.h
class grammar_track;    // grammar.h

struct sampling_params {
    float   temperature = 0.8f;   // 0 = greedy (argmax); > 0 samples
    int32_t top_k       = 40;     // keep the k most likely tokens, 0 = all
    float   top_p       = 0.95f;  // keep the smallest set whose probability reaches top_p, in (0, 1]
    float   min_p       = 0.05f;  // drop tokens below min_p times the most likely one's probability, in [0, 1)
    // llama.cpp's infill sampler after the chain (llama-server's "infill" in its sampler list), with
    // this vocabulary's end-of-generation tokens and token texts; null: none. It keeps only
    // end-of-generation tokens where they hold enough of the probability, else merges each token into
    // a likelier one whose text it starts and drops what stays unlikely; the survivors are drawn
    // by the chain's probabilities (llama.cpp's dist sampler recomputes them from the logits)
    const llama_vocab * infill = nullptr;
    // logit bias and repetition penalties before the chain (controls.h), which whoever holds the
    // logits applies with the position's history (a sampling_distribution call does not): null: none
    const logit_controls * controls = nullptr;
    // a grammar's states at the step's positions (grammar.h), which whoever holds the logits masks
    // them with before the chain, and the drafter advances over its drafts: null: none
    grammar_track * grammar = nullptr;
    // draws keyed by position (sample_keyed with this key) instead of from a random stream: the
    // drafter's and the acceptance rule's draws at a position then share their randomness; none:
    // the stream
    std::optional<uint64_t> keyed;

    bool greedy() const { return temperature == 0.0f; }
};

// throws std::invalid_argument naming the bad parameter
void sampling_params_validate(const sampling_params & params);

// a sparse distribution: the tokens that can be drawn (in no set order), probabilities summing to 1
struct token_dist {
    std::vector<llama_token> ids;
    std::vector<float>       probs;

    float prob_of(llama_token id) const;  // 0 for a token outside the support
};

using rng_t = std::mt19937_64;

// the distribution a sampler with params draws from, given raw logits (needs temperature > 0)
void sampling_distribution(const float * logits, int32_t n_vocab, const sampling_params & params, token_dist & out);

// the same distribution from the n candidates a top-k chain kept (their ids and raw logits, in any
// order; n = params.top_k), as sampling_distribution makes it from the whole row (needs temperature > 0)
void sparse_distribution(const float * logits, const llama_token * ids, int32_t n, const sampling_params & params,
                         token_dist & out);

// llama.cpp's infill sampler on a distribution the chain made (sampling_params::infill)
void apply_infill(const llama_vocab * vocab, token_dist & dist);

// the most candidates the infill sampler is asked to merge (top_k at most this)
constexpr int32_t k_max_infill_candidates = 1024;

// how sure a greedy draft is of its most likely token: 1 - p2/p1 = 1 - exp(l2 - l1) for its two largest
// logits (0 at an exact tie, 1 when the runner-up is out of sight); no softmax
inline float top_two_margin(float l1, float l2) {
    return 1.0f - std::exp(l2 - l1);
}

// one draw from dist
llama_token sample(const token_dist & dist, rng_t & rng);

// a uniform draw in [0, 1)
double uniform01(rng_t & rng);

// splitmix64's finalizer: a bijection of 64-bit words whose outputs pass as independent
uint64_t splitmix64(uint64_t x);

// the seed given, or a random one
uint64_t seed_or_random(const std::optional<uint64_t> & seed);

// one draw from dist by the Gumbel-max trick with noise that is a function of (key, pos, token):
// argmax over the support of log p(t) + G(key, pos, t), G standard Gumbel from a hash. A draw from
// dist for each (key, pos), independent across positions; two distributions drawn at one key and
// position pick the same token as often as Gumbel-max coupling allows (always where they are equal)
llama_token sample_keyed(const token_dist & dist, uint64_t key, int64_t pos);

}  // namespace specllama
