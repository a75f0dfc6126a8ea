// speculative/prediction.h: a prediction of the output that comes with the request (OpenAI's Predicted
// Outputs: the file an edit rewrites, most of which the reply repeats). Where the output so far follows
// it, the prediction's next tokens are proposed as drafts that cost no draft decode; where the output
// leaves it (an edit), its last few tokens are looked for again in the prediction, after the place it
// left first. A deterministic proposal (q one-hot): the acceptance rule keeps the output the target's.
// Not here: prompt lookup, which matches the context (lookup.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama.h"

namespace specllama {

// throws std::invalid_argument where a prediction's token is outside a vocabulary of n_vocab
void prediction_validate(const std::vector<llama_token> & prediction, int32_t n_vocab);

class prediction_tracker {
public:
    // a new generation whose output begins after n_prompt tokens; an empty prediction proposes nothing
    void reset(const std::vector<llama_token> & prediction, int32_t n_prompt);
    bool empty() const { return tokens_.empty(); }
    // follow the output to seq's end (seq: the prompt, then the output); whether the prediction has
    // tokens to propose after it
    bool follows(const std::vector<llama_token> & seq);
    // append to out up to n_max of the prediction's tokens that come after seq and then out's own
    // drafts (none where those drafts leave it); returns how many
    int32_t draft(const std::vector<llama_token> & seq, int32_t n_max, std::vector<llama_token> & out);

    // the longest suffix of the output looked for where it left the prediction, and the shortest
    static constexpr int32_t k_ngram_max = 8;
    static constexpr int32_t k_ngram_min = 3;

private:
    // where the output's last k_ngram_max..k_ngram_min tokens occur in the prediction: the nearest
    // occurrence after left_, else the nearest before it; the index after it, or -1
    int32_t find(const std::vector<llama_token> & seq) const;

    std::vector<llama_token> tokens_;
    int32_t                  n_prompt_ = 0;
    int32_t                  n_seen_   = 0;   // seq's tokens followed
    int32_t                  next_     = 0;   // the prediction's token the output's next should be; -1: it left
    int32_t                  left_     = 0;   // where it last left the prediction
    int32_t                  n_looked_ = -1;  // seq's length when find() last looked (and found nothing)
};

}  // namespace specllama
