// drafting.cpp: autoregressive drafting with the draft model.
#include "drafting.h"

namespace specllama {

void model_drafter::catch_up(const std::vector<llama_token> & seq, const std::function<void()> & between_chunks) {
    // keep what the cache shares with seq, but decode at least the last token: its logits are q_1
    const int32_t n_common = cache_.keep_common_prefix(seq, (int32_t) seq.size() - 1);
    cache_.decode(seq.data() + n_common, (int32_t) seq.size() - n_common, false, nullptr, between_chunks);
}

void model_drafter::draft(const std::vector<llama_token> & seq, int32_t n_draft, const sampling_params & params,
                          rng_t & rng, draft_result & out, const std::function<void()> & between_chunks) {
    out.tokens.clear();
    if (n_draft <= 0 || seq.empty()) {
        return;
    }
    catch_up(seq, between_chunks);

    const int32_t     n_vocab = cache_.n_vocab();
    const llama_vocab * vocab = cache_.mdl().vocab;
    if ((int32_t) out.dists.size() < n_draft) {
        out.dists.resize(n_draft);
    }
    for (int32_t i = 0; i < n_draft; ++i) {
        const float * logits = cache_.logits(0);
        llama_token   tok;
        if (params.greedy()) {
            tok = argmax(logits, n_vocab);
        } else {
            sampling_distribution(logits, n_vocab, params, out.dists[i]);
            tok = sample(out.dists[i], rng);
        }
        out.tokens.push_back(tok);
        // the last draft is not decoded here: the target verifies it, and the next step feeds it
        // to the draft together with the target's token if it is kept
        if (i + 1 == n_draft || llama_vocab_is_eog(vocab, tok) || cache_.n_past() >= cache_.n_ctx()) {
            break;
        }
        cache_.decode(&tok, 1, false);
    }
}

}  // namespace specllama
