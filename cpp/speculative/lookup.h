// speculative/lookup.h: prompt lookup, a drafter without a draft model. When the text repeats itself or
// quotes its prompt (summaries, code edits), the tokens after an earlier occurrence of the last
// few tokens are a good guess at what comes next, and cost nothing to propose.
// Not here: the draft model (drafting.h).
#pragma once

#include <cstdint>
#include <vector>

#include "llama.h"

namespace specllama {

struct lookup_params {
    int32_t ngram_max = 4;  // longest suffix to look for
    int32_t ngram_min = 2;  // shortest; a single token matches too often to be worth a draft
};

// append to out up to n_max tokens that followed the latest earlier occurrence of seq's last
// n-gram (longest n first); returns how many were appended
int32_t lookup_draft(const std::vector<llama_token> & seq, int32_t n_max, const lookup_params & params,
                     std::vector<llama_token> & out);

}  // namespace specllama
