// speculative/decoder_drafts.cpp: a step's drafts: how many the step may draft (the adaptive rule,
// the slots' shared cap), the draft model's and the grammar's forced drafts, prompt lookup's, and
// what the step tells the adaptive rule afterwards; and the draft's read of the prompt.
#include "speculative/decoder.h"

#include "sampling/grammar.h"

#include <algorithm>

namespace specllama {

decoder::step_plan decoder::plan_step(const run_plan & plan, const generate_params & params,
                                      const std::vector<llama_token> & seq, generate_stats & st) {
    read_               = false;  // (what the trace reports of a read: none unless read_probe makes one)
    read_result_        = {};
    read_ms_            = 0.0;
    const int32_t n_seq = (int32_t) seq.size();
    // the batch [last, d_1..d_n] takes positions n_seq - 1 .. n_seq - 1 + n
    const int32_t room      = tgt_cache_->n_ctx() - n_seq;
    const int32_t remaining = params.max_tokens - st.n_generated;
    if (repad_ && lengths_.knows_draft_prices()) {
        // (a generation that began unpriced: its verifications' length from the measured prices)
        repad_  = false;
        pad_to_ = adaptive_pad(plan.n_draft);
        lengths_.set_padded(pad_to_);
    }
    step_plan     step;
    // the first step is plain: its token comes as soon as the prompt is in (the time to first
    // token of a stream), where drafting first would add the drafts' and a longer batch's time
    if ((plan.use_model || plan.use_lookup || plan.use_prediction) && st.n_steps > 0) {
        step.n_max = std::max(0, std::min({plan.n_draft, room, remaining - 1}));
        if (pad_to_ > 0) {
            step.n_max = std::min(step.n_max, pad_to_ - 1);  // (a padded verification's drafts)
        }
    }
    // the adaptive rule compares drafting with plain steps: it prices those first, and then
    // leaves the draft model out of steps while drafting does not pay (draft_length.h)
    // where the output follows the request's prediction, its tokens draft this step instead of the model
    const bool predicted    = plan.use_prediction && step.n_max > 0 && prediction_.follows(seq);
    const bool model_wanted = step.n_max > 0 && plan.use_model && !predicted;
    const bool pricing      = lengths_.pricing(plan.adaptive);
    if (model_sits_out_ && st.n_generated >= read_after_) {
        model_sits_out_     = false;  // (a generation that sat out for now has run long enough: the draft reads)
        draft_prompt_later_ = true;
    }
    step.model              = model_wanted && !pricing && !model_sits_out_ && lengths_.model_drafts(plan.adaptive);
    if (step.model && plan.adaptive && lengths_.read_due()) {
        step.model = read_probe(seq, params, st);  // (called off: the step is plain)
    }
    // slots that share their decodes: while several generate, the group prices their merged
    // rounds and caps the draft length (batch_drafting.h); given prices keep the loop deterministic.
    // Seeded sampling drafts fixed lengths so that its output is reproducible, but while several
    // slots generate the merged decodes already make it depend on the other requests: the cap
    // applies there too, unless adaptive=False was asked for
    const bool group_caps = batcher_ && !params.prices && params.adaptive.value_or(true);
    if (step.model && group_caps) {
        const int32_t n_gen = batcher_->n_generating();
        int32_t       cap   = batcher_->drafting().cap(n_gen, step.n_max, tgt_cache_->seq());
        // a draft that fell behind (the prompt, or steps it sat out) reads that first: only where the
        // rest of this generation wins it back. Counted from the cache's length, or from what it held
        // of the prompt (prefill): no scan of seq per step. Not a drafting step's own catch-up (the
        // last step's tokens, priced in the round's draft decodes); a draft that copies the target's
        // cache reads nothing
        if (cap > 0 && !share_prefill_) {
            const int32_t held   = draft_prompt_later_ ? draft_held_ : dft_cache_->n_past();
            const int32_t behind = (int32_t) draft_seq(seq).size() - 1 - held;
            if (!batcher_->drafting().catch_up_pays(n_gen, cap, behind - (plan.n_draft + 1), remaining)) {
                cap = 0;
            }
        }
        step.model        = cap > 0;
        step.n_max        = cap > 0 ? cap : step.n_max;  // (prompt lookup may still fill a plain step)
    }
    // and prompt lookup's drafts in a step without model drafts: each adds to the merged verification
    if (!step.model && step.n_max > 0 && (plan.use_lookup || predicted) && group_caps) {
        step.n_max = batcher_->drafting().lookup_cap(batcher_->n_generating(), step.n_max);
    }
    st.n_paused_steps += model_wanted && !pricing && !step.model;  // (pricing steps are not pauses)
    if (pricing) {
        step.n_max = 0;
    }
    return step;
}

void decoder::begin_reads(const generate_params & params, const run_plan & plan) {
    read_p_.clear();
    // where a probe's drafting steps are transitions: a draft of the target's vocabulary in a context of its own,
    // its choice bent by no grammar or control; sampled, under the rejection rule (model_drafter::read)
    const bool judged = params.sampling.greedy() || effective_rule(params) == accept_rule::rejection;
    lengths_.set_read_probes(params_.probe_reads && plan.adaptive && plan.use_model && lengths_.settle_steps() > 0 &&
                             judged && params.sampling.grammar == nullptr && params.sampling.controls == nullptr &&
                             !view_ && !batcher_);
}

bool decoder::read_probe(const std::vector<llama_token> & seq, const generate_params & params, generate_stats & st) {
    const auto    t0     = clock_type::now();
    const int32_t n_last = (int32_t) seq.size() - 1;
    const int32_t behind = n_last - dft_cache_->common_prefix(seq, n_last);
    // (what a probe's catch-up would read: the last k_probe_window tokens, or all of a new text's)
    const int32_t window = lengths_.probe_window(behind, params.max_tokens - st.n_generated);
    const auto p_of = [&](int32_t i) { return i < (int32_t) read_p_.size() ? read_p_[i] : 0.0f; };
    const model_drafter::read_result r = drafter_->read(seq, window, params.sampling, p_of);
    // (at given prices, one draft decode: what the rule is told is then the same on any machine)
    const double  ms     = params.prices ? params.prices->draft_ms : ms_since(t0);
    st.t_draft_ms += ms_since(t0);
    st.n_probe_reads += 1;
    st.n_window_catch_ups += r.windowed;
    const bool drafts = lengths_.observe_read(r.n, r.foretold, ms, params.max_tokens - st.n_generated);
    st.n_probe_reads_off += !drafts;
    read_        = true;
    read_result_ = r;
    read_ms_     = ms;
    return drafts;
}

int32_t decoder::draft_step(const std::vector<llama_token> & seq, const step_plan & step, const run_plan & plan,
                            const generate_params & params, rng_t & rng, llama_token & probe, generate_stats & st,
                            const interrupt_check & check) {
    drafted_.clear();
    grammar_track * grammar = params.sampling.grammar;
    if (grammar != nullptr) {
        grammar->begin_step();
    }
    if (step.model) {
        double          p_reach = 1.0;
        double          p_fixed = 1.0;
        draft_continue  keep    = [&](int32_t n_done, float, draft_ask ask) {
            return ask != draft_ask::before_forced || keep_forced(n_done, p_fixed, step.n_max, false);
        };
        if (plan.adaptive) {
            keep = [&](int32_t n_done, float conf, draft_ask ask) {
                switch (ask) {
                    case draft_ask::after_model:
                        return lengths_.keep_drafting(n_done, conf, p_reach, step.n_max);
                    case draft_ask::before_forced:
                        return keep_forced(n_done, p_reach, step.n_max, true);
                    case draft_ask::after_forced:
                        break;
                }
                return lengths_.keep_going(n_done, p_reach, step.n_max);
            };
        }
        // after the model sat out steps that brought more tokens than one step can, its catch-up
        // may copy the target's cache instead (model_drafter::catch_up); never after a drafted
        // step, so that what is measured of a draft is the draft's
        const auto                       t_view = clock_type::now();
        const std::vector<llama_token> & dseq   = draft_seq(seq);
        st.t_vocab_ms += view_ ? ms_since(t_view) : 0.0;
        const int32_t n_taken = take_ahead(step.n_max, st);  // (drafts made during the last verification)
        if (n_taken == 0) {
            // what the draft lacks, counted from the prefix it shares with seq (after a pause that began in an
            // earlier generation it holds that text, and a new prompt may be shorter than it): more than one
            // step brings is a resumption
            const int32_t n_end       = (int32_t) dseq.size() - 1;
            const int32_t behind      = n_end - dft_cache_->common_prefix(dseq, n_end);
            const bool    after_pause = behind > plan.n_draft;
            drafter_->draft(dseq, step.n_max, params.sampling, rng, drafted_, keep, check,
                            share_prefill_ && after_pause ? tgt_cache_.get() : nullptr,
                            plan.adaptive && lengths_.probing()
                                ? lengths_.probe_window(behind, params.max_tokens - st.n_generated)
                                : 0,
                            &seq);
            drafted_.resumed = after_pause;
        } else if (n_taken < step.n_max && !target_->is_eog(drafted_.tokens.back())) {
            draft_after_taken(dseq, step.n_max, params, rng, keep, check);
        }
        st.n_resume_shared += drafted_.n_copied;
        st.n_window_catch_ups += drafted_.windowed;
        st.t_vocab_ms += drafted_.vocab_ms;
        st.t_draft_sample_ms += drafted_.sample_ms;
    }
    // a step without the draft model still proposes the text the grammar forces (no decode needed);
    // prompt lookup may follow it
    const int32_t n_model = (int32_t) drafted_.tokens.size();
    if (!step.model && step.n_max > 0 && grammar != nullptr && !batcher_) {
        double p_reach = 1.0;
        add_forced_drafts(*grammar, step.n_max, drafted_,
                          [&](int32_t n_done) { return keep_forced(n_done, p_reach, step.n_max, plan.adaptive); },
                          forced_);
    }
    // the prediction's drafts, then prompt lookup's: alone, or after the draft model stopped short (not after
    // a drafted end token)
    const int32_t n_first = (int32_t) drafted_.tokens.size();
    const bool    go_on   = n_first == 0 || !target_->is_eog(drafted_.tokens.back());
    pred_first_ = n_first;
    n_pred_     = 0;
    if (step.n_max > n_first && plan.use_prediction && go_on) {
        add_prediction_drafts(seq, step.n_max);
    }
    const int32_t n_lookup_from = (int32_t) drafted_.tokens.size();
    if (step.n_max > n_lookup_from && plan.use_lookup && go_on) {
        st.n_lookup_drafted += add_lookup_drafts(seq, step.n_max, plan.adaptive, params.lookup, probe);
    }
    if (grammar != nullptr) {  // the prediction's and lookup's drafts up to the first the grammar rejects (p = 0)
        int32_t keep = n_first;
        while (keep < (int32_t) drafted_.tokens.size() && grammar->push(drafted_.tokens[keep])) {
            ++keep;
        }
        st.n_lookup_drafted -= (int32_t) drafted_.tokens.size() - std::max(keep, n_lookup_from);
        n_pred_ = std::min(n_pred_, keep - n_first);
        drafted_.tokens.resize(keep);
        drafted_.conf.resize(std::min<size_t>(drafted_.conf.size(), keep));
    }
    st.n_prediction_drafted += n_pred_;
    drafted_.forced.resize(drafted_.tokens.size(), 0);  // (lookup's drafts are not forced)
    return n_model;
}

bool decoder::keep_forced(int32_t n_done, double & p_reach, int32_t n_max, bool adaptive) const {
    // a forced draft costs no draft decode, only its place in the verification (and, where it is
    // rejected, the model's drafts after it)
    const double p = forced_accept_prob();
    if (!adaptive) {
        return p >= k_forced_min_accept;
    }
    if (!lengths_.keep_going_p(n_done, p_reach, p, false, n_max)) {
        return false;
    }
    p_reach *= p;
    return true;
}

void decoder::add_prediction_drafts(const std::vector<llama_token> & seq, int32_t n_max) {
    const int32_t n_before = (int32_t) drafted_.tokens.size();
    n_pred_                = prediction_.draft(seq, n_max, drafted_.tokens);
    drafted_.set_deterministic(n_before);
}

void decoder::count_verified(const acceptance_result & acc, int32_t n_model, generate_stats & st) {
    // every forced draft the target looked at: the kept ones and a first rejected one
    constexpr double decay = 0.95;
    const int32_t    n     = (int32_t) drafted_.tokens.size();
    for (int32_t i = 0; i <= acc.n_accepted && i < n; ++i) {
        if (drafted_.forced[i]) {
            const bool kept = i < acc.n_accepted;
            st.n_forced_accepted += kept;
            forced_kept_ = decay * forced_kept_ + (kept ? 1.0 : 0.0);
            forced_seen_ = decay * forced_seen_ + 1.0;
        }
    }
    st.n_prediction_accepted += std::clamp(acc.n_accepted - pred_first_, 0, n_pred_);
    const int32_t n_forced = drafted_.n_forced();
    st.n_forced_drafted += n_forced;
    // (forced drafts come before the prediction's and lookup's; for the slots' cap the prediction's count as
    // lookup's: drafts that cost no draft decode)
    const int32_t n_free_from = n_model > 0 ? n_model : n_forced;
    st.n_lookup_accepted += std::max(0, acc.n_accepted - (n_free_from + n_pred_));
    if (batcher_) {
        batcher_->drafting().observe_verified(n_model, n_free_from, n, acc.n_accepted);
    }
}

int32_t decoder::add_lookup_drafts(const std::vector<llama_token> & seq, int32_t n_max, bool adaptive,
                                   const lookup_params & params, llama_token & probe) {
    const int32_t n_model = (int32_t) drafted_.tokens.size();
    lookup_seq_.assign(seq.begin(), seq.end());
    lookup_seq_.insert(lookup_seq_.end(), drafted_.tokens.begin(), drafted_.tokens.end());
    int32_t n_found = lookup_draft(lookup_seq_, n_max - n_model, params, drafted_.tokens);
    if (adaptive && n_found > 0) {
        // keep the lookup tokens that pay, judged like model drafts but costing no draft decode
        double p_reach = 1.0;
        for (int32_t i = 0; i < n_model; ++i) {
            const bool predicted = i >= pred_first_ && i < pred_first_ + n_pred_;  // (all of it kept, as asserted)
            p_reach *= predicted ? 1.0 : lengths_.accept_prob(drafted_.conf[i]);
        }
        const double p_lookup = lengths_.lookup_accept_prob();
        int32_t      n_keep   = 0;
        while (n_keep < n_found && lengths_.keep_going_p(n_model + n_keep, p_reach, p_lookup, false, n_max)) {
            p_reach *= p_lookup;
            ++n_keep;
        }
        // the first dropped proposal is still judged, for free: if everything before it is
        // accepted, the target's own next token says whether it would have been kept
        probe = n_keep < n_found ? drafted_.tokens[n_model + n_keep] : -1;
        drafted_.tokens.resize(n_model + n_keep);
        n_found = n_keep;
    }
    drafted_.set_deterministic(n_model);
    return n_found;
}

void decoder::observe_step(int32_t n_model, int32_t n, const acceptance_result & acc, llama_token probe,
                           double draft_ms, double verify_ms, int32_t prev_n, int32_t n_prompt,
                           const std::optional<step_prices> & prices, bool price) {
    step_record & r = record_;
    r.n_model       = n_model;
    r.n             = n;
    r.n_accepted    = acc.n_accepted;
    r.conf.assign(drafted_.conf.begin(), drafted_.conf.begin() + n_model);
    r.forced.assign(drafted_.forced.begin(), drafted_.forced.end());
    std::fill_n(r.forced.begin() + pred_first_, n_pred_, 1);  // (the prediction's: neither the model's nor lookup's)
    r.given = n_pred_ > 0;
    r.n_decodes  = n_model > 0 ? drafted_.n_decodes : 0;
    r.n_catch_up = n_model > 0 ? drafted_.n_catch_up : 0;
    r.n_verified = (int32_t) batch_.size();  // (the verification's batch: padded or not)
    r.probe       = probe < 0 ? -1 : acc.next == probe ? 1 : 0;
    r.catch_up_ms = drafted_.catch_up_ms;
    r.resumed     = n_model > 0 && drafted_.resumed;
    r.draft_ms    = draft_ms;
    r.verify_ms   = verify_ms;
    r.prev_n      = prev_n;
    r.n_prompt    = prices ? 0 : n_prompt;  // (prices price the prompt apart: prefill)
    if (prices) {
        const int32_t n_catch_up = std::max(1, r.n_catch_up);
        r.catch_up_ms = n_model > 0 ? n_catch_up * prices->draft_ms : 0.0;
        r.draft_ms    = n_model > 0 ? (n_catch_up + r.n_decodes) * prices->draft_ms : 0.0;
        r.verify_ms   = prices->verify_ms + (r.n_verified - 1) * prices->verify_token_ms;
    }
    const int64_t probes = thread_probes();
    const bool    probed = probes != probes_seen_ && !prices;
    probes_seen_         = probes;
    follow_target_threads();
    if (price && !probed) {
        lengths_.observe(r);
    }
}

// the draft's read of the sequence it lacks, before the first step it drafts in (decoder::prefill decides when)
void decoder::draft_prompt(const std::vector<llama_token> & seq, const run_plan & plan, const generate_params & params,
                           generate_stats & st, const interrupt_check & check) {
    draft_prompt_later_ = false;
    // (the target's cache holds all of seq but its last token, as after every step: the draft may copy it)
    const std::vector<llama_token> & dseq        = draft_seq(seq);
    const int32_t                    n_draft_new = draft_unread(dseq, params.cache_reuse);
    const auto                       t_d         = clock_type::now();
    const int32_t n_shared = drafter_->prefill(dseq, check, share_prefill_ ? tgt_cache_.get() : nullptr, params.cache_reuse);
    const double  ms       = ms_since(t_d);
    // (what it copied beyond the prompt came after it: the tokens of steps it did not draft in)
    st.n_prompt_shared = std::min(n_shared, st.n_prompt);
    st.n_resume_shared += n_shared - st.n_prompt_shared;
    // (its price per token prices a probe's catch-up, where a pause comes before any probe)
    if (plan.adaptive && !batcher_ && n_shared == 0) {
        lengths_.observe_draft_prompt(n_draft_new, params.prices ? n_draft_new * params.prices->draft_ms : ms);
    }
    st.t_prefill_ms += ms;  // (prompt processing, not the generation's)
}

}  // namespace specllama
