// sampling/vocab_scan.h: the scans over a whole row of logits that the per-token loop needs (151,936
// floats for the Qwen vocabulary, at every drafted and every verified position): the most likely
// token, the two most likely, and the k most likely. Each reads the row in blocks and looks closer
// only at a block whose largest logit beats what it holds so far, so that a row costs about one
// vectorized pass of comparisons. Ties go to the lowest id, as everywhere in sampling.h.
#pragma once

#include <cstdint>
#include <vector>

#include "llama.h"

namespace specllama {

// the most likely token (the lowest id among equal logits)
llama_token argmax(const float * logits, int32_t n_vocab);

// the most likely token, its logit l1, and the runner-up's logit l2 (-inf with one token)
llama_token top_two(const float * logits, int32_t n_vocab, float & l1, float & l2);

// the k most likely tokens (1 <= k <= n_vocab), most likely first (equal logits: lower id first)
void top_k(const float * logits, int32_t n_vocab, int32_t k, std::vector<llama_token> & ids);

}  // namespace specllama
