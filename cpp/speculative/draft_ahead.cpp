// speculative/draft_ahead.cpp: drafting while the target verifies (generate_params::draft_ahead).
// A step's verification is launched; before its results are read, the draft model reads its last
// draft (a step that keeps every draft needs it read anyway) and drafts on as if every draft were
// kept: its guess of the target's own next token, then drafts after that guess. Where the step
// keeps every draft and the target's token is the guess, the draft's cache already holds what the
// next step's drafts follow, and the next step starts with those drafts made. Elsewhere they are
// dropped, and the next step's catch-up drops their cells.
//
// Exactness: every draft the rejection rule judges was drawn from the q kept beside it, with the
// draft's own draws, before the target's draws that judge it; a later step's drafts come from
// q given the text the target emitted before them. The rule keeps the target's distribution
// whatever q is (acceptance.h), so drafts made ahead keep it too.
#include "speculative/decoder.h"

#include <algorithm>

namespace specllama {

namespace {

// out = seq followed by drafts
void with_drafts(std::vector<llama_token> & out, const std::vector<llama_token> & seq,
                 const std::vector<llama_token> & drafts) {
    out.assign(seq.begin(), seq.end());
    out.insert(out.end(), drafts.begin(), drafts.end());
}

}  // namespace

void decoder::draft_ahead_validate(const generate_params & params, const run_plan & plan) const {
    const auto refuse = [](const std::string & why) {
        throw std::invalid_argument("draft_ahead " + why + " (draft_ahead=0 turns it off)");
    };
    if (params.mode != decode_mode::si) {
        refuse("is for mode 'si' (DSI's drafter never waits for verification)");
    }
    if (!plan.use_model) {
        refuse("needs the draft model drafting (drafter 'model' or 'model+lookup', speculative=True)");
    }
    if (plan.adaptive) {
        refuse("needs fixed draft lengths: pass adaptive=False");
    }
    if (vocab_map_) {
        refuse("needs a draft with the target's vocabulary; this draft's differs");
    }
    if (!params.grammar.empty()) {
        refuse("is not available with a grammar");
    }
    if (plan.use_prediction) {
        refuse("is not available with a prediction");
    }
    if (batcher_) {
        refuse("is not available in a slot (the slots' decodes are merged)");
    }
    if (dft_cache_->recurrent()) {
        refuse("needs a draft whose cache drops a tail; this draft's state is recurrent");
    }
}

void decoder::draft_ahead(const std::vector<llama_token> & seq, int32_t n, const generate_params & params,
                          rng_t & rng, generate_stats & st, const interrupt_check & check) {
    ahead_.clear();
    if (!drafted_.tokens.empty() && target_->is_eog(drafted_.tokens.back())) {
        return;  // (nothing follows a drafted end token)
    }
    with_drafts(ahead_seq_, seq, drafted_.tokens);
    drafter_->draft(ahead_seq_, n, params.sampling, rng, ahead_, nullptr, check);
    st.n_ahead_drafted += (int32_t) ahead_.tokens.size();
}

int32_t decoder::take_ahead(int32_t n_max, generate_stats & st) {
    if (!ahead_hit_) {
        return 0;
    }
    ahead_hit_      = false;
    const int32_t n = std::min((int32_t) ahead_.tokens.size() - 1, n_max);  // (the first was the target's token)
    if (n <= 0) {
        return 0;
    }
    drafted_.take(ahead_, 1, n);
    st.n_ahead_used += n;
    return n;
}

void decoder::draft_after_taken(const std::vector<llama_token> & dseq, int32_t n_max, const generate_params & params,
                                rng_t & rng, const draft_continue & keep, const interrupt_check & check) {
    with_drafts(ahead_seq_, dseq, drafted_.tokens);
    drafter_->draft(ahead_seq_, n_max - (int32_t) drafted_.tokens.size(), params.sampling, rng, more_, keep, check);
    drafted_.take(more_, 0, (int32_t) more_.tokens.size());
    drafted_.n_decodes   = more_.n_decodes;
    drafted_.n_catch_up  = more_.n_catch_up;
    drafted_.catch_up_ms = more_.catch_up_ms;
    drafted_.sample_ms   = more_.sample_ms;
}

}  // namespace specllama
