// speculative.cpp: the draft -> verify -> accept -> roll back loop.
#include "speculative.h"

#include <algorithm>
#include <random>

namespace specllama {

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

}  // namespace

void generate_params_validate(const generate_params & p) {
    if (p.max_tokens < 1) {
        throw std::invalid_argument("max_tokens must be >= 1, got " + std::to_string(p.max_tokens));
    }
    if (p.n_draft < 1 || p.n_draft > k_max_draft) {
        throw std::invalid_argument("n_draft must be in [1, " + std::to_string(k_max_draft) + "], got " +
                                    std::to_string(p.n_draft));
    }
    sampling_params_validate(p.sampling);
}

decoder::decoder(const decoder_params & params) : ctx_params_(params.ctx), n_threads_draft_(params.n_threads_draft) {
    // copying a sequence's keys and values goes through host memory: it pays against decoding on
    // a CPU (kv_cache.h), and was not measured against a GPU's batched prompt processing
    const auto on_gpu = [](int32_t n_gpu_layers) { return n_gpu_layers != 0 && llama_supports_gpu_offload(); };
    copy_server_prefill_ = params.share_prefill && !on_gpu(params.target.n_gpu_layers);
    target_    = model_load(params.target);
    tgt_cache_ = std::make_unique<kv_cache>(target_, params.ctx);
    if (params.draft) {
        draft_ = model_load(*params.draft);
        vocab_check_compatible(*target_, *draft_);
        context_params dctx = params.ctx;
        dctx.n_ctx          = tgt_cache_->n_ctx();
        if (params.n_threads_draft > 0) {
            dctx.n_threads = params.n_threads_draft;
        }
        dft_cache_ = std::make_unique<kv_cache>(draft_, dctx);
        drafter_   = std::make_unique<model_drafter>(*dft_cache_);
        share_prefill_ = copy_server_prefill_ && !on_gpu(params.draft->n_gpu_layers) &&
                         kv_interchangeable(*target_, *draft_);
    }
}

std::vector<llama_token> decoder::cached_tokens() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return tgt_cache_->tokens();
}

void decoder::reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    tgt_cache_->rollback(0);
    if (dft_cache_) {
        dft_cache_->rollback(0);
    }
    for (auto & c : dsi_servers_) {
        c->rollback(0);
    }
}

draft_length_model decoder::cost_model() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lengths_;
}

void decoder::validate_prompt(const std::vector<llama_token> & prompt) const {
    const int32_t n_ctx    = tgt_cache_->n_ctx();
    const int32_t n_prompt = (int32_t) prompt.size();
    if (n_prompt == 0) {
        throw std::invalid_argument("the prompt is empty");
    }
    if (n_prompt >= n_ctx) {
        throw std::invalid_argument("the prompt has " + std::to_string(n_prompt) + " tokens but the context holds " +
                                    std::to_string(n_ctx) + " (room is needed for at least one more); "
                                    "shorten the prompt or raise n_ctx");
    }
    for (llama_token t : prompt) {
        if (t < 0 || t >= target_->n_vocab) {
            throw std::invalid_argument("prompt token id " + std::to_string(t) + " outside the vocabulary of " +
                                        std::to_string(target_->n_vocab));
        }
    }
}

bool decoder::append_token(llama_token tok, const generate_params & params, text_stream & stream,
                           generate_result & res, std::string & finish) const {
    if (!params.ignore_eos && llama_vocab_is_eog(target_->vocab, tok)) {
        finish = "stop";
        return false;
    }
    res.tokens.push_back(tok);
    res.stats.n_generated += 1;
    if (stream.push(token_to_piece(*target_, tok))) {
        finish = "stop";
    } else if (res.stats.n_generated >= params.max_tokens) {
        finish = "length";
    }
    return true;
}

int32_t decoder::add_lookup_drafts(const std::vector<llama_token> & seq, int32_t n_max, const generate_params & params,
                                   llama_token & probe) {
    const int32_t n_model = (int32_t) drafted_.tokens.size();
    lookup_seq_.assign(seq.begin(), seq.end());
    lookup_seq_.insert(lookup_seq_.end(), drafted_.tokens.begin(), drafted_.tokens.end());
    int32_t n_found = lookup_draft(lookup_seq_, n_max - n_model, params.lookup, drafted_.tokens);
    if (params.adaptive && n_found > 0) {
        // keep the lookup tokens that pay, judged like model drafts but costing no draft decode
        double p_reach = 1.0;
        for (int32_t i = 0; i < n_model; ++i) {
            p_reach *= lengths_.accept_prob(drafted_.conf[i]);
        }
        const double p_lookup = lengths_.lookup_accept_prob();
        int32_t      n_keep   = 0;
        while (n_keep < n_found && lengths_.keep_going_p(n_model + n_keep, p_reach, p_lookup, false)) {
            p_reach *= p_lookup;
            ++n_keep;
        }
        // the first dropped proposal is still judged, for free: if everything before it is
        // accepted, the target's own next token says whether it would have been kept
        probe = n_keep < n_found ? drafted_.tokens[n_model + n_keep] : -1;
        drafted_.tokens.resize(n_model + n_keep);
        n_found = n_keep;
    }
    if ((int32_t) drafted_.dists.size() < n_model + n_found) {
        drafted_.dists.resize(n_model + n_found);
    }
    for (int32_t i = n_model; i < n_model + n_found; ++i) {
        drafted_.conf.push_back(-1.0f);  // no confidence: kept out of the calibration
        drafted_.dists[i].ids.assign(1, drafted_.tokens[i]);  // a deterministic proposal: q is one-hot
        drafted_.dists[i].probs.assign(1, 1.0f);
    }
    return n_found;
}

