// speculative/decoder.h: the decoding loop. Each step the draft proposes up to n_draft tokens, the target
// evaluates [last, d_1..d_n] in ONE llama_decode with logits at every position, the acceptance
// rule keeps a prefix and adds one target token, and both caches drop what was rejected. With no
// draft (or n_draft = 0) the same loop is plain autoregressive decoding on the same engine.
// Not here: drafting (drafting.h), acceptance (acceptance.h), cache rollback (kv_cache.h).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "batching/slot_batcher.h"
#include "dsi/dsi.h"
#include "engine/kv_cache.h"
#include "sampling/controls.h"
#include "sampling/grammar.h"
#include "speculative/acceptance.h"
#include "speculative/draft_length.h"
#include "speculative/drafting.h"
#include "speculative/lookup.h"
#include "speculative/prediction.h"
#include "speculative/text.h"
#include "speculative/vocab_map.h"

namespace specllama {

class model_dsi_server;  // dsi/backends.h

// the loop's clock, and the milliseconds since t by it
using clock_type = std::chrono::steady_clock;
inline double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

struct decoder_params {
    model_params                target;
    std::optional<model_params> draft;           // none: plain decoding only
    context_params              ctx;             // for both models, but for the draft's fields below
    int32_t                     n_threads_draft = 0;  // 0 = ctx.n_threads
    std::string                 type_k_draft = "f16";  // the draft's cache formats (context_params::type_k)
    std::string                 type_v_draft = "f16";
    int32_t                     n_draft = 10;    // tokens drafted per step when a generation does not say
    // when the draft is the target in another number format (kv_interchangeable), give it the
    // prompt's keys and values from the target's cache instead of processing the prompt again;
    // likewise DSI's extra target servers. Only where neither model is offloaded to a GPU.
    bool                        share_prefill = true;
    // how the draft catches up on a step's new tokens (the last draft and the target's token after
    // a fully accepted step): "batch" (one decode), "tokens" (one decode each, for at most
    // k_catch_up_by_token of them: model_drafter::set_catch_up_by_token), "auto" (tokens where the
    // draft is on a GPU of this machine and not a slot's, else batch)
    std::string                 draft_catch_up = "auto";
    // the shape of a verification batch: "exact" (the last token and the drafts), "padded" (one
    // length in every step of a generation, the drafts followed by copies of the last, whose rows
    // are read by no one and whose cache cells the rollback drops: n_draft + 1 tokens where the
    // draft length is fixed; in an adaptive generation the drafts worth padding for at the rule's
    // prices plus one, draft_length_model::padded_length, and no step drafts more), "auto" (padded
    // where the target is on a GPU of this machine, samples there and its memory drops a tail: a
    // recurrent or window-only one, or a slot's, is never padded). A GPU replays a recorded graph
    // for a decode shaped like the one before and runs one of a new shape without it. Mode dsi:
    // "padded", or "auto" on a GPU of this machine, pads each server's batch to sp * lookahead
    // tokens, every row an output
    std::string                 verify_shape = "auto";
    // the steps of a run of drafting (or of plain) steps that the adaptive draft length takes as
    // transitions, whose costs price neither (draft_length_model::set_settle_steps); -1: 2 where
    // either model is on a GPU of this machine (CUDA graphs: a new shape runs without its graph,
    // the next alike records it), 0 elsewhere. Above 0, probes read first (set_read_probes)
    int32_t                     settle_steps = -1;
    // where settle_steps resolves above 0, whether a paused draft's probes read first (set_read_probes);
    // false: every probe drafts
    bool                        probe_reads = true;
    // where DSI's target servers beyond the first run (the first is the decoder's target context):
    // server s + 1 on dsi_servers[s], every layer offloaded there, its own copy of the target's
    // weights; servers past the list share the target's weights and placement
    std::vector<placement>      dsi_servers;
};

// who proposes the drafts
enum class drafter_kind {
    automatic,     // model_lookup with a draft model (the model alone in DSI); plain decoding without one
    model,         // the draft model
    lookup,        // prompt lookup only (no draft model needed)
    model_lookup,  // the draft model; where it stops early, prompt lookup fills the rest
};

// how sampled drafts are verified (greedy decoding always keeps drafts equal to the argmax)
enum class accept_rule {
    rejection,  // min(1, p/q) with a residual draw: keeps the most (Leviathan et al.)
    match,      // sample the target, keep equal drafts (llama.cpp's rule; for comparison)
    keyed,      // match with draws keyed by position, the draft's too (accept_keyed): the output is
                // plain decoding's with the same seed, whatever is drafted
};

enum class decode_mode {
    si,   // speculative decoding: draft, then verify, in turn
    dsi,  // Distributed Speculative Inference: drafting never waits for verification (dsi.h)
};

// the names the bindings and the CLI use ("auto", "model", "lookup", "model+lookup"; "rejection",
// "match", "keyed"; "si", "dsi"); parsing throws std::invalid_argument listing the names
drafter_kind drafter_from_string(const std::string & name);
std::string  drafter_to_string(drafter_kind kind);
accept_rule  accept_rule_from_string(const std::string & name);
struct generate_params;
accept_rule  effective_rule(const generate_params & p);  // the rule a generation with p verifies by
std::string  acceptance_name(const generate_params & p);  // generate_stats::acceptance for p
std::string  accept_rule_to_string(accept_rule rule);
decode_mode  decode_mode_from_string(const std::string & name);
std::string  decode_mode_to_string(decode_mode mode);

// Distributed Speculative Inference (dsi.h) on this decoder's models
struct dsi_options {
    int32_t sp               = 1;     // target servers (contexts on the shared target model)
    int32_t lookahead        = 4;     // drafted tokens per verification task
    int32_t n_threads_draft  = 0;     // drafter threads; 0: split the decoder's thread budget
    int32_t n_threads_server = 0;     // threads per server; 0: split the decoder's thread budget
    bool    overlap          = true;  // false: SI on the same code path (each verification waited for)
    // every position waits for the drafter's proposal before the target's prediction is used, so
    // every emitted token is a judged draft whatever the threads' timing (deterministic checking)
    bool    wait_for_drafts  = false;
};

// prices the adaptive draft length uses instead of measured times: the same prices give the same
// draft lengths on any machine and under any load (tests, and what-if runs for another machine)
struct step_prices {
    double draft_ms        = 0;  // one draft decode (the catch-up decode too)
    double verify_ms       = 0;  // a one-token verification
    double verify_token_ms = 0;  // each further token of a verification batch
};

struct generate_params {
    int32_t                  max_tokens = 256;  // tokens to generate at most
    std::optional<int32_t>   n_draft;           // tokens drafted per step, 1..k_max_draft; none: the decoder's
    sampling_params          sampling;
    std::optional<uint64_t>  seed;              // none: a random seed
    std::vector<std::string> stop;              // stop strings (not included in the text)
    bool                     ignore_eos = false;  // keep going past end-of-generation tokens
    // special tokens spelled out in the text where generated (a chat format's tags that are control
    // tokens, as llama-server's preserved tokens); others are left out of it, as llama.cpp does
    std::vector<llama_token> preserved_tokens;
    bool preserves(llama_token t) const {
        return std::find(preserved_tokens.begin(), preserved_tokens.end(), t) != preserved_tokens.end();
    }
    bool                     speculative = true;  // false: plain decoding on the target, same loop
    // choose each step's draft length (<= n_draft) by expected speed; none: adaptive unless sampling
    // with a seed by the rejection or match rule (adaptive lengths follow measured times, which would
    // make their seeded output irreproducible)
    std::optional<bool>      adaptive;
    drafter_kind             drafter  = drafter_kind::automatic;
    // none: keyed where sampling with a seed in mode si (the output is then plain decoding's with
    // that seed), else rejection (effective_rule)
    std::optional<accept_rule> rule;
    lookup_params            lookup;
    // a prediction of the output (OpenAI's Predicted Outputs, in the target's tokens): where the output
    // follows it, its next tokens are drafted first, at no draft decode (prediction.h), whatever the
    // drafter; the draft model drafts where the output leaves it. Mode si, speculative; empty: none
    std::vector<llama_token> prediction;
    std::optional<step_prices> prices;          // none: the adaptive rule prices steps by measured times
    decode_mode              mode = decode_mode::si;
    dsi_options              dsi;               // mode dsi only
    bool                     record_steps = false;  // keep a step_trace of every step in the stats (mode si)
    // >= 1: while the target verifies a step's drafts, the draft model goes on drafting this many
    // tokens past them, as if all were kept: its guess of the target's own next token, then drafts
    // after it. Where the step keeps every draft and the target's token is that guess, the next
    // step starts with those drafts made (decoder::draft_ahead). On a GPU the verification is
    // launched first and the draft's decodes run while it computes, on the draft context's own
    // stream; on a CPU they run after it. Fixed draft lengths (adaptive false), the draft model
    // drafting, mode si, a draft of the target's vocabulary whose cache drops a tail, no grammar,
    // not a slot. Its steps do not price the adaptive draft length. 0: off
    int32_t                  draft_ahead = 0;
    // llama.cpp's infill sampler after the chain, on the target's vocabulary (sampling_params::infill),
    // for the target's p and the draft's q alike (mode si; a draft of another vocabulary samples at
    // the target's ids: model_drafter)
    bool                     infill = false;
    // >= 1: after an edit in the middle of a prompt, runs of at least this many tokens that the
    // caches hold at other positions move to their new positions instead of being decoded again
    // (llama-server's --cache-reuse, here also after inserted text: kv_cache::keep_reusable). The
    // output then follows the target given those moved keys and values, not a fresh pass over the
    // prompt. 0: only the common prefix is reused. Mode si on a decoder's own caches (not a slot's)
    int32_t                  cache_reuse = 0;
    // logit bias and repetition penalties before the chain (sampling/controls.h), applied at every
    // drafted and verified position with its own history, to the draft's logits and the target's
    // alike (mode si)
    logit_controls           controls;
    // >= 0: each emitted token's log-probability under the target's final distribution at its
    // position (the chain's; greedy: the softmax of the logits after the controls), with the
    // logprobs likeliest tokens there (at most k_max_logprobs); none: not computed (mode si)
    std::optional<int32_t>   logprobs;
    // a GBNF grammar (llama.cpp's) the output must follow, from rule grammar_root: the tokens it
    // rejects are masked out of the target's and the draft's logits alike at every position, with
    // its state after the tokens before it (mode si); "": none
    std::string              grammar;
    std::string              grammar_root = "root";
    // a lazy grammar (llama.cpp's, as llama-server's for tool calls): it allows everything until the
    // output matches one of these regular expressions (then it follows from the first capture
    // group's start, or the match's) or holds one of these tokens (from that token on)
    std::vector<std::string> grammar_trigger_patterns;
    std::vector<llama_token> grammar_trigger_tokens;
    // a lazy grammar's: where a reasoning model's thinking may come first, the grammar reads the reply
    // from after the thinking on (grammar_state)
    thinking_markup          grammar_thinking;
    // where the grammar leaves no choice of the next characters, propose their tokens as drafts with
    // q = 1 ahead of the draft model, without draft decodes to choose them (grammar_forcing)
    bool                     forced_drafts = true;
    // run the sampling chain inside llama_decode, on the device with the output layer, so that only
    // each row's candidates come back (sampling/device_sampling.h), where the generation allows it
    // (a decoder's own caches, mode si or dsi; no grammar, controls, greedy log-probabilities, top_k 0);
    // false: every row comes back whole and the host samples (generate_stats::sampling says which
    // ran). None: for each model whose layers are offloaded to a GPU (on a CPU the chain runs on the
    // same cores as the host's, and was measured 1-2% slower there)
    std::optional<bool>      device_sampling;
};

constexpr int32_t k_max_logprobs = 20;

// an emitted token's log-probability (generate_params::logprobs), and the likeliest tokens at its
// position, most likely first
struct token_logprob {
    llama_token                                token   = -1;
    float                                      logprob = 0;
    std::vector<std::pair<llama_token, float>> top;
};

// maximum n_draft: the verification batch (n_draft + 1 tokens) must fit in one ubatch
constexpr int32_t k_max_draft = 64;
// decoder_params::draft_catch_up "tokens": catch-ups of at most this many tokens go one by one (a
// fully accepted step's are two; longer ones follow a pause, where a batch's cost is worth it)
constexpr int32_t k_catch_up_by_token = 4;
// decoder_params::settle_steps -1 on a GPU: llama.cpp's CUDA backend runs a decode of a new shape
// without its graph and records it at the next alike; the one after replays it
constexpr int32_t k_graph_settle_steps = 2;
// with fixed draft lengths, forced drafts are proposed while the target keeps at least this share of them
constexpr double k_forced_min_accept = 0.7;
// maximum DSI target servers
constexpr int32_t k_max_servers = 64;

// one step as the adaptive rule saw it (generate_params::record_steps): what it drafted, the draft's
// confidences, what it cost and what was kept, and the rule's state when the step began
struct step_trace {
    step_record record;           // what the rule was told of the step (draft_length.h)
    int32_t     n_max    = 0;     // tokens the step could draft at most
    bool        paused   = false; // the rule had paused the draft model when the step began
    bool        probe    = false; // the step was a probe of a paused draft model
    bool        read     = false; // it began with a probe's read (draft_length_model::set_read_probes):
    int32_t     read_n   = 0;     // the positions the read judged,
    double      read_foretold = 0;  // and the sum of their chances of being kept (model_drafter::read),
    double      read_ms  = 0;     // and what it cost (as priced, with generate_params::prices)
    double      rate     = 0;     // the rule's long-run tokens per ms when the step began
    double      acceptance = 0;   // its overall acceptance estimate then
};

struct generate_stats {
    int32_t              n_prompt        = 0;  // prompt tokens
    int32_t              n_prompt_cached = 0;  // of which were already in the target's cache
    int32_t              n_prompt_reused = 0;  // of those, moved to new positions (generate_params::cache_reuse)
    int32_t              n_prompt_shared = 0;  // prompt tokens the draft took from the target's cache
    int32_t              n_resume_shared = 0;  // tokens it lacked and took from there when the model drafted again after a pause
    int32_t              n_generated     = 0;  // tokens emitted
    int32_t              n_steps         = 0;  // target verification passes
    int32_t              n_drafted       = 0;  // tokens the draft proposed
    int32_t              n_accepted      = 0;  // of which the target kept
    int32_t              n_lookup_drafted  = 0;  // of the drafted tokens, proposed by prompt lookup
    int32_t              n_lookup_accepted = 0;  // of which the target kept
    int32_t              n_prediction_drafted  = 0;  // of the drafted tokens, the prediction's (generate_params::prediction)
    int32_t              n_prediction_accepted = 0;  // of which the target kept
    int32_t              n_forced_drafted  = 0;  // of the drafted tokens, forced by the grammar (generate_params::forced_drafts)
    int32_t              n_forced_accepted = 0;  // of which the target kept
    int32_t              n_paused_steps    = 0;  // steps the adaptive rule left the draft model out of (no pay)
    int32_t              n_ahead_drafted   = 0;  // tokens drafted during verifications (generate_params::draft_ahead)
    int32_t              n_ahead_used      = 0;  // of which became a later step's drafts
    // probes after a pause whose draft caught up on (or read) the last tokens alone (decoder::k_probe_window)
    int32_t              n_window_catch_ups = 0;
    // probes that read first (draft_length_model::set_read_probes), and of those, the ones the read called off
    int32_t              n_probe_reads      = 0;
    int32_t              n_probe_reads_off  = 0;
    std::vector<int32_t> accepted_hist;         // accepted_hist[k]: steps that kept k drafts
    std::vector<step_trace> steps;              // every step, with generate_params::record_steps
    std::string          drafter = "none";      // who drafted: "model", "lookup", "model+lookup", "none"
    // how the target's tokens were drawn and drafts judged: "greedy" (temperature 0: argmax, drafts
    // kept while equal to it), else effective_rule's name ("rejection", "match", "keyed"), also
    // where nothing was drafted (keyed draws are the target's draws there too)
    std::string          acceptance = "greedy";
    // how the draft model's tokens reach the target: "same" (one vocabulary) or "intersection"
    // (another vocabulary, by token-level intersection: vocab_map.h); "none" without a draft model
    std::string          vocab = "none";
    double               vocab_shared = 0;      // intersection: share of the draft's tokens the target has
    // how rejected drafts leave the models' memory: "kv" (the KV cache drops its tail) or
    // "checkpoint" (a recurrent or hybrid model goes back to a saved state and decodes the kept
    // tokens again); t_rollback_ms is the time checkpoints, restores and those decodes took,
    // n_redecoded the tokens decoded again (both models; also a window-only cache's, see kv_cache.h)
    std::string          rollback = "kv";
    // with "checkpoint": where the recurrent models' per-step checkpoints live, "device" or "host"
    // (context_params::checkpoint_memory), "device and host" where the two models differ; "" with "kv"
    std::string          checkpoint_memory;
    double               t_rollback_ms = 0;
    int64_t              n_redecoded   = 0;
    double               t_prefill_ms = 0;      // prompt processing, both models (or the target and the copy)
    double               t_draft_ms   = 0;      // draft decodes and draft sampling
    double               t_vocab_ms   = 0;      // of which pairing two vocabularies: masking, converting tokens
    double               t_verify_ms  = 0;      // target decodes
    double               t_accept_ms  = 0;      // target sampling and acceptance
    double               t_draft_sample_ms = 0;  // of t_draft_ms, choosing drafted tokens from the draft's logits
    double               t_decode_ms  = 0;      // after the prompt, time inside llama_decode (both models)
    double               t_total_ms   = 0;      // the whole call

