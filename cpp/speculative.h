// speculative.h: the decoding loop. Each step the draft proposes up to n_draft tokens, the target
// evaluates [last, d_1..d_n] in ONE llama_decode with logits at every position, the acceptance
// rule keeps a prefix and adds one target token, and both caches drop what was rejected. With no
// draft (or n_draft = 0) the same loop is plain autoregressive decoding on the same engine.
// Not here: drafting (drafting.h), acceptance (acceptance.h), cache rollback (kv_cache.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "acceptance.h"
#include "draft_length.h"
#include "drafting.h"
#include "dsi.h"
#include "kv_cache.h"
#include "lookup.h"
#include "text.h"

namespace specllama {

struct decoder_params {
    model_params                target;
    std::optional<model_params> draft;           // none: plain decoding only
    context_params              ctx;             // for both models
    int32_t                     n_threads_draft = 0;  // 0 = ctx.n_threads
    // when the draft is the target in another number format (kv_interchangeable), give it the
    // prompt's keys and values from the target's cache instead of processing the prompt again;
    // likewise DSI's extra target servers. Only where neither model is offloaded to a GPU.
    bool                        share_prefill = true;
};

// who proposes the drafts
enum class drafter_kind {
    model,         // the draft model
    lookup,        // prompt lookup only (no draft model needed)
    model_lookup,  // the draft model; where it stops early, prompt lookup fills the rest
};

// how sampled drafts are verified (greedy decoding always keeps drafts equal to the argmax)
enum class accept_rule {
    rejection,  // min(1, p/q) with a residual draw: keeps the most (Leviathan et al.)
    match,      // sample the target, keep equal drafts (llama.cpp's rule; for comparison)
};

struct generate_params {
    int32_t                  max_tokens = 256;  // tokens to generate at most
    int32_t                  n_draft    = 6;    // tokens drafted per step, 1..k_max_draft
    sampling_params          sampling;
    std::optional<uint64_t>  seed;              // none: a random seed
    std::vector<std::string> stop;              // stop strings (not included in the text)
    bool                     ignore_eos = false;  // keep going past end-of-generation tokens
    bool                     speculative = true;  // false: plain decoding on the target, same loop
    bool                     adaptive = true;     // choose each step's draft length (<= n_draft) by expected speed
    drafter_kind             drafter  = drafter_kind::model;
    accept_rule              rule     = accept_rule::rejection;
    lookup_params            lookup;
};

// maximum n_draft: the verification batch (n_draft + 1 tokens) must fit in one ubatch
constexpr int32_t k_max_draft = 64;

struct generate_stats {
    int32_t              n_prompt        = 0;  // prompt tokens
    int32_t              n_prompt_cached = 0;  // of which were already in the target's cache
    int32_t              n_prompt_shared = 0;  // prompt tokens the draft took from the target's cache
    int32_t              n_generated     = 0;  // tokens emitted
    int32_t              n_steps         = 0;  // target verification passes
    int32_t              n_drafted       = 0;  // tokens the draft proposed
    int32_t              n_accepted      = 0;  // of which the target kept
    int32_t              n_lookup_drafted  = 0;  // of the drafted tokens, proposed by prompt lookup
    int32_t              n_lookup_accepted = 0;  // of which the target kept
    int32_t              n_paused_steps    = 0;  // steps the adaptive rule left the draft model out of (no pay)
    std::vector<int32_t> accepted_hist;         // accepted_hist[k]: steps that kept k drafts
    double               t_prefill_ms = 0;      // prompt processing, both models (or the target and the copy)
    double               t_draft_ms   = 0;      // draft decodes and draft sampling
    double               t_verify_ms  = 0;      // target decodes
    double               t_accept_ms  = 0;      // target sampling and acceptance
    double               t_total_ms   = 0;      // the whole call

