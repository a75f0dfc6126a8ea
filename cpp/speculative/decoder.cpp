// speculative/decoder.cpp: the draft -> verify -> accept -> roll back loop.
#include "speculative/decoder.h"

#include "engine/vocab.h"
#include "sampling/grammar.h"
#include "sampling/logprobs.h"

#include <algorithm>
#include <chrono>

namespace specllama {

double dsi_report::t_verify_hidden_ms() const {
    const double used = stats.t_verify_ms - stats.t_verify_wasted_ms;
    return std::max(0.0, used - stats.t_draft_idle_ms);
}

double dsi_report::verify_hidden_share() const {
    const double used = stats.t_verify_ms - stats.t_verify_wasted_ms;
    return used > 0 ? t_verify_hidden_ms() / used : 0.0;
}

namespace {
// the draft's context: the target's but for the draft's threads and cache formats, and n_ctx
context_params draft_context(const decoder_params & p, int32_t n_ctx) {
    context_params c = p.ctx;
    c.n_ctx          = n_ctx;
    c.n_threads      = p.n_threads_draft != 0 ? p.n_threads_draft : p.ctx.n_threads;
    c.type_k         = p.type_k_draft;
    c.type_v         = p.type_v_draft;
    return c;
}
}  // namespace

decoder::decoder(const decoder_params & params)
    : decoder(params, model_load(params.target), params.draft ? model_load(*params.draft) : nullptr) {}

decoder::decoder(const decoder_params & params, std::shared_ptr<model> target, std::shared_ptr<model> draft,
                 const std::optional<slot_place> & slot)
    : params_(params),
      batcher_(slot ? slot->target->batcher : nullptr),
      ctx_params_(params.ctx),
      n_threads_draft_(params.n_threads_draft),
      n_draft_(params.n_draft) {
    if (params.n_draft < 1 || params.n_draft > k_max_draft) {
        throw std::invalid_argument("n_draft must be in [1, " + std::to_string(k_max_draft) + "], got " +
                                    std::to_string(params.n_draft));
    }
    if (params.n_threads_draft < -1) {
        throw std::invalid_argument("n_threads_draft must be >= -1 (0 = n_threads; -1: tuned), got " +
                                    std::to_string(params.n_threads_draft));
    }
    if (draft && !params.draft) {
        throw std::invalid_argument("a draft model needs its model_params in decoder_params::draft");
    }
    if (params.draft_catch_up != "auto" && params.draft_catch_up != "batch" && params.draft_catch_up != "tokens") {
        throw std::invalid_argument("draft_catch_up must be 'auto', 'batch' or 'tokens', got '" +
                                    params.draft_catch_up + "'");
    }
    if (params.settle_steps < -1 || params.settle_steps > k_max_draft) {
        throw std::invalid_argument("settle_steps must be in [-1, " + std::to_string(k_max_draft) + "] (-1: auto), got " +
                                    std::to_string(params.settle_steps));
    }
    if (params.verify_shape != "auto" && params.verify_shape != "exact" && params.verify_shape != "padded") {
        throw std::invalid_argument("verify_shape must be 'auto', 'exact' or 'padded', got '" + params.verify_shape +
                                    "'");
    }
    if (params.draft) {  // (the target's formats are checked as its context is made)
        cache_type_from_string(params.type_k_draft, "cache_type_k_draft");
        cache_type_from_string(params.type_v_draft, "cache_type_v_draft");
    }
    // copying a sequence's keys and values goes through host memory: it pays against decoding on
    // a CPU (kv_cache.h), and was not measured against a GPU's batched prompt processing
    copy_server_prefill_ = params.share_prefill && !offloads(params.target);
    target_    = std::move(target);
    tgt_cache_ = slot ? std::make_unique<kv_cache>(slot->target, slot->seq, params.ctx.n_ctx)
                      : std::make_unique<kv_cache>(target_, params.ctx);
    const bool can_pad = !slot && !tgt_cache_->recurrent() && !tgt_cache_->window_only();
    pad_verify_ = !can_pad || params.verify_shape == "exact"  ? 0
                  : params.verify_shape == "padded"            ? 1
                  : target_->local_gpu                         ? 2
                                                               : 0;
    lengths_.set_decodes_again(tgt_cache_->recurrent());  // a rejected draft costs a decode again
    if (params.n_draft + 1 > tgt_cache_->n_batch()) {
        throw std::invalid_argument("n_batch must be >= " + std::to_string(params.n_draft + 1) +
                                    " (n_draft + 1: a verification is one batch), got " +
                                    std::to_string(tgt_cache_->n_batch()));
    }
    if (draft) {
        draft_ = std::move(draft);
        if (slot && slot->vocab) {
            vocab_map_ = slot->vocab;
        } else if (!vocab_difference(*target_, *draft_).empty()) {
            vocab_map_ = std::make_shared<const vocab_map>(*target_, *draft_);  // throws if too little is shared
        }
        const context_params dctx = draft_context(params, tgt_cache_->n_ctx());
        if (slot && !slot->draft) {
            throw std::invalid_argument("a slot with a draft model needs a draft context");
        }
        dft_cache_ = slot ? std::make_unique<kv_cache>(slot->draft, slot->seq, dctx.n_ctx)
                          : std::make_unique<kv_cache>(draft_, dctx);
        drafter_   = std::make_unique<model_drafter>(*dft_cache_, vocab_map_.get());
        if (vocab_map_) {
            view_ = std::make_unique<draft_view>(*vocab_map_);
        }
        share_prefill_ = copy_server_prefill_ && !offloads(*params.draft) && !vocab_map_ &&
                         kv_interchangeable(*target_, *draft_) && dctx.type_k == params.ctx.type_k &&
                         dctx.type_v == params.ctx.type_v;
        const std::string & how = params.draft_catch_up;
        const bool by_token = how == "tokens" || (how == "auto" && draft_->local_gpu && !slot);
        drafter_->set_catch_up_by_token(by_token ? k_catch_up_by_token : 0);
    }
    const bool on_gpu = target_->local_gpu || (draft_ && draft_->local_gpu);
    lengths_.set_settle_steps(params.settle_steps >= 0 ? params.settle_steps : on_gpu ? k_graph_settle_steps : 0);
    if (!slot && on_gpu) {
        warm_up();
    }
}

std::string decoder::draft_catch_up() const {
    return drafter_ == nullptr ? "" : drafter_->catch_up_by_token() > 0 ? "tokens" : "batch";
}

std::vector<std::unique_ptr<decoder>> decoder::slots(int32_t n, int32_t n_ctx, int32_t max_wait_us) {
    if (n < 1 || n > k_max_slots) {
        throw std::invalid_argument("slots must be in [1, " + std::to_string(k_max_slots) + "], got " +
                                    std::to_string(n));
    }
    if (n_ctx < 0) {
        throw std::invalid_argument("n_ctx must be >= 0 (0 = this decoder's), got " + std::to_string(n_ctx));
    }
    if (max_wait_us < 0) {
        throw std::invalid_argument("max_wait_us must be >= 0, got " + std::to_string(max_wait_us));
    }
    not_from_own_generation("slots()");
    std::lock_guard<std::mutex> lock(mutex_);
    decoder_params p = params_;
    p.ctx.n_ctx      = n_ctx > 0 ? n_ctx : tgt_cache_->n_ctx();
    auto       batcher = std::make_shared<slot_batcher>(std::chrono::microseconds(max_wait_us));
    slot_place place;
    place.vocab  = vocab_map_;
    place.target = make_shared_context(batcher, target_, n, p.ctx, 1);
    if (draft_) {
        place.draft = make_shared_context(batcher, draft_, n, draft_context(p, p.ctx.n_ctx), 0);
    }
    std::vector<std::unique_ptr<decoder>> out;
    for (int32_t s = 0; s < n; ++s) {
        place.seq = s;
        out.push_back(std::make_unique<decoder>(p, target_, draft_, place));
    }
    return out;
}

std::unique_ptr<decoder> decoder::sibling(decoder_params params) const {
    if (is_slot()) {
        throw std::invalid_argument("sibling(): not for a slot (slots() makes more of them)");
    }
    params.target      = params_.target;  // the models' own
    params.draft       = params_.draft;
    params.dsi_servers = params_.dsi_servers;
    return std::make_unique<decoder>(params, target_, draft_);
}

std::vector<llama_token> decoder::cached_tokens() const {
    not_from_own_generation("cached_tokens()");
    std::lock_guard<std::mutex> lock(mutex_);
    return tgt_cache_->tokens();
}

std::vector<llama_token> decoder::draft_cached_tokens() const {
    not_from_own_generation("draft_cached_tokens()");
    std::lock_guard<std::mutex> lock(mutex_);
    return dft_cache_ ? dft_cache_->tokens() : std::vector<llama_token>();
}

std::vector<llama_token> decoder::draft_view_of(const std::vector<llama_token> & target_tokens) const {
    if (!vocab_map_) {
        return target_tokens;
    }
    for (const llama_token t : target_tokens) {
        if (t < 0 || t >= target_->n_vocab) {
            throw std::invalid_argument("token id " + std::to_string(t) + " outside the vocabulary of " +
                                        std::to_string(target_->n_vocab));
        }
    }
    draft_view view(*vocab_map_);
    return view.update(target_tokens);
}

void decoder::not_from_own_generation(const char * what) const {
    if (generating_in_.load() == std::this_thread::get_id()) {
        throw std::runtime_error(std::string(what) + " cannot be called from inside this decoder's own generation "
                                 "(its on_step callback); stop the generation first (on_step returns True)");
    }
}

void decoder::reset() {
    not_from_own_generation("reset()");
    std::lock_guard<std::mutex> lock(mutex_);
    tgt_cache_->rollback(0);
    if (dft_cache_) {
        dft_cache_->rollback(0);
    }
    for (auto & c : dsi_servers_) {
        c->rollback(0);
    }
}

namespace {
// decode n copies of tok after what cache holds (every row an output where all), then drop them:
// what the decode took, to its end (-1 where the cache cannot take it)
double warm_shape(kv_cache & cache, llama_token tok, int32_t n, bool all) {
    const int32_t n_past = cache.n_past();
    if (cache.recurrent() || cache.window_only() || n_past + n > cache.n_ctx() || n > cache.n_batch()) {
        return -1.0;
    }
    const std::vector<llama_token> toks(n, tok);
    const auto                     t0 = std::chrono::steady_clock::now();
    cache.decode(toks.data(), n, all);  // (it waits for the result)
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    cache.rollback(n_past);
    return ms;
}

// the same shape decoded k_price_runs times in a row: what the last took (a GPU runs the first
// without its graph, records it in the second and replays it from the third)
constexpr int k_price_runs = 3;
double price_shape(kv_cache & cache, llama_token tok, int32_t n, bool all) {
    double ms = -1.0;
    for (int i = 0; i < k_price_runs; ++i) {
        ms = warm_shape(cache, tok, n, all);
    }
    return ms;
}
}  // namespace

void decoder::warm_up() {
    not_from_own_generation("warm_up()");
    std::lock_guard<std::mutex> lock(mutex_);
    if (batcher_) {
        return;
    }
    const llama_token bos = llama_vocab_bos(target_->vocab);
    const llama_token tok = bos >= 0 ? bos : 0;
    // what an adaptive generation pads to before the rule has its prices (the first batch's), the
    // one-token step, and n_draft + 1 tokens: price_steps decodes the first two, the last here
    const int32_t first_pad = adaptive_pad(n_draft_);
    const int32_t n_batch   = first_pad > 1 ? first_pad : n_draft_ + 1;
    if (n_batch != n_draft_ + 1) {
        warm_shape(*tgt_cache_, tok, n_draft_ + 1, true);
    }
    if (dft_cache_) {
        const llama_token dbos = llama_vocab_bos(draft_->vocab);
        if (drafter_->catch_up_by_token() == 0) {  // (a fully accepted step's catch-up, as one batch)
            warm_shape(*dft_cache_, dbos >= 0 ? dbos : 0, 2, false);
        }
        warm_shape(*dft_cache_, dbos >= 0 ? dbos : 0, 1, false);
    }
    price_steps(tok, n_batch);
}

void decoder::price_steps(llama_token tok, int32_t n_batch) {
    // the target's prices that the adaptive rule would otherwise learn from a new decoder's first
    // steps (plain steps before any drafting, a batch's verification), each shape steady. Not the
    // draft's: a small draft's first decodes on a GPU may still cost several later ones
    // (Qwen2.5-0.5B's shape on an H200: 5.7 ms in its first drafting steps, draft_length.h), and
    // priced so before it drafts, a draft that pays would start paused; its steps price it
    const double batch_ms = price_shape(*tgt_cache_, tok, n_batch, true);
    const double plain_ms = price_shape(*tgt_cache_, tok, 1, true);
    const double again_ms = warm_shape(*tgt_cache_, tok, 1, true);
    if (batch_ms < 0.0 || plain_ms < 0.0 || again_ms < 0.0) {
        return;
    }
    lengths_.observe_verify(n_batch, batch_ms);
    lengths_.observe_verify(1, plain_ms);
    lengths_.observe_verify(1, again_ms);
}

draft_length_model decoder::cost_model() const {
    not_from_own_generation("cost_model()");
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
    if (!params.ignore_eos && target_->is_eog(tok)) {
        finish = "stop";
        return false;
    }
    res.tokens.push_back(tok);
    res.stats.n_generated += 1;
    if (stream.push(token_to_piece(*target_, tok, params.preserves(tok)))) {
        finish = "stop";
    } else if (res.stats.n_generated >= params.max_tokens) {
        finish = "length";
    }
    return true;
}


decoder::run_plan decoder::plan_run(const generate_params & params) const {
    generate_params_validate(params);
    const bool has_draft = drafter_ != nullptr;
    drafter_kind kind    = params.drafter;
    if (kind == drafter_kind::automatic) {
        kind = !has_draft ? drafter_kind::lookup
               : params.mode == decode_mode::dsi ? drafter_kind::model
                                                 : drafter_kind::model_lookup;
    }
    if (!has_draft && (kind == drafter_kind::model || kind == drafter_kind::model_lookup)) {
        throw std::invalid_argument("drafter '" + drafter_to_string(kind) + "' needs a draft model; this decoder " +
                                    "has none (drafter 'lookup' drafts without one)");
    }
    if (params.mode == decode_mode::dsi && !has_draft) {
        throw std::invalid_argument("mode 'dsi' needs a draft model");
    }
    if (params.mode == decode_mode::dsi && vocab_map_) {
        throw std::invalid_argument("mode 'dsi' needs a draft with the target's vocabulary; this draft's differs "
                                    "(mode 'si' drafts across vocabularies)");
    }
    if (params.infill && params.mode == decode_mode::dsi) {
        throw std::invalid_argument("the infill sampler is not available in mode 'dsi'");
    }
    logit_controls_validate(params.controls, target_->n_vocab);
    if (params.controls.active() && params.mode == decode_mode::dsi) {
        throw std::invalid_argument("logit_bias, the repetition penalties and a thinking budget are not available "
                                    "in mode 'dsi'");
    }
    if (params.logprobs && (*params.logprobs < 0 || *params.logprobs > k_max_logprobs)) {
        throw std::invalid_argument("logprobs must be in [0, " + std::to_string(k_max_logprobs) + "], got " +
                                    std::to_string(*params.logprobs));
    }
    if (params.logprobs && params.mode == decode_mode::dsi) {
        throw std::invalid_argument("logprobs are not available in mode 'dsi'");
    }
    if (params.grammar.empty() && (!params.grammar_trigger_patterns.empty() || !params.grammar_trigger_tokens.empty())) {
        throw std::invalid_argument("grammar triggers need a grammar");
    }
    if (!params.grammar.empty() && params.mode == decode_mode::dsi) {
        throw std::invalid_argument("a grammar is not available in mode 'dsi'");
    }
    prediction_validate(params.prediction, target_->n_vocab);
    run_plan plan;
    plan.n_draft = params.n_draft ? *params.n_draft : n_draft_;
    if (plan.n_draft + 1 > tgt_cache_->n_batch()) {
        throw std::invalid_argument("n_draft + 1 must fit in n_batch " + std::to_string(tgt_cache_->n_batch()));
    }
    if (params.mode == decode_mode::dsi && params.dsi.lookahead + 1 > tgt_cache_->n_batch()) {
        throw std::invalid_argument("lookahead must be in [1, n_batch - 1 = " +
                                    std::to_string(tgt_cache_->n_batch() - 1) + "], got " +
                                    std::to_string(params.dsi.lookahead));
    }
    // "auto" without a draft model decodes plainly: lookup alone is chosen by name only
    const bool plain_auto = params.drafter == drafter_kind::automatic && !has_draft;
    plan.use_model        = params.speculative && (kind == drafter_kind::model || kind == drafter_kind::model_lookup);
    plan.use_lookup       = params.speculative && !plain_auto &&
                      (kind == drafter_kind::lookup || kind == drafter_kind::model_lookup);
    plan.use_prediction   = params.speculative && !params.prediction.empty();
    // (keyed draws make the output independent of the draft lengths, so a seed does not fix them)
    plan.adaptive = params.adaptive ? *params.adaptive
                                    : (params.sampling.greedy() || !params.seed || effective_rule(params) == accept_rule::keyed);
    if (params.draft_ahead > 0) {
        draft_ahead_validate(params, plan);
    }
    return plan;
}

void decoder::validate(const generate_params & params) const {
    plan_run(params);
    if (!params.grammar.empty()) {  // (a generation parses it when it starts)
        grammar_state(target_->vocab, params.grammar, params.grammar_root, params.grammar_trigger_patterns,
                      params.grammar_trigger_tokens, params.grammar_thinking);  // throws where it does not parse
    }
}

std::string decoder::run_plan::drafter() const {
    const std::string who = use_model && use_lookup ? "model+lookup" : use_model ? "model" : use_lookup ? "lookup" : "";
    return !use_prediction ? (who.empty() ? "none" : who) : who.empty() ? "prediction" : who + "+prediction";
}

std::string decoder::drafter_name(const generate_params & params) const {
    return plan_run(params).drafter();
}

generate_result decoder::generate(const std::vector<llama_token> & prompt, const generate_params & params,
                                  const step_callback & on_step, const interrupt_check & check) {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
        // the Python wrapper queues threads; this is a call from inside a running generation
        throw std::runtime_error("this decoder is already generating (one generation at a time per decoder)");
    }
    generating_in_ = std::this_thread::get_id();
    struct generating_done {
        std::atomic<std::thread::id> & in;
        ~generating_done() { in = std::thread::id(); }
    } done{ generating_in_ };
    const run_plan plan = plan_run(params);
    validate_prompt(prompt);
    std::optional<slot_batcher::generating> batching;  // a slot's decodes wait for the other slots'
    if (batcher_) {
        batching.emplace(*batcher_, tgt_cache_->seq());
    }
    if (params.mode == decode_mode::dsi) {
        return generate_dsi(prompt, params, plan, on_step, check);
    }
    std::optional<grammar_track> grammar;
    if (!params.grammar.empty()) {
        if (params.forced_drafts && plan.use_model && !forcing_) {
            forcing_.emplace(target_->vocab);
        }
        grammar.emplace(grammar_state(target_->vocab, params.grammar, params.grammar_root,
                                      params.grammar_trigger_patterns, params.grammar_trigger_tokens,
                                      params.grammar_thinking),
                        params.forced_drafts && plan.use_model ? &*forcing_ : nullptr);
    }
    const bool keyed = effective_rule(params) == accept_rule::keyed && !params.sampling.greedy();
    if (params.infill || params.controls.active() || grammar || keyed) {
        generate_params applied   = params;
        applied.controls.budget.reply_start = (int32_t) prompt.size();
        applied.controls.budget.vocab       = target_->vocab;
        applied.sampling.infill   = params.infill ? target_->vocab : nullptr;
        applied.sampling.controls = params.controls.active() ? &applied.controls : nullptr;
        applied.sampling.grammar  = grammar ? &*grammar : nullptr;
        if (keyed) {  // the seed is the key; without one, a random key
            applied.sampling.keyed = seed_or_random(params.seed);
        }
        return generate_si(prompt, applied, plan, on_step, check);
    }
    return generate_si(prompt, params, plan, on_step, check);
}