    double acceptance_rate() const { return n_drafted > 0 ? (double) n_accepted / n_drafted : 0.0; }
    // generated tokens per second after the prompt is processed
    double tokens_per_second() const {
        double t = t_total_ms - t_prefill_ms;
        return t > 0 ? n_generated * 1000.0 / t : 0.0;
    }
    // time in the loop outside the model calls and the acceptance rule
    double t_other_ms() const { return t_total_ms - t_prefill_ms - t_draft_ms - t_verify_ms - t_accept_ms; }
    // after the prompt, the loop's own work on the host: everything outside llama_decode
    double t_host_ms() const { return std::max(0.0, t_total_ms - t_prefill_ms - t_decode_ms); }
    // after the prompt, bytes of logits both models' decodes wrote out for the host (a row of n_vocab
    // floats per drafted or verified position; with device sampling, each row's candidates)
    int64_t logits_bytes = 0;
    // after the prompt, the draft model's decodes (llama_decode calls: its catch-ups and drafts)
    int64_t n_draft_calls = 0;
    // the CPU threads each model's decodes used at the end (kv_cache::n_threads; the draft's 0 where
    // no draft model ran), whether a count was tuned (n_threads -1 and the model on the CPU alone:
    // thread_tuner.h), and the decodes of either model run at another count to compare
    int32_t n_threads       = 0;
    int32_t n_threads_draft = 0;
    bool    threads_tuned   = false;
    int64_t n_thread_probes = 0;
    // where the models' rows were sampled (generate_params::device_sampling): "device", "host", or
    // "device (target), host (draft)" and the reverse; host_sampling_reason says why the host did
    // ("" where it did not): "grammar", "logit bias or penalties", "top_k 0 ...", ...
    std::string sampling = "host";
    std::string host_sampling_reason;
    // tokens emitted per verification step (accepted drafts + the target's own token)
    double mean_accepted_length() const { return n_steps > 0 ? (double) n_generated / n_steps : 0.0; }
};

struct dsi_report {
    dsi_stats stats;
    int32_t   sp = 0, lookahead = 0, n_threads_draft = 0, n_threads_server = 0;
    bool      overlap = true;
    int32_t   pad_to   = 0;  // the servers' padded batch length (0: not padded)
    int64_t   n_padded = 0;  // tokens the servers decoded as padding

