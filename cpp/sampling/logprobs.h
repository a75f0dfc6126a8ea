// sampling/logprobs.h: an emitted token's log-probability and the likeliest tokens at its position,
// from the distribution it was drawn from (OpenAI's logprobs and top_logprobs).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "llama.h"
#include "sampling/sampling.h"

namespace specllama {

// log p(token) in dist, and the k likeliest tokens of dist with their log-probabilities, most
// likely first (ties by token id)
void dist_logprobs(const token_dist & dist, llama_token token, int32_t k, float & logprob,
                   std::vector<std::pair<llama_token, float>> & top);

// the same under the softmax of a row of logits (where greedy decoding draws no distribution)
void row_logprobs(const float * logits, int32_t n_vocab, llama_token token, int32_t k, float & logprob,
                  std::vector<std::pair<llama_token, float>> & top);

}  // namespace specllama
