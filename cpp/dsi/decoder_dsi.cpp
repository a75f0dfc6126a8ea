// dsi/decoder_dsi.cpp: decoder::generate_dsi, DSI (dsi.h) on the decoder's own models: the draft
// context drafts, the decoder's target context is server 0 and further servers are contexts on
// the same target model. Text, stop strings and results are handled as in generate().
#include <thread>

#include "engine/cpu.h"
#include "dsi/backends.h"
#include "speculative/decoder.h"

namespace specllama {

namespace {


// sets a context's threads for the duration of a run and puts the old count back
class threads_scope {
  public:
    threads_scope(kv_cache & cache, int32_t during, int32_t after) : cache_(cache), after_(after) {
        cache_.set_n_threads(during);
    }
    ~threads_scope() { cache_.set_n_threads(after_); }
    threads_scope(const threads_scope &)             = delete;
    threads_scope & operator=(const threads_scope &) = delete;

  private:
    kv_cache & cache_;
    int32_t    after_;
};

}  // namespace

generate_result decoder::generate_dsi(const std::vector<llama_token> & prompt, const generate_params & params,
                                      const run_plan & plan, const step_callback & on_step,
                                      const interrupt_check & check) {
    const dsi_options & options = params.dsi;

    // the servers and everyone's threads for this run (restored afterwards), then the prompt
    const dsi_setup                 setup  = dsi_prepare(options);
    const std::vector<kv_cache *> & caches = setup.caches;

    const int32_t       n_ctx    = tgt_cache_->n_ctx();
    const int32_t       n_prompt = (int32_t) prompt.size();
    generate_result     res;
    generate_stats &    st = res.stats;
    st.n_prompt            = n_prompt;
    st.drafter             = plan.drafter();
    st.acceptance          = acceptance_name(params);
    dsi_place_sampling(params, plan, caches, st);
    // every server's rollbacks and the drafter's (kv_cache::rollback): how, what they cost
    std::vector<kv_cache *> all = caches;
    all.push_back(dft_cache_.get());
    double  rollback_ms0 = 0;
    int64_t redecoded0   = 0;
    for (kv_cache * c : all) {
        st.rollback = c->recurrent() ? "checkpoint" : st.rollback;
        rollback_ms0 += c->rollback_ms();
        redecoded0 += c->n_redecoded();
    }
    st.checkpoint_memory = checkpoint_memory(std::vector<const kv_cache *>(all.begin(), all.end()));
    const auto t_start     = clock_type::now();

    // shaped as mode si's decodes are (decoder_params::draft_catch_up, verify_shape): the drafter's
    // catch-ups token by token, and every server's batch padded to one length, the sp tasks of
    // lookahead drafts that a server catches up on in the steady state, on a GPU of this machine
    model_dsi_drafter                              drafter(*dft_cache_, drafter_->catch_up_by_token());
    drafter.set_reads_prompt(!share_prefill_);  // (dsi_prefill: the draft's prompt pass)
    const int32_t pad_to = std::min(options.sp * options.lookahead, tgt_cache_->n_batch());
    std::vector<std::unique_ptr<model_dsi_server>> servers;
    std::vector<dsi_server *>                      server_ptrs;
    for (kv_cache * c : caches) {
        const bool pads = pad_verify_ == 1 || (pad_verify_ == 2 && c->mdl().local_gpu);
        servers.push_back(std::make_unique<model_dsi_server>(*c, pads ? pad_to : 0));
        server_ptrs.push_back(servers.back().get());
    }

    dsi_prediction first;  // the target's prediction after the prompt, from the prompt's own pass
    dsi_prefill(setup, servers, params.sampling, prompt, st, check, first);
    st.t_prefill_ms = ms_since(t_start);

    text_stream stream(params.stop);
    std::string finish;
    step_event  ev;
    size_t      n_reported = 0;  // tokens already passed to on_step
    int32_t     n_checked_reported = 0, n_accepted_reported = 0;
    // one round's new tokens, and the drafts judged and kept since the last report
    auto        report     = [&](bool final, int32_t n_checked, int32_t n_accepted) {
        ev.tokens.assign(res.tokens.begin() + (long) n_reported, res.tokens.end());
        n_reported    = res.tokens.size();
        ev.text       = final ? stream.take_all() : stream.take_ready();
        ev.n_drafted  = n_checked - n_checked_reported;
        ev.n_accepted = n_accepted - n_accepted_reported;
        n_checked_reported  = n_checked;
        n_accepted_reported = n_accepted;
        return on_step && on_step(ev);
    };

    dsi_callbacks cb;
    cb.emit = [&](llama_token tok) {
        append_token(tok, params, stream, res, finish);
        return finish.empty();
    };
    cb.poll     = check;
    cb.on_round = [&](int32_t, int32_t n_checked, int32_t n_accepted) {
        if (report(false, n_checked, n_accepted)) {
            finish = "cancelled";
            return true;
        }
        return false;
    };
    if (!params.ignore_eos) {
        cb.is_end = [mdl = target_](llama_token t) { return mdl->is_eog(t); };
    }

    dsi_params dp;
    dp.lookahead         = options.lookahead;
    dp.overlap           = options.overlap;
    dp.wait_for_drafts   = options.wait_for_drafts;
    const int32_t  last  = std::min(n_prompt + params.max_tokens - 1, n_ctx);
    const uint64_t seed  = seed_or_random(params.seed);
    dsi_report rep;
    rep.stats = run_dsi(drafter, server_ptrs, prompt, last, params.sampling, seed, dp, cb, target_->n_vocab, &first);
    rep.sp               = options.sp;
    rep.lookahead        = options.lookahead;
    rep.n_threads_draft  = setup.n_threads_draft;
    rep.n_threads_server = setup.n_threads_server;
    rep.overlap          = options.overlap;
    for (const auto & server : servers) {
        rep.pad_to = std::max(rep.pad_to, server->pad_to());
        rep.n_padded += server->n_padded();
    }

    if (finish.empty()) {
        finish           = "length";
        res.context_full = n_prompt + st.n_generated > n_ctx;
    }
    if (finish != "cancelled") {
        report(true, rep.stats.n_checked, rep.stats.n_accepted);
    }
    res.finish_reason = finish;
    res.text          = stream.text();
    st.n_steps        = rep.stats.n_tasks - rep.stats.n_tasks_cancelled;
    st.n_drafted      = rep.stats.n_checked;
    st.n_accepted     = rep.stats.n_accepted;
    st.t_draft_ms     = rep.stats.t_draft_ms;
    st.t_verify_ms    = rep.stats.t_verify_ms;
    for (kv_cache * c : all) {
        st.t_rollback_ms += c->rollback_ms();
        st.n_redecoded += c->n_redecoded();
    }
    st.t_rollback_ms -= rollback_ms0;
    st.n_redecoded -= redecoded0;
    st.t_total_ms     = ms_since(t_start);
    res.dsi           = rep;
    return res;
}

void decoder::dsi_place_sampling(const generate_params & params, const run_plan & plan,
                                 const std::vector<kv_cache *> & caches, generate_stats & st) {
    // where mode si would sample on the device, so do the drafter and every server, the same chain
    // as the target's; where a further server cannot run it, every server samples on the host
    place_sampling(params, plan, st);
    const device_chain chain = tgt_cache_->chain();
    bool               all   = true;
    for (kv_cache * c : caches) {
        all = all && c->set_device_chain(chain);
    }
    if (!all) {
        for (kv_cache * c : caches) {
            c->set_device_chain({});
        }
        const bool draft_on_device = dft_cache_->chain().what != device_chain::kind::none;
        st.sampling             = draft_on_device ? "host (target), device (draft)" : "host";
        st.host_sampling_reason = "a DSI server's backend cannot run the chain";
    }
}

decoder::dsi_setup decoder::dsi_prepare(const dsi_options & options) {
    dsi_setup out;
    // the thread budget: the decoder's thread count, split between the drafter and the servers
    const int32_t budget   = ctx_params_.n_threads > 0 ? ctx_params_.n_threads : default_threads();
    const int32_t t_draft  = options.n_threads_draft > 0 ? options.n_threads_draft
                                                         : std::max(1, budget / (options.sp + 1));
    const int32_t t_server = options.n_threads_server > 0 ? options.n_threads_server
                                                          : std::max(1, (budget - t_draft) / options.sp);

    context_params sctx = ctx_params_;
    sctx.n_ctx          = tgt_cache_->n_ctx();
    sctx.n_threads      = t_server;
    const auto & places = params_.dsi_servers;
    if (!places.empty() && (int32_t) places.size() > options.sp - 1) {
        throw std::invalid_argument("the decoder places " + std::to_string(places.size()) +
                                    " DSI servers beyond the target, but sp " + std::to_string(options.sp) +
                                    " runs " + std::to_string(options.sp - 1));
    }
    while ((int32_t) dsi_servers_.size() < options.sp - 1) {
        const size_t           s   = dsi_servers_.size();
        std::shared_ptr<model> mdl = target_;
        if (s < places.size()) {
            // one copy of the weights per distinct placement
            for (size_t o = 0; o < s; ++o) {
                if (places[o] == places[s]) {
                    mdl = dsi_models_[o];
                }
            }
            if (mdl == target_) {
                model_params mp = params_.target;
                mp.place        = places[s];
                mp.n_gpu_layers = -1;
                mdl             = model_load(mp);
            }
            dsi_models_.push_back(mdl);
        }
        dsi_servers_.push_back(std::make_unique<kv_cache>(mdl, sctx));
    }
    std::vector<kv_cache *> & caches = out.caches;
    caches.push_back(tgt_cache_.get());
    for (int32_t s = 0; s + 1 < options.sp; ++s) {
        caches.push_back(dsi_servers_[s].get());
    }
    const int32_t                 t_draft_after = n_threads_draft_ != 0 ? n_threads_draft_ : ctx_params_.n_threads;
    auto & thread_scopes = out.thread_scopes;
    thread_scopes.push_back(std::make_unique<threads_scope>(*dft_cache_, t_draft, t_draft_after));
    for (kv_cache * c : caches) {
        thread_scopes.push_back(std::make_unique<threads_scope>(*c, t_server, c == tgt_cache_.get()
                                                                                  ? ctx_params_.n_threads
                                                                                  : t_server));
    }

    out.n_threads_draft  = t_draft;
    out.n_threads_server = t_server;
    return out;
}

void decoder::dsi_prefill(const dsi_setup & setup, const std::vector<std::unique_ptr<model_dsi_server>> & servers,
                          const sampling_params & sampling, const std::vector<llama_token> & prompt,
                          generate_stats & st, const interrupt_check & check, dsi_prediction & first) {
    const int32_t n_prompt = (int32_t) prompt.size();
    // the prompt passes before the run take the decoder's every thread: the split between the
    // drafter and the servers is for the run, where they compute at once
    const int32_t budget = ctx_params_.n_threads > 0 ? ctx_params_.n_threads : default_threads();
    // The first server reads the prompt and predicts the token after it, in one pass (as plain
    // decoding's first step) unless the draft copies its keys and values, which it can only while
    // the server holds all of the prompt but its last token. The other servers copy the first
    // server's keys and values where that is cheaper than decoding what they lack; else they, and
    // a draft that decodes the prompt, read it in their threads as the run starts
    // (dsi_server::read_prompt), so that the first tokens do not wait for them
    const auto copy_first = [&](kv_cache & c) {
        const int32_t n_keep = c.keep_common_prefix(prompt, n_prompt - 1);
        if (copy_server_prefill_ && copy_pays(n_prompt - 1 - n_keep, n_prompt - 1) && c.copy_from(*tgt_cache_)) {
            c.keep_checkpoint();  // a state that cannot drop a tail comes back here for the next run
            return true;
        }
        return false;
    };
    tgt_cache_->set_n_threads(budget);
    if (share_prefill_) {
        st.n_prompt_cached = servers[0]->prefill(prompt, check);
        dft_cache_->set_n_threads(budget);
        st.n_prompt_shared = drafter_->prefill(prompt, check, tgt_cache_.get());
        dft_cache_->set_n_threads(setup.n_threads_draft);
    } else {
        st.n_prompt_cached = servers[0]->predict_first(prompt, sampling, check, first);
    }
    for (size_t s = 1; s < servers.size(); ++s) {
        servers[s]->set_reads_prompt(!copy_first(*setup.caches[s]));
    }
    if (share_prefill_) {
        servers[0]->predict_first(prompt, sampling, check, first);  // (the prompt's last token)
    }
    tgt_cache_->set_n_threads(setup.n_threads_server);
}

}  // namespace specllama