    // verification time the drafter did not wait for: the used verification time less its waits
    double t_verify_hidden_ms() const;
    // that over the used verification time
    double verify_hidden_share() const;
};

struct generate_result {
    std::vector<llama_token> tokens;
    std::string              text;
    std::string              finish_reason;  // "stop" (end token or stop string), "length", "cancelled"
    bool                     context_full = false;  // "length" because the context had no room left
    generate_stats           stats;
    std::optional<dsi_report> dsi;                  // mode dsi only
    std::vector<token_logprob> logprobs;            // one per token, with generate_params::logprobs
};

// what one verification step added
struct step_event {
    std::vector<llama_token> tokens;  // tokens emitted by this step
    std::string              text;    // text safe to show now (may lag tokens: stop strings, UTF-8)
    int32_t                  n_drafted  = 0;
    int32_t                  n_accepted = 0;
    std::vector<token_logprob> logprobs;  // one per token, with generate_params::logprobs
};

// called after every step; return true to stop. May throw (e.g. Ctrl-C): generation stops and the
// decoder stays usable, since steps are complete when it is called.
using step_callback = std::function<bool(const step_event &)>;
// called between prompt chunks; may throw to stop
using interrupt_check = std::function<void()>;

// where a slot's caches live: sequence seq of contexts shared with other slots (slot_batcher.h)
struct slot_place {
    std::shared_ptr<shared_context> target;
    std::shared_ptr<shared_context> draft;  // null without a draft model
    llama_seq_id                    seq = 0;
    std::shared_ptr<const vocab_map> vocab;  // the slots' pairing of two vocabularies (null: one)
};

// most slots one decoder() makes
constexpr int32_t k_max_slots = 256;

class decoder {
  public:
    explicit decoder(const decoder_params & params);
    // a decoder on models already loaded (params' paths are not read): caches of its own on the
    // same weights, or a slot's (slot_place)
    decoder(const decoder_params & params, std::shared_ptr<model> target, std::shared_ptr<model> draft,
            const std::optional<slot_place> & slot = std::nullopt);