    double acceptance_rate() const { return n_drafted > 0 ? (double) n_accepted / n_drafted : 0.0; }
    // generated tokens per second after the prompt is processed
    double tokens_per_second() const {
        double t = t_total_ms - t_prefill_ms;
        return t > 0 ? n_generated * 1000.0 / t : 0.0;
    }
};

// Distributed Speculative Inference (dsi.h) on this decoder's models
struct dsi_options {
    int32_t sp               = 1;     // target servers (contexts on the shared target model)
    int32_t lookahead        = 4;     // drafted tokens per verification task
    int32_t n_threads_draft  = 0;     // drafter threads; 0: split the decoder's thread budget
    int32_t n_threads_server = 0;     // threads per server; 0: split the decoder's thread budget
    bool    overlap          = true;  // false: SI on the same code path (each verification waited for)
};

struct dsi_report {
    dsi_stats stats;
    int32_t   sp = 0, lookahead = 0, n_threads_draft = 0, n_threads_server = 0;
};

struct generate_result {
    std::vector<llama_token> tokens;
    std::string              text;
    std::string              finish_reason;  // "stop" (end token or stop string), "length", "cancelled"
    bool                     context_full = false;  // "length" because the context had no room left
    generate_stats           stats;
    std::optional<dsi_report> dsi;                  // set by generate_dsi
};

// what one verification step added
struct step_event {
    std::vector<llama_token> tokens;  // tokens emitted by this step
    std::string              text;    // text safe to show now (may lag tokens: stop strings, UTF-8)
    int32_t                  n_drafted  = 0;
    int32_t                  n_accepted = 0;
};

// called after every step; return true to stop. May throw (e.g. Ctrl-C): generation stops and the
// decoder stays usable, since steps are complete when it is called.
using step_callback = std::function<bool(const step_event &)>;
// called between prompt chunks; may throw to stop
using interrupt_check = std::function<void()>;

class decoder {
  public:
    explicit decoder(const decoder_params & params);

    // generate after prompt. Reuses the longest prefix of prompt already in the caches, so a
    // conversation that grows turn by turn is not processed again.
    generate_result generate(const std::vector<llama_token> & prompt, const generate_params & params,
                             const step_callback & on_step = nullptr, const interrupt_check & check = nullptr);

    // the same, by Distributed Speculative Inference: the drafter never waits for verification.
    // Uses params' max_tokens, sampling, seed, stop and ignore_eos (the draft model drafts; lookup,
    // adaptive length and the match rule are not available here). Server 0 is this decoder's own
    // target context; the others are made on first use and kept.
    generate_result generate_dsi(const std::vector<llama_token> & prompt, const generate_params & params,
                                 const dsi_options & options, const step_callback & on_step = nullptr,
                                 const interrupt_check & check = nullptr);

    const model & target() const { return *target_; }
    const model * draft() const { return draft_.get(); }
    std::shared_ptr<model> target_shared() const { return target_; }
    std::shared_ptr<model> draft_shared() const { return draft_; }
    int32_t n_ctx() const { return tgt_cache_->n_ctx(); }
    // whether the draft takes the prompt's keys and values from the target (decoder_params::share_prefill)
    bool shares_prefill() const { return share_prefill_; }

    // tokens held in the target's cache (what a following prompt can reuse)
    std::vector<llama_token> cached_tokens() const;
    // forget both caches
    void reset();

    // the adaptive draft length's current estimates
    draft_length_model cost_model() const;

  private:
    // throws unless prompt can be generated after (non-empty, fits the context, valid ids)
    void validate_prompt(const std::vector<llama_token> & prompt) const;
    // append an emitted token to res unless it ends generation; sets finish to "stop" (end token or
    // stop string) or "length" (max_tokens). Returns whether tok was appended.
    bool append_token(llama_token tok, const generate_params & params, text_stream & stream, generate_result & res,
                      std::string & finish) const;

    // append prompt-lookup drafts after the model's (up to n_max in all); sets probe to the first
    // proposal the cost model dropped (-1 if none); returns how many were added
    int32_t add_lookup_drafts(const std::vector<llama_token> & seq, int32_t n_max, const generate_params & params,
                              llama_token & probe);
    // feed one step's costs and outcomes to the adaptive draft length
    // (prev_n: tokens drafted in the step before, -1 for the first step after prefill)
    void observe_step(int32_t n_model, int32_t n, const acceptance_result & acc, llama_token probe, double draft_ms,
                      double verify_ms, int32_t prev_n);

    std::shared_ptr<model>    target_;
    std::shared_ptr<model>    draft_;
    std::unique_ptr<kv_cache> tgt_cache_;
    std::unique_ptr<kv_cache> dft_cache_;
    std::unique_ptr<model_drafter> drafter_;
    mutable std::mutex        mutex_;  // one generation at a time per decoder
    context_params            ctx_params_;
    int32_t                   n_threads_draft_ = 0;
    bool                      share_prefill_   = false;  // the draft copies the target's prompt KV
    bool                      copy_server_prefill_ = false;  // DSI servers copy the first server's
    std::vector<std::unique_ptr<kv_cache>> dsi_servers_;  // DSI's target servers beyond the first

    draft_length_model        lengths_;  // costs and calibration, kept across generations

    // per-step buffers, reused
    draft_result              drafted_;
    std::vector<token_dist>   p_;
    std::vector<llama_token>  target_argmax_;
    std::vector<llama_token>  lookup_seq_;
    acceptance_scratch        scratch_;
};

void generate_params_validate(const generate_params & params);

}  // namespace specllama