void decoder::observe_step(int32_t n_model, int32_t n, const acceptance_result & acc, llama_token probe,
                           double draft_ms, double verify_ms, int32_t prev_n) {
    // the catch-up decode (one token after a rejection, two after a fully accepted step) is paid
    // once per step whatever the draft length; the other n_model - 1 decodes are one token each
    if (n_model > 0) {
        lengths_.observe_catch_up(drafted_.catch_up_ms);
    }
    if (n_model > 1) {
        lengths_.observe_draft_decode((draft_ms - drafted_.catch_up_ms) / (n_model - 1));
    }
    // a one-token verification is priced only when steady (after another); right after a batch,
    // what it costs beyond that is the price of having left plain steps
    if (n > 0 || prev_n == 0) {
        lengths_.observe_verify(n + 1, verify_ms);
    } else if (prev_n > 0 && lengths_.knows_plain_step()) {
        lengths_.observe_leave(verify_ms - lengths_.verify_ms(1));
    }
    // every draft the target looked at: all accepted ones and the first rejected one
    for (int32_t i = 0; i <= acc.n_accepted && i < n; ++i) {
        if (drafted_.conf[i] >= 0.0f) {
            lengths_.observe_acceptance(drafted_.conf[i], i < acc.n_accepted);
        } else {
            lengths_.observe_lookup(i < acc.n_accepted);
        }
    }
    if (probe >= 0 && acc.n_accepted == n) {
        lengths_.observe_lookup(acc.next == probe);
    }
    lengths_.observe_step(acc.n_accepted + 1, draft_ms + verify_ms, n_model > 0);
}