    // n decoders on this one's models (not loaded again) whose caches, of n_ctx positions each
    // (0: this one's), are sequences of one context per model. One thread runs all their decodes
    // and merges those the slots send at the same time: slots generating in parallel threads verify
    // in one llama_decode and draft in one (slot_batcher.h). max_wait_us: how long a decode is held
    // for slots still busy between decodes.
    std::vector<std::unique_ptr<decoder>> slots(int32_t n, int32_t n_ctx, int32_t max_wait_us = 100000);
    // a decoder on this one's models (not loaded again) with caches and an adaptive draft length of
    // its own, and the settings of params (start from settings(); its models' parameters are
    // ignored: they are this one's). Not for a slot.
    std::unique_ptr<decoder> sibling(decoder_params params) const;
    const decoder_params &   settings() const { return params_; }
    // whether this decoder is one of slots()'s, and its group's batching so far
    bool    is_slot() const { return batcher_ != nullptr; }
    int64_t slot_decodes() const { return batcher_ ? batcher_->n_decodes() : 0; }  // llama_decode calls
    int64_t slot_chunks() const { return batcher_ ? batcher_->n_chunks() : 0; }    // slots' decodes merged into them
    const batch_drafting * slot_drafting() const { return batcher_ ? &batcher_->drafting() : nullptr; }