// Algorithm 1 of Leviathan et al. with adaptive draft lengths: plan, draft, verify and accept, emit.
generate_result decoder::generate_si(const std::vector<llama_token> & prompt, const generate_params & params,
                                     const run_plan & plan, const step_callback & on_step,
                                     const interrupt_check & check) {
    rng_t rng(seed_or_random(params.seed));
    generate_result  res;
    generate_stats & st = res.stats;
    st.n_prompt         = (int32_t) prompt.size();
    st.accepted_hist.assign(plan.n_draft + 1, 0);
    st.drafter        = plan.drafter();
    st.acceptance = acceptance_name(params);
    if (plan.use_model) {
        st.vocab        = vocab_map_ ? "intersection" : "same";
        st.vocab_shared = vocab_map_ ? vocab_map_->draft_share() : 1.0;
    }
    const bool recurrent = tgt_cache_->recurrent() || (plan.use_model && dft_cache_->recurrent());
    st.rollback          = recurrent ? "checkpoint" : "kv";
    st.checkpoint_memory = checkpoint_memory({tgt_cache_.get(), plan.use_model ? dft_cache_.get() : nullptr});
    const auto rollback_ms = [&] { return tgt_cache_->rollback_ms() + (dft_cache_ ? dft_cache_->rollback_ms() : 0.0); };
    const double rollback_ms0 = rollback_ms();
    const auto   redecoded    = [&] { return tgt_cache_->n_redecoded() + (dft_cache_ ? dft_cache_->n_redecoded() : 0); };
    const int64_t redecoded0  = redecoded();
    const auto    decode_ms   = [&] { return tgt_cache_->decode_ms() + (dft_cache_ ? dft_cache_->decode_ms() : 0.0); };
    const auto    logits_bytes = [&] { return tgt_cache_->logits_bytes() + (dft_cache_ ? dft_cache_->logits_bytes() : 0); };
    const auto    draft_calls  = [&] { return dft_cache_ ? dft_cache_->n_calls() : (int64_t) 0; };
    const int64_t probes0      = thread_probes();
    place_sampling(params, plan, st);
    lengths_.set_sampled(!params.sampling.greedy());  // (each kind has its own acceptance and pause)
    begin_reads(params, plan);
    // a padded verification: every drafting step's batch is one length, the plan's n_draft + 1;
    // an adaptive generation's, one more than the drafts worth padding for at the rule's prices
    // (draft_length_model::padded_length), and no step drafts more. One that begins before those
    // prices are measured pads for the first batch's length, and again, once, when they are
    const bool pads = pad_verify_ == 1 || (pad_verify_ == 2 && tgt_cache_->chain().what != device_chain::kind::none);
    pad_to_ = !pads ? 0 : plan.adaptive ? adaptive_pad(plan.n_draft) : plan.n_draft + 1;
    lengths_.set_padded(pad_to_);
    repad_ = pads && plan.adaptive && !lengths_.knows_draft_prices();
    const auto t_start = clock_type::now();

    forced_kept_ = forced_seen_ = 0.0;
    prediction_.reset(plan.use_prediction ? params.prediction : std::vector<llama_token>(), (int32_t) prompt.size());
    ahead_hit_                   = false;
    std::vector<llama_token> seq = prompt;
    prefill(seq, plan, params, st, check);
    st.t_prefill_ms = ms_since(t_start);
    // (what Stats count after the prompt leaves out the draft's prompt pass, wherever it comes)
    double  decode_ms0    = decode_ms();
    int64_t logits_bytes0 = logits_bytes();
    int64_t draft_calls0  = draft_calls();

    text_stream stream(params.stop);
    std::string finish;
    step_event  ev;
    int32_t     prev_n = -1;  // tokens drafted in the step before (-1: it was prefill)
    while (finish.empty()) {
        const step_plan step    = plan_step(plan, params, seq, st);
        step_trace      trace;
        if (params.record_steps) {
            // (a generation of fixed lengths is never paused, whatever the rule learned from others)
            trace = {{}, step.n_max, plan.adaptive && lengths_.paused(), plan.adaptive && lengths_.probing(),
                     read_, read_result_.n, read_result_.foretold, read_ms_, lengths_.rate(), lengths_.acceptance()};
        }
        if (draft_prompt_later_ && step.model) {
            const double  d0 = decode_ms();
            const int64_t b0 = logits_bytes();
            const int64_t c0 = draft_calls();
            draft_prompt(seq, plan, params, st, check);
            decode_ms0 += decode_ms() - d0;
            logits_bytes0 += logits_bytes() - b0;
            draft_calls0 += draft_calls() - c0;
        }
        llama_token     probe   = -1;
        auto            t       = clock_type::now();
        const int32_t   n_model = draft_step(seq, step, plan, params, rng, probe, st, check);
        const int32_t   n       = (int32_t) drafted_.tokens.size();
        const double    draft_ms = ms_since(t);
        st.t_draft_ms += draft_ms;

        double           verify_ms = 0;
        // (at most the tokens left after this step, were it to keep every draft)
        const int32_t    n_ahead   = std::min(params.draft_ahead, params.max_tokens - st.n_generated - n - 1);
        std::function<void()> meanwhile;
        if (n_model > 0 && n_ahead > 0) {
            meanwhile = [&] { draft_ahead(seq, n_ahead, params, rng, st, check); };
        }
        // (the first step's decode may carry the prompt's rest: prompt processing, not the generation's)
        const int32_t           n_prompt = (int32_t) prompt_rest_.size();
        const double            d0       = n_prompt > 0 ? decode_ms() : 0.0;
        const acceptance_result acc      = verify_and_accept(seq, params, rng, verify_ms, st, meanwhile, check);
        if (n_prompt > 0) {
            decode_ms0 += decode_ms() - d0;
            if (plan.adaptive && !batcher_ && !params.prices) {
                lengths_.observe_prompt(n_prompt + 1, verify_ms);
            }
        }
        ahead_hit_ = meanwhile && !ahead_.tokens.empty() && acc.n_accepted == n && acc.next == ahead_.tokens[0];

        // (a verification with drafting beside it prices neither)
        observe_step(n_model, n, acc, probe, draft_ms, verify_ms, prev_n, n_prompt, params.prices,
                     params.draft_ahead == 0);
        if (params.record_steps) {
            trace.record = record_;
            st.steps.push_back(std::move(trace));
        }
        prev_n = n;
        count_verified(acc, n_model, st);
        st.n_steps += 1;
        st.n_drafted += n;
        st.n_accepted += acc.n_accepted;
        st.accepted_hist[acc.n_accepted] += 1;

        emit(acc, params, stream, seq, res, ev, finish);
        if (params.sampling.grammar != nullptr) {
            params.sampling.grammar->commit(acc.n_accepted, acc.next);
        }
        if (on_step && on_step(ev) && finish.empty()) {
            finish = "cancelled";
        }
    }
    if (model_sits_out_) {
        lengths_.observe_sat_out(st.n_generated);  // (what a later generation's read is weighed against)
    }
    if (plan.adaptive && plan.use_model && !batcher_) {
        lengths_.observe_generation(st.n_generated);
    }
    res.finish_reason = finish;
    res.text          = stream.text();
    st.t_rollback_ms  = rollback_ms() - rollback_ms0;
    st.n_redecoded    = redecoded() - redecoded0;
    st.t_total_ms     = ms_since(t_start);
    st.t_decode_ms    = decode_ms() - decode_ms0;
    st.logits_bytes   = logits_bytes() - logits_bytes0;
    st.n_draft_calls  = draft_calls() - draft_calls0;
    report_threads(st, plan.use_model, probes0);
    return res;
}