generate_result decoder::generate(const std::vector<llama_token> & prompt, const generate_params & params,
                                  const step_callback & on_step, const interrupt_check & check) {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
        // the Python wrapper queues threads; this is a call from inside a running generation
        throw std::runtime_error("this decoder is already generating (one generation at a time per decoder)");
    }
    generate_params_validate(params);
    validate_prompt(prompt);
    const int32_t n_ctx    = tgt_cache_->n_ctx();
    const int32_t n_prompt = (int32_t) prompt.size();
    if (params.n_draft + 1 > tgt_cache_->n_batch()) {
        throw std::invalid_argument("n_draft + 1 must fit in n_batch " + std::to_string(tgt_cache_->n_batch()));
    }
    const sampling_params & sp        = params.sampling;
    const bool use_model  = params.speculative && params.drafter != drafter_kind::lookup;
    const bool use_lookup = params.speculative && params.drafter != drafter_kind::model;
    if (use_model && drafter_ == nullptr && params.drafter == drafter_kind::model_lookup) {
        throw std::invalid_argument("the model+lookup drafter needs a draft model; use lookup alone");
    }
    const bool use_draft = use_lookup || (use_model && drafter_ != nullptr);
    const llama_vocab *     vocab     = target_->vocab;
    rng_t rng(params.seed ? *params.seed : ((uint64_t) std::random_device{}() << 32 | std::random_device{}()));

    generate_result   res;
    generate_stats &  st = res.stats;
    st.n_prompt          = n_prompt;
    st.accepted_hist.assign(params.n_draft + 1, 0);
    const auto t_start = clock_type::now();

    // prefill: both models cache all but the last prompt token, which opens the target's first
    // verification batch and the draft's first catch-up (it drafts from that token's logits)
    std::vector<llama_token> seq = prompt;
    st.n_prompt_cached = tgt_cache_->keep_common_prefix(seq, n_prompt - 1);
    tgt_cache_->decode(seq.data() + st.n_prompt_cached, n_prompt - 1 - st.n_prompt_cached, false, nullptr, check);
    if (use_model && drafter_) {
        st.n_prompt_shared = drafter_->prefill(seq, check, share_prefill_ ? tgt_cache_.get() : nullptr);
    }
    st.t_prefill_ms = ms_since(t_start);

    text_stream              stream(params.stop);
    std::string              finish;
    step_event               ev;
    std::vector<llama_token> batch;
    int32_t                  prev_n = -1;  // tokens drafted in the step before (-1: it was prefill)
    while (finish.empty()) {
        const int32_t n_seq = (int32_t) seq.size();
        // the batch [last, d_1..d_n] takes positions n_seq - 1 .. n_seq - 1 + n
        const int32_t room      = n_ctx - n_seq;
        const int32_t remaining = params.max_tokens - st.n_generated;
        int32_t       n         = use_draft ? std::min({params.n_draft, room, remaining - 1}) : 0;
        // the adaptive rule compares drafting with plain steps: it prices those first, and then
        // leaves the draft model out of steps while drafting does not pay (draft_length.h)
        const bool model_wanted = n > 0 && use_model && drafter_;
        const bool pricing      = params.adaptive && !lengths_.knows_plain_step();
        const bool model_now    = model_wanted && !pricing && (!params.adaptive || lengths_.draft_this_step());
        st.n_paused_steps += model_wanted && !pricing && !model_now;  // (pricing steps are not pauses)
        if (pricing) {
            n = 0;
        }

        auto t = clock_type::now();
        drafted_.tokens.clear();
        drafted_.conf.clear();
        drafted_.catch_up_ms = 0.0;
        if (model_now) {
            double p_reach = 1.0;
            draft_continue keep = nullptr;
            if (params.adaptive) {
                keep = [&](int32_t n_done, float conf) {
                    p_reach *= lengths_.accept_prob(conf);
                    return lengths_.keep_going(n_done, p_reach);
                };
            }
            drafter_->draft(seq, n, sp, rng, drafted_, keep, check);
        }
        // prompt lookup: alone, or after the draft model stopped short (not for a drafted end token)
        const int32_t n_model = (int32_t) drafted_.tokens.size();
        llama_token   probe   = -1;
        if (n > n_model && use_lookup &&
            (n_model == 0 || !llama_vocab_is_eog(vocab, drafted_.tokens.back()))) {
            st.n_lookup_drafted += add_lookup_drafts(seq, n, params, probe);
        }
        n = (int32_t) drafted_.tokens.size();
        const double draft_ms = ms_since(t);
        st.t_draft_ms += draft_ms;

        t = clock_type::now();
        batch.assign(1, seq.back());
        batch.insert(batch.end(), drafted_.tokens.begin(), drafted_.tokens.end());
        tgt_cache_->decode(batch.data(), (int32_t) batch.size(), true);
        const double verify_ms = ms_since(t);
        st.t_verify_ms += verify_ms;

        t = clock_type::now();
        acceptance_result acc;
        if (sp.greedy()) {
            target_argmax_.resize(n + 1);
            for (int32_t i = 0; i <= n; ++i) {
                target_argmax_[i] = argmax(tgt_cache_->logits(i), target_->n_vocab);
            }
            acc = accept_greedy(drafted_.tokens.data(), n, target_argmax_.data());
        } else {
            if ((int32_t) p_.size() < n + 1) {
                p_.resize(n + 1);
            }
            for (int32_t i = 0; i <= n; ++i) {
                sampling_distribution(tgt_cache_->logits(i), target_->n_vocab, sp, p_[i]);
            }
            acc = params.rule == accept_rule::match
                      ? accept_match(drafted_.tokens.data(), n, p_, rng)
                      : accept_sampled(drafted_.tokens.data(), n, drafted_.dists, p_, target_->n_vocab, rng, scratch_);
        }
        // keep seq[:-1], last and the accepted drafts; the draft cache is trimmed on its next catch-up
        tgt_cache_->rollback(n_seq + acc.n_accepted);
        st.t_accept_ms += ms_since(t);

        observe_step(n_model, n, acc, probe, draft_ms, verify_ms, prev_n);
        prev_n = n;
        st.n_lookup_accepted += std::max(0, acc.n_accepted - n_model);
        st.n_steps += 1;
        st.n_drafted += n;
        st.n_accepted += acc.n_accepted;
        st.accepted_hist[acc.n_accepted] += 1;

        ev.tokens.clear();
        ev.n_drafted  = n;
        ev.n_accepted = acc.n_accepted;
        for (int32_t i = 0; i <= acc.n_accepted && finish.empty(); ++i) {
            const llama_token tok = i < acc.n_accepted ? drafted_.tokens[i] : acc.next;
            if (!append_token(tok, params, stream, res, finish)) {
                break;
            }
            seq.push_back(tok);
            ev.tokens.push_back(tok);
        }
        if (finish.empty() && (int32_t) seq.size() > n_ctx) {
            finish           = "length";
            res.context_full = true;
        }
        ev.text = finish.empty() ? stream.take_ready() : stream.take_all();
        if (on_step && on_step(ev) && finish.empty()) {
            finish = "cancelled";
        }
    }
    res.finish_reason = finish;
    res.text          = stream.text();
    st.t_total_ms     = ms_since(t_start);
    return res;
}

}  // namespace specllama