    // generate after prompt, by params.mode. Reuses the longest prefix of prompt already in the
    // caches, so a conversation that grows turn by turn is not processed again.
    generate_result generate(const std::vector<llama_token> & prompt, const generate_params & params,
                             const step_callback & on_step = nullptr, const interrupt_check & check = nullptr);

    // throws std::invalid_argument naming the first parameter this decoder cannot run with
    void validate(const generate_params & params) const;
    // who drafts in a generation with params: "model", "lookup", "model+lookup" or "none" (plain)
    std::string drafter_name(const generate_params & params) const;

    const model & target() const { return *target_; }
    const model * draft() const { return draft_.get(); }
    std::shared_ptr<model> target_shared() const { return target_; }
    std::shared_ptr<model> draft_shared() const { return draft_; }
    int32_t n_ctx() const { return tgt_cache_->n_ctx(); }
    // whether the draft takes the prompt's keys and values from the target (decoder_params::share_prefill)
    bool shares_prefill() const { return share_prefill_; }
    // decoder_params::draft_catch_up as resolved: "batch" or "tokens" ("" without a draft model)
    std::string draft_catch_up() const;
    // decoder_params::verify_shape as resolved for this decoder: "exact", "padded", or "auto" (padded
    // in generations whose target samples on its device)
    std::string verify_shape() const { return pad_verify_ == 0 ? "exact" : pad_verify_ == 1 ? "padded" : "auto"; }
    // decoder_params::settle_steps as resolved for this decoder
    int32_t settle_steps() const { return lengths_.settle_steps(); }
    // decoder_params::probe_reads
    bool probe_reads() const { return params_.probe_reads; }
    // the pairing of the draft's vocabulary with the target's when they differ (null: they are one)
    const vocab_map * cross_vocab() const { return vocab_map_.get(); }

    // tokens held in the target's cache (what a following prompt can reuse)
    std::vector<llama_token> cached_tokens() const;
    // tokens held in the draft's cache (empty without a draft model)
    std::vector<llama_token> draft_cached_tokens() const;
    // target tokens as the draft reads them: themselves with one vocabulary, else their draft_view
    // (vocab_map.h), converted afresh
    std::vector<llama_token> draft_view_of(const std::vector<llama_token> & target_tokens) const;
    // forget both caches
    void reset();
    // decode once, and roll back, each shape a generation's steps will use on a model that is on a
    // GPU of this machine (a verification of n_draft + 1 tokens, of the length an adaptive
    // generation pads to now (draft_length_model::padded_length) and of one, the draft's one-token
    // decode and, where it catches up in one batch, a two-token one): first uses load kernels and grow buffers there, which the
    // adaptive rule would otherwise price as a step's cost (llama.cpp's own programs warm up too).
    // What the caches hold is kept. Then it prices the target's steps for the adaptive rule
    // (price_steps), so that a new decoder's first generation drafts from its second step. Run on
    // creation where either model is on a local GPU; a no-op for a recurrent, window-only or
    // slot's cache
    void warm_up();

