// speculative/acceptance.h: which drafted tokens the target keeps, and the token it emits after them.
// Greedy: keep drafts while they equal the target's argmax. Sampling: the rejection rule of
// Leviathan et al. / Chen et al.: keep d_i with probability min(1, p_i(d_i) / q_i(d_i)); at the
// first rejection emit a draw from norm(max(0, p_i - q_i)); if every draft is kept, emit a bonus
// draw from p_{n+1}. The emitted tokens then follow p exactly, whatever q is.
// Not here: how p and q are made (sampling.h), drafting (drafting.h).
#pragma once

#include <functional>
#include <vector>

#include "sampling/sampling.h"

namespace specllama {

struct acceptance_result {
    int32_t     n_accepted = 0;   // drafts kept, 0..n_draft
    llama_token next       = -1;  // the correction (after a rejection) or bonus (all kept) token
};

// The target's choices and distributions are asked for by position (0..n_draft, after each prefix
// of the drafts), in order and only as far as the rule reads them: positions after the first
// rejection are never computed. The rules draw the same random numbers either way.
using target_choice = std::function<llama_token(int32_t i)>;
using target_dist   = std::function<const token_dist &(int32_t i)>;

// target_argmax(i): the target's choice after prefix i
acceptance_result accept_greedy(const llama_token * draft, int32_t n_draft, const target_choice & target_argmax);

// reusable buffers for accept_sampled (avoids a vocabulary-sized allocation per step)
struct acceptance_scratch {
    std::vector<float> q_dense;     // q of the rejected position, scattered by token id
    token_dist         residual;
};

// q has n_draft entries (the draft's distributions, draft[i] drawn from q[i]); p(i) for i in 0..n_draft
acceptance_result accept_sampled(const llama_token * draft, int32_t n_draft, const std::vector<token_dist> & q,
                                 const target_dist & p, int32_t n_vocab, rng_t & rng, acceptance_scratch & scratch);
// p has n_draft + 1 entries
acceptance_result accept_sampled(const llama_token * draft, int32_t n_draft, const std::vector<token_dist> & q,
                                 const std::vector<token_dist> & p, int32_t n_vocab, rng_t & rng,
                                 acceptance_scratch & scratch);

// one position of the rule above: keep x (drawn from q) with probability min(1, p(x)/q(x)) and
// return true, or return false with a draw from norm(max(0, p - q)) in correction. DSI applies it
// position by position as verification results arrive.
bool accept_one_sampled(llama_token x, const token_dist & q, const token_dist & p, int32_t n_vocab, rng_t & rng,
                        acceptance_scratch & scratch, llama_token & correction);

// sample-and-match (llama.cpp's server and speculative-simple): the target samples each position
// from p_i on its own and a draft is kept only if it equals that sample. Also lossless, but it
// keeps a draft with probability sum p*q instead of sum min(p, q). For comparison.
acceptance_result accept_match(const llama_token * draft, int32_t n_draft, const target_dist & p, rng_t & rng);
acceptance_result accept_match(const llama_token * draft, int32_t n_draft, const std::vector<token_dist> & p,
                               rng_t & rng);

// sample-and-match with draws keyed by position (sample_keyed; Daliri et al., drafter-invariant
// speculative decoding): the target's token at position pos0 + i is sample_keyed(p_i, key, pos0 + i),
// a draft is kept if it equals it. Drafts drawn from q at the same key and positions are kept as often
// as Gumbel-max coupling makes them equal (at least (1 - tv) / (1 + tv) of the time, all of it where
// q = p). What is emitted at a position depends on the key, the position and p there, not on the
// drafts: the same tokens plain decoding draws with that key.
acceptance_result accept_keyed(const llama_token * draft, int32_t n_draft, const target_dist & p, uint64_t key,
                               int64_t pos0);
acceptance_result accept_keyed(const llama_token * draft, int32_t n_draft, const std::vector<token_dist> & p,
                               uint64_t key, int64_t pos0);

}  // namespace specllama
