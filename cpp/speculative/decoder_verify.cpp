// speculative/decoder_verify.cpp: a step's verification: the target decodes the last token and the
// drafts (padded where the verification shape is fixed), the acceptance rule reads its rows (on the
// device's candidates or the host's logits, after the controls and the grammar), log-probabilities
// are taken, the target's cache is rolled back to what was kept; then what the step emits.
#include "speculative/decoder.h"

#include "sampling/grammar.h"
#include "sampling/logprobs.h"

namespace specllama {

acceptance_result decoder::verify_and_accept(const std::vector<llama_token> & seq, const generate_params & params,
                                             rng_t & rng, double & verify_ms, generate_stats & st,
                                             const std::function<void()> & meanwhile, const interrupt_check & check) {
    const int32_t n     = (int32_t) drafted_.tokens.size();
    const int32_t n_seq = (int32_t) seq.size();
    auto          t     = clock_type::now();
    batch_.assign(1, seq.back());
    batch_.insert(batch_.end(), drafted_.tokens.begin(), drafted_.tokens.end());
    if (n > 0 && pad_to_ > (int32_t) batch_.size() && n_seq - 1 + pad_to_ <= tgt_cache_->n_ctx()) {
        batch_.resize(pad_to_, batch_.back());  // (their rows are not read; the rollback below drops them)
    }
    if (n > 0) {
        tgt_cache_->checkpoint();  // a recurrent target comes back here if not every draft is kept
    }
    // the first step's batch follows the prompt's rest (prefill), in one decode whose time is the
    // prompt's processing
    const bool carries = !prompt_rest_.empty();
    if (carries) {
        prompt_rest_.insert(prompt_rest_.end(), batch_.begin(), batch_.end());
        tgt_cache_->launch_outputs(prompt_rest_.data(), (int32_t) prompt_rest_.size(), (int32_t) batch_.size(),
                                   nullptr, check);
        prompt_rest_.clear();
    } else {
        tgt_cache_->launch_outputs(batch_.data(), (int32_t) batch_.size(), (int32_t) batch_.size());
    }
    if (meanwhile) {
        meanwhile();
    }
    tgt_cache_->finish();
    verify_ms = ms_since(t);
    (carries ? st.t_prefill_ms : st.t_verify_ms) += verify_ms;

    t = clock_type::now();
    const sampling_params & sp = params.sampling;
    acceptance_result       acc;
    // the target's logits at position i, after the controls with that position's history: seq,
    // then the drafts before it (the row is used before the next position's is made)
    // (and masked by the grammar in its state there)
    const auto row = [&](int32_t i, const sampling_params & chain) {
        const float * r = tgt_cache_->logits(i);
        if (sp.controls != nullptr) {
            r = editor_.apply(*sp.controls, r, target_->n_vocab, seq.data(), n_seq, drafted_.tokens.data(), i);
        }
        return sp.grammar == nullptr ? r : sp.grammar->at(i).mask(r, target_->n_vocab, chain, grammar_row_);
    };
    // the target's choices and distributions are made from its logits as the rule reads them: none
    // after the first rejected draft
    // (or from the few candidates the device chain returned for each row)
    const bool on_device = tgt_cache_->chain().what != device_chain::kind::none;
    if (sp.greedy()) {
        const auto choice = [&](int32_t i) {
            return on_device ? row_argmax(tgt_cache_->sampled(i)) : argmax(row(i, sp), target_->n_vocab);
        };
        acc = accept_greedy(drafted_.tokens.data(), n, choice);
    } else {
        if ((int32_t) p_.size() < n + 1) {
            p_.resize(n + 1);
        }
        const auto dist = [&](int32_t i) -> const token_dist & {
            if (on_device) {
                row_distribution(tgt_cache_->sampled(i), sp, p_[i]);
            } else {
                sampling_distribution(row(i, sp), target_->n_vocab, sp, p_[i]);
            }
            return p_[i];
        };
        if (sp.keyed) {  // (the token after seq comes at index n_seq)
            acc = accept_keyed(drafted_.tokens.data(), n, dist, *sp.keyed, n_seq);
        } else if (effective_rule(params) == accept_rule::match) {
            acc = accept_match(drafted_.tokens.data(), n, dist, rng);
        } else {
            acc = accept_sampled(drafted_.tokens.data(), n, drafted_.dists, dist, target_->n_vocab, rng, scratch_);
        }
        if (lengths_.read_probes()) {  // (what a read judges a plain step's token by: its p, at its index)
            read_p_.resize(std::max<size_t>(read_p_.size(), n_seq + acc.n_accepted + 1), 0.0f);
            std::fill(read_p_.begin() + n_seq, read_p_.begin() + n_seq + acc.n_accepted + 1, 0.0f);
            if (n == 0) {
                read_p_[n_seq] = p_[0].prob_of(acc.next);
            }
        }
    }
    if (params.logprobs) {
        step_logprobs_.resize(acc.n_accepted + 1);
        for (int32_t i = 0; i <= acc.n_accepted; ++i) {
            const llama_token tok = i < acc.n_accepted ? drafted_.tokens[i] : acc.next;
            if (sp.greedy()) {  // (the softmax over every token the grammar allows)
                sampling_params all = sp;
                all.temperature = 1.0f;
                all.top_k       = 0;
                row_logprobs(row(i, all), target_->n_vocab, tok, *params.logprobs, step_logprobs_[i].logprob,
                             step_logprobs_[i].top);
            } else {  // (both rules read p at every position up to the one that emitted next)
                dist_logprobs(p_[i], tok, *params.logprobs, step_logprobs_[i].logprob, step_logprobs_[i].top);
            }
            step_logprobs_[i].token = tok;
        }
    }
    // keep seq[:-1], last and the accepted drafts; the draft cache is trimmed on its next catch-up
    const auto t_rollback = clock_type::now();
    tgt_cache_->rollback(n_seq + acc.n_accepted);
    if (tgt_cache_->recurrent()) {
        // a recurrent target's rollback (restore, decode the kept tokens again) is part of what a
        // step of this length costs: the adaptive length prices it with the verification
        verify_ms += ms_since(t_rollback);
    }
    st.t_accept_ms += ms_since(t);
    return acc;
}

void decoder::emit(const acceptance_result & acc, const generate_params & params, text_stream & stream,
                   std::vector<llama_token> & seq, generate_result & res, step_event & ev, std::string & finish) const {
    ev.tokens.clear();
    ev.logprobs.clear();
    ev.n_drafted  = (int32_t) drafted_.tokens.size();
    ev.n_accepted = acc.n_accepted;
    for (int32_t i = 0; i <= acc.n_accepted && finish.empty(); ++i) {
        const llama_token tok = i < acc.n_accepted ? drafted_.tokens[i] : acc.next;
        if (!append_token(tok, params, stream, res, finish)) {
            break;
        }
        seq.push_back(tok);
        ev.tokens.push_back(tok);
        if (params.logprobs) {
            ev.logprobs.push_back(step_logprobs_[i]);
            res.logprobs.push_back(step_logprobs_[i]);
        }
    }
    if (finish.empty() && (int32_t) seq.size() > tgt_cache_->n_ctx()) {
        finish           = "length";
        res.context_full = true;
    }
    ev.text = finish.empty() ? stream.take_ready() : stream.take_all();
}

}  // namespace specllama