    // the adaptive draft length's current estimates
    draft_length_model cost_model() const;
    // what the adaptive draft length has learned (draft_length_model::state), and that state given
    // back to this decoder, or another of the same pair on the same machine and settings
    std::vector<double> adaptive_state() const;
    void                set_adaptive_state(const std::vector<double> & state);
    // tokens drafted per step when a generation does not say (decoder_params::n_draft)
    int32_t n_draft() const { return n_draft_; }

  private:
    decoder_params             params_;
    std::shared_ptr<slot_batcher> batcher_;  // a slot's: shared with the other slots; null otherwise

    // what a generation runs, resolved once from its parameters and this decoder's models
    struct run_plan {
        bool    use_model  = false;  // the draft model drafts
        bool    use_lookup = false;  // prompt lookup drafts, alone or after the model
        bool    use_prediction = false;  // the request's prediction drafts first where the output follows it
        bool    adaptive   = false;  // each step's draft length chosen by expected speed
        int32_t n_draft    = 0;      // the most tokens drafted in a step

        std::string drafter() const;  // "model", "lookup", "model+lookup" or "none"; "+prediction" after it
    };
    // validates params against this decoder and resolves them (throws std::invalid_argument)
    run_plan plan_run(const generate_params & params) const;

    // the speculative loop (speculative/decoder.cpp) and DSI (dsi/decoder_dsi.cpp)
    generate_result generate_si(const std::vector<llama_token> & prompt, const generate_params & params,
                                const run_plan & plan, const step_callback & on_step, const interrupt_check & check);
    generate_result generate_dsi(const std::vector<llama_token> & prompt, const generate_params & params,
                                 const run_plan & plan, const step_callback & on_step, const interrupt_check & check);

    // DSI's steps before the run: its servers (contexts on the target beyond the first, made on
    // first use and kept) and the threads of each context for the run, then the prompt in each
    struct dsi_setup {
        std::vector<kv_cache *>                   caches;  // the servers' caches, the decoder's own first
        std::vector<std::shared_ptr<void>>        thread_scopes;  // restore each context's threads when dropped
        int32_t                                   n_threads_draft = 0, n_threads_server = 0;
    };
    dsi_setup dsi_prepare(const dsi_options & options);
    // the prompt's passes before the run: the first server's, predicting the token after it into
    // first; the copies of its keys and values to the others and to the draft, where they pay
    void      dsi_prefill(const dsi_setup & setup, const std::vector<std::unique_ptr<model_dsi_server>> & servers,
                          const sampling_params & sampling, const std::vector<llama_token> & prompt,
                          generate_stats & st, const interrupt_check & check, dsi_prediction & first);
    // the drafter's and the servers' device chains (place_sampling's, the target's on every server)
    void      dsi_place_sampling(const generate_params & params, const run_plan & plan,
                                 const std::vector<kv_cache *> & caches, generate_stats & st);

