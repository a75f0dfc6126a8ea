// speculative/prediction.cpp: following the output through a prediction of it.
#include "speculative/prediction.h"

#include <algorithm>

namespace specllama {

void prediction_validate(const std::vector<llama_token> & prediction, int32_t n_vocab) {
    for (const llama_token t : prediction) {
        if (t < 0 || t >= n_vocab) {
            throw std::invalid_argument("prediction token id " + std::to_string(t) + " outside the vocabulary of " +
                                        std::to_string(n_vocab));
        }
    }
}

void prediction_tracker::reset(const std::vector<llama_token> & prediction, int32_t n_prompt) {
    tokens_.assign(prediction.begin(), prediction.end());
    n_prompt_ = n_prompt;
    n_seen_   = n_prompt;
    next_     = 0;  // (the output begins where the prediction does)
    left_     = 0;
    n_looked_ = -1;
}

bool prediction_tracker::follows(const std::vector<llama_token> & seq) {
    const int32_t n_tokens = (int32_t) tokens_.size();
    if (n_tokens == 0) {
        return false;
    }
    const int32_t n_seq = (int32_t) seq.size();
    for (int32_t i = std::max(n_seen_, n_prompt_); i < n_seq; ++i) {
        if (next_ >= 0 && next_ < n_tokens && tokens_[next_] == seq[i]) {
            ++next_;
        } else if (next_ >= 0) {
            left_ = next_;
            next_ = -1;
        }
    }
    n_seen_ = std::max(n_seen_, n_seq);
    if (next_ < 0 && n_looked_ != n_seq) {  // (once per length: the step's plan and its drafts ask alike)
        next_     = find(seq);
        n_looked_ = n_seq;
    }
    return next_ >= 0 && next_ < n_tokens;
}

int32_t prediction_tracker::find(const std::vector<llama_token> & seq) const {
    const int32_t n_out    = (int32_t) seq.size() - n_prompt_;
    const int32_t n_tokens = (int32_t) tokens_.size();
    for (int32_t ng = std::min(k_ngram_max, n_out); ng >= k_ngram_min; --ng) {
        const llama_token * suffix = seq.data() + seq.size() - ng;
        int32_t             best   = -1;
        for (int32_t j = 0; j + ng <= n_tokens; ++j) {
            if (!std::equal(suffix, suffix + ng, tokens_.data() + j)) {
                continue;
            }
            const int32_t after = j + ng;
            if (after >= left_) {  // (the first occurrence after where it left: the nearest)
                best = after;
                break;
            }
            best = after;  // (the last one before it so far: the nearest before)
        }
        if (best >= 0) {
            return best;
        }
    }
    return -1;
}

int32_t prediction_tracker::draft(const std::vector<llama_token> & seq, int32_t n_max, std::vector<llama_token> & out) {
    if (n_max <= (int32_t) out.size() || !follows(seq)) {
        return 0;
    }
    const int32_t n_tokens = (int32_t) tokens_.size();
    int32_t       at       = next_;
    for (const llama_token t : out) {  // (drafts before these: the model's, a grammar's forced text)
        if (at >= n_tokens || tokens_[at] != t) {
            return 0;
        }
        ++at;
    }
    const int32_t n = std::min(n_max - (int32_t) out.size(), n_tokens - at);
    out.insert(out.end(), tokens_.begin() + at, tokens_.begin() + at + n);
    return n;
}

}  // namespace specllama