void decoder::place_sampling(const generate_params & params, const run_plan & plan, generate_stats & st) {
    const sampling_params & sp    = params.sampling;
    const auto              place = [&](kv_cache & cache, bool draft) {
        std::string why = params.device_sampling.value_or(cache.mdl().offloaded) ? ""
                          : params.device_sampling                                 ? "device sampling off"
                                                                                   : "auto: the model runs on the CPU";
        if (why.empty()) {
            why = device_chain_blocker(sp, cache.n_vocab(), !draft && params.logprobs.has_value(),
                                       draft && vocab_map_ != nullptr);
        }
        if (why.empty() && !cache.set_device_chain(device_chain_for(sp, draft))) {
            why = "the backend cannot run the chain";
        }
        if (!why.empty()) {
            cache.set_device_chain({});
        }
        return why;
    };
    const std::string tgt_why = place(*tgt_cache_, false);
    const std::string dft_why = plan.use_model ? place(*dft_cache_, true) : tgt_why;
    st.sampling = tgt_why.empty() && dft_why.empty() ? "device"
                  : !tgt_why.empty() && !dft_why.empty() ? "host"
                  : tgt_why.empty()                      ? "device (target), host (draft)"
                                                         : "host (target), device (draft)";
    st.host_sampling_reason = !tgt_why.empty() ? tgt_why : dft_why;
}