    // attach the chains this generation samples with on the device, or detach them where the host
    // samples (sets st.sampling, st.host_sampling_reason)
    void place_sampling(const generate_params & params, const run_plan & plan, generate_stats & st);
    // decodes of both models run at another thread count to compare, so far (decoder_threads.cpp)
    int64_t thread_probes() const;
    // st's thread counts, and its probes since probes0 (from thread_probes())
    void    report_threads(generate_stats & st, bool used_model, int64_t probes0) const;
    // after a step: where the target's tuned thread count moved, the draft's moves with it (both
    // share the cores, and a draft the adaptive rule leaves out of most steps decodes too little
    // to measure its own); its probes go on from there
    void    follow_target_threads();
    // the steps of generate_si, in order:
    // prefill: the target's cache holds all of seq but its last token, or the first verification
    // decodes the tokens it lacks with that token (prompt_rest_); the target's pass prices a
    // batch's tokens for the adaptive length until a batch is verified. The draft's prompt pass
    // waits for the first step that drafts with the model (draft_prompt_later_)
    void prefill(const std::vector<llama_token> & seq, const run_plan & plan, const generate_params & params,
                 generate_stats & st, const interrupt_check & check);
    // the draft's prompt pass: its cache then holds all of seq but its last token too (it may copy
    // the target's); counted in Stats as prompt processing
    void draft_prompt(const std::vector<llama_token> & seq, const run_plan & plan, const generate_params & params,
                      generate_stats & st, const interrupt_check & check);
    // plan: how many tokens this step may draft, and whether the draft model drafts them
    struct step_plan {
        int32_t n_max = 0;      // drafts at most (0: a plain step)
        bool    model = false;  // the draft model drafts (else prompt lookup alone, if any)
    };
    step_plan plan_step(const run_plan & plan, const generate_params & params, const std::vector<llama_token> & seq,
                        generate_stats & st);
    // a probe that reads first (draft_length_model::set_read_probes): the draft reads what it sat out, and the
    // rule judges it; whether the probe drafts (false: the step is plain). Sets read_ for the step's trace
    bool read_probe(const std::vector<llama_token> & seq, const generate_params & params, generate_stats & st);
    // at a generation's start: whether its probes read first (set_read_probes); no plain step's p known yet
    void begin_reads(const generate_params & params, const run_plan & plan);
    bool                       read_ = false;  // the step plan_step planned began with a read (step_trace::read)
    model_drafter::read_result read_result_;   // what it found
    double                     read_ms_ = 0;   // and cost
    // a sampled generation's reads: the target's probability of each token a plain step drew, by its index in
    // seq (0: drawn in a drafting step, or not known); kept by verify_and_accept
    std::vector<float>         read_p_;
    // draft: fill drafted_ (the model's tokens, then lookup's); returns how many the model drafted.
    // A probe of a paused draft model that lags more than k_probe_window tokens behind (and cannot
    // copy the target's keys and values) catches up on the last k_probe_window of them alone: a
    // catch-up on everything since the pause costs a share of every plain step the draft sat out
    // (a recurrent draft on a CPU, the Mamba pair of benchmarks/recurrent_bench.py: 0.9 ms a token
    // against the target's 6.5 ms step), all spent in the probe. The draft keeps that shorter
    // context until the next prompt.
    static constexpr int32_t k_probe_window = draft_length_model::k_probe_window;
    int32_t draft_step(const std::vector<llama_token> & seq, const step_plan & step, const run_plan & plan,
                       const generate_params & params, rng_t & rng, llama_token & probe, generate_stats & st,
                       const interrupt_check & check);
    // whether to propose one more forced draft after n_done drafts that all stand with chance p_reach
    // (updated where it says yes): adaptive, where its place in the verification pays at the long-run
    // rate given how often the target keeps them; with fixed lengths, where it has kept most of this
    // generation's
    bool keep_forced(int32_t n_done, double & p_reach, int32_t n_max, bool adaptive) const;
    // how often the target kept this generation's forced drafts (they are the vocabulary's spelling of
    // the forced text, which a model may spell otherwise); optimistic before any is seen. Per
    // generation, so that a seeded generation's drafts depend on nothing before it
    double forced_accept_prob() const { return forced_seen_ > 0.5 ? forced_kept_ / forced_seen_ : 0.9; }
    // verify and accept: one target batch [last, drafts], the acceptance rule, the target's rollback
    // (verify_ms: the batch's time, and a recurrent target's rollback, for the adaptive length).
    // meanwhile (where given) runs after the batch is launched and before its results are read.
    // The first step's batch comes after prompt_rest_ in the same decode (check runs between its
    // chunks), whose time is then prompt processing (Stats.t_prefill_ms)
    acceptance_result verify_and_accept(const std::vector<llama_token> & seq, const generate_params & params,
                                        rng_t & rng, double & verify_ms, generate_stats & st,
                                        const std::function<void()> & meanwhile, const interrupt_check & check);
    // generate_params::draft_ahead (speculative/draft_ahead.cpp): while the target verifies seq's
    // drafted_, the draft model drafts n tokens after them into ahead_ ...
    void draft_ahead(const std::vector<llama_token> & seq, int32_t n, const generate_params & params, rng_t & rng,
                     generate_stats & st, const interrupt_check & check);
    // throws std::invalid_argument where draft_ahead cannot run with these settings
    void draft_ahead_validate(const generate_params & params, const run_plan & plan) const;
    // ... which the next step starts with where the verification kept every draft and its own token
    // is ahead_'s first (ahead_hit_): that many of the rest (at most n_max) become drafted_'s first
    // drafts. Returns how many
    int32_t take_ahead(int32_t n_max, generate_stats & st);
    // after take_ahead: the draft model drafts on after those drafts, up to n_max in all
    void draft_after_taken(const std::vector<llama_token> & dseq, int32_t n_max, const generate_params & params,
                           rng_t & rng, const draft_continue & keep, const interrupt_check & check);
    // emit: the accepted drafts and the target's token into res and seq, until a stop; fills ev
    void emit(const acceptance_result & acc, const generate_params & params, text_stream & stream,
              std::vector<llama_token> & seq, generate_result & res, step_event & ev, std::string & finish) const;

    // throws unless prompt can be generated after (non-empty, fits the context, valid ids)
    void validate_prompt(const std::vector<llama_token> & prompt) const;
    // append an emitted token to res unless it ends generation; sets finish to "stop" (end token or
    // stop string) or "length" (max_tokens). Returns whether tok was appended.
    bool append_token(llama_token tok, const generate_params & params, text_stream & stream, generate_result & res,
                      std::string & finish) const;

    // append prompt-lookup drafts after the model's (up to n_max in all); sets probe to the first
    // proposal the cost model dropped (-1 if none); returns how many were added
    int32_t add_lookup_drafts(const std::vector<llama_token> & seq, int32_t n_max, bool adaptive,
                              const lookup_params & params, llama_token & probe);
    // append the prediction's drafts after the model's or the grammar's, up to n_max in all: all it has, with
    // or without the adaptive rule (the request says the reply repeats it; where it does not, a step
    // verifies the tokens up to the edit, and the prediction drafts again once the place is found again);
    // sets pred_first_ and n_pred_
    void add_prediction_drafts(const std::vector<llama_token> & seq, int32_t n_max);
    // a step's drafts counted in st once verified: forced, the prediction's, lookup's (and the slots' rule)
    void count_verified(const acceptance_result & acc, int32_t n_model, generate_stats & st);
    // record one step's costs and outcomes (record_) and, where price, feed them to the adaptive
    // draft length (prev_n: tokens drafted in the step before, -1 for the first step after
    // prefill; n_prompt: prompt tokens its verification's decode took in first); prices replace
    // the measured times. A step in which a decode ran at another thread count to compare it
    // (thread_tuner.h) is fed to nothing: its times are not the count's the next steps run at
    void observe_step(int32_t n_model, int32_t n, const acceptance_result & acc, llama_token probe, double draft_ms,
                      double verify_ms, int32_t prev_n, int32_t n_prompt, const std::optional<step_prices> & prices,
                      bool price);

