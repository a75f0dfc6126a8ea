// drafting.cpp: autoregressive drafting with the draft model.
#include "drafting.h"

#include "softmax.h"

namespace specllama {

void model_drafter::catch_up(const std::vector<llama_token> & seq, const std::function<void()> & between_chunks) {
    // keep what the cache shares with seq, but decode at least the last token: its logits are q_1
    const int32_t n_common = cache_.keep_common_prefix(seq, (int32_t) seq.size() - 1);
    cache_.decode(seq.data() + n_common, (int32_t) seq.size() - n_common, false, nullptr, between_chunks);
}

namespace {

// softmax probability of the most likely token
float top_prob(const float * logits, int32_t n_vocab, llama_token top) {
    return 1.0f / sum_exp(logits, n_vocab, logits[top]);
}

}  // namespace

void model_drafter::draft(const std::vector<llama_token> & seq, int32_t n_draft, const sampling_params & params,
                          rng_t & rng, draft_result & out, const draft_continue & keep_going,
                          const std::function<void()> & between_chunks) {
    out.tokens.clear();
    out.conf.clear();
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
        float         conf;
        if (params.greedy()) {
            tok  = argmax(logits, n_vocab);
            conf = top_prob(logits, n_vocab, tok);
        } else {
            sampling_distribution(logits, n_vocab, params, out.dists[i]);
            tok  = sample(out.dists[i], rng);
            conf = out.dists[i].prob_of(tok);
        }
        out.tokens.push_back(tok);
        out.conf.push_back(conf);
        // the last draft is not decoded here: the target verifies it, and the next step feeds it
        // to the draft together with the target's token if it is kept
        if (i + 1 == n_draft || llama_vocab_is_eog(vocab, tok) || cache_.n_past() >= cache_.n_ctx()) {
            break;
        }
        if (keep_going && !keep_going(i + 1, conf)) {
            break;
        }
        cache_.decode(&tok, 1, false);
    }
}

}  // namespace specllama