void decoder::prefill(const std::vector<llama_token> & seq, const run_plan & plan, const generate_params & params,
                      generate_stats & st, const interrupt_check & check) {
    // both models cache all but the last prompt token, which opens the target's first
    // verification batch and the draft's first catch-up (it drafts from that token's logits)
    const int32_t n_prompt = (int32_t) seq.size();
    const auto    t        = clock_type::now();
    kv_cache::reuse_result kept;
    if (params.cache_reuse > 0) {
        kept = tgt_cache_->keep_reusable(seq, n_prompt - 1, params.cache_reuse, check);
    } else {
        kept.n_kept = tgt_cache_->keep_common_prefix(seq, n_prompt - 1);
    }
    st.n_prompt_cached  = kept.n_kept - kept.n_decoded;
    st.n_prompt_reused  = kept.n_shifted;
    const int32_t n_new = n_prompt - 1 - st.n_prompt_cached;
    // the rest of the prompt goes into the first step's verification, which decodes it and the
    // prompt's last token in one llama_decode: the first token comes out of the prompt's own pass,
    // not a decode after it (a slot's, out of the merged decode its prompt joins). Not on a memory
    // that keeps a checkpoint where the prompt ends (recurrent, sliding window: keep_checkpoint)
    prompt_rest_.clear();
    if (!tgt_cache_->recurrent() && !tgt_cache_->window_only()) {
        prompt_rest_.assign(seq.begin() + kept.n_kept, seq.end() - 1);
    } else {
        tgt_cache_->decode(seq.data() + kept.n_kept, n_prompt - 1 - kept.n_kept, false, nullptr, check);
    }
    // (a slot's prompt pass is merged with other slots' decodes: its time is not its own; a pass
    // that the first verification makes is priced there, generate_si)
    if (plan.adaptive && !batcher_ && (params.prices || prompt_rest_.empty())) {
        lengths_.observe_prompt(n_new, params.prices ? n_new * params.prices->verify_token_ms : ms_since(t));
    }
    // a state that cannot drop a tail comes back here for the next turn; saving it prices a step's
    // checkpoint before any is measured (given prices leave it out: they keep the loop deterministic)
    const auto t_keep = clock_type::now();
    if (tgt_cache_->keep_checkpoint() && plan.adaptive && !batcher_ && !params.prices && tgt_cache_->recurrent()) {
        lengths_.observe_checkpoint(ms_since(t_keep));
    }
    // a draft model the adaptive rule has paused takes the prompt in at its next probe instead (its
    // catch-up): while drafting does not pay, a prompt pass through it now would buy nothing
    model_sits_out_     = false;
    draft_prompt_later_ = false;
    if (plan.use_model && !(plan.adaptive && lengths_.paused())) {
        // nor does one where this generation is too short to win back the draft's prompt pass: it
        // sits this generation out (and takes the prompt in at a later one's prefill); or, where the
        // generation may well stop before it would, sits out until the generation has run long enough
        // to win it back (plan_step)
        read_after_ = 0;
        if (plan.adaptive && !batcher_ && !share_prefill_) {
            const int32_t n_unread = draft_unread(draft_seq(seq), params.cache_reuse);
            read_after_            = lengths_.draft_prompt_after(n_unread, params.max_tokens);
        }
        if (read_after_ > 0) {
            model_sits_out_ = true;
            return;
        }
        // the first step is plain (plan_step): the draft reads the prompt before the first step it
        // drafts in, so that the first token does not wait for it (draft_prompt)
        draft_prompt_later_ = true;
        const std::vector<llama_token> & dseq = draft_seq(seq);
        draft_held_ = batcher_ ? (int32_t) dseq.size() - 1 - draft_unread(dseq, params.cache_reuse) : 0;
    }
}

}  // namespace specllama