    std::shared_ptr<model>    target_;
    std::shared_ptr<model>    draft_;
    std::unique_ptr<kv_cache> tgt_cache_;
    std::unique_ptr<kv_cache> dft_cache_;
    std::unique_ptr<model_drafter> drafter_;
    std::shared_ptr<const vocab_map> vocab_map_;  // the draft's vocabulary is another (null: the same)
    std::unique_ptr<draft_view>   view_;          // then the sequence in the draft's tokens
    // the sequence as the draft reads it: seq itself, or its draft_view
    const std::vector<llama_token> & draft_seq(const std::vector<llama_token> & seq) {
        return view_ ? view_->update(seq) : seq;
    }
    // the tokens of dseq (all but its last) that a prompt pass of the draft would decode
    int32_t draft_unread(const std::vector<llama_token> & dseq, int32_t reuse) const {
        return (int32_t) dseq.size() - 1 - dft_cache_->n_reusable(dseq, (int32_t) dseq.size() - 1, reuse);
    }
    mutable std::mutex        mutex_;  // one generation at a time per decoder
    // the thread whose generate() holds mutex_ (its callbacks run there); none while idle
    std::atomic<std::thread::id> generating_in_{};
    // what waits for mutex_ (reset, cached_tokens, ...) raises where a generation's own callback
    // calls it: waiting there would never end
    void not_from_own_generation(const char * what) const;
    context_params            ctx_params_;
    int32_t                   n_threads_draft_ = 0;
    int32_t                   n_draft_         = 10;  // decoder_params::n_draft
    bool                      share_prefill_   = false;  // the draft copies the target's prompt KV
    bool                      copy_server_prefill_ = false;  // DSI servers copy the first server's
    std::vector<std::unique_ptr<kv_cache>> dsi_servers_;  // DSI's target servers beyond the first
    std::vector<std::shared_ptr<model>>    dsi_models_;   // the target loaded where dsi_servers places it

    draft_length_model        lengths_;  // costs and calibration, kept across generations
    bool                      model_sits_out_ = false;  // this generation: its prompt pass would not pay
    int32_t                   read_after_     = 0;      // where it sits out for now: the tokens made before it reads
    bool                      draft_prompt_later_ = false;  // this generation: the draft has not read the prompt yet
    int32_t                   draft_held_ = 0;  // a slot's: the prompt's tokens the draft held then (plan_step)
    std::vector<llama_token>  prompt_rest_;  // the prompt tokens prefill left for the first verification
    int8_t                    pad_verify_ = 0;  // decoder_params::verify_shape: 0 exact, 1 padded, 2 auto
    int32_t                   pad_to_     = 0;  // this generation's verification length (0: exact)
    bool                      repad_      = false;  // it pads again once the rule's prices are measured
    // an adaptive generation's verification length now, drafting at most n_draft: the rule's padded
    // length, plus one
    int32_t adaptive_pad(int32_t n_draft) const { return lengths_.padded_length(n_draft) + 1; }
    // warm_up's last part: the target's one-token and n_batch-token shapes decoded until steady (the
    // first decode of each is its warm-up), and the last timings given to the rule as the prices of
    // a plain step and of a verification (tok: a token to decode, then drop)
    void price_steps(llama_token tok, int32_t n_batch);

    // per-step buffers, reused
    draft_result              drafted_;
    draft_result              ahead_;          // drafted during the last verification (draft_ahead)
    draft_result              more_;           // drafted after ahead_'s in a step
    std::vector<llama_token>  ahead_seq_;      // seq and its drafts, as draft_ahead drafts after them
    bool                      ahead_hit_ = false;  // the last step kept all its drafts and ahead_'s guess
    std::vector<token_dist>   p_;
    std::vector<llama_token>  lookup_seq_;
    std::vector<llama_token>  batch_;
    step_record               record_;
    int64_t                   probes_seen_ = 0;  // thread_probes() at the end of the last step
    int32_t                   target_threads_seen_ = 0;  // the target's thread count then
    acceptance_scratch        scratch_;
    logit_editor              editor_;  // generate_params::controls on the target's logits
    std::vector<token_logprob> step_logprobs_;  // of the step's emitted tokens (generate_params::logprobs)
    std::vector<float>        grammar_row_;     // the target's logits under the grammar
    std::optional<grammar_forcing> forcing_;    // the target's vocabulary's probe for forced text (made at first use)
    std::vector<llama_token>  forced_;          // the tokens a grammar forces, in a step without the draft model
    double                    forced_kept_ = 0, forced_seen_ = 0;  // forced_accept_prob(), decayed counts
    prediction_tracker        prediction_;  // this generation's generate_params::prediction
    int32_t                   pred_first_ = 0, n_pred_ = 0;  // the step's prediction drafts in drafted_
};

// throws std::invalid_argument naming the first bad parameter (what any decoder would refuse)
void generate_params_validate(const generate_params & params);

}  // namespace specllama
