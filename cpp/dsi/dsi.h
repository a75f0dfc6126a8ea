// dsi/dsi.h: Distributed Speculative Inference (Timor et al., Algorithm 1 with its lookahead), over
// abstract drafters and target servers so that the same orchestrator drives real llama.cpp
// contexts (dsi/backends.h) and simulated ones whose forward pass is a wait.
//
// A drafter thread runs ahead of the verified text. The verified text is extended by
// verification tasks: each covers a range [first, last] of sequence indices and asks one of SP
// target servers for the target's prediction at each of them, given the text and drafts before.
// The ranges tile the indices after the verified text: the first task after every restart is
// [L, L] on the verified text alone (the target starting at once, as plain decoding would: this
// is why DSI is never slower than non-SI), and every further `lookahead` drafted tokens make the
// next task. Verification never blocks drafting. Results are used in index order: a draft equal
// to the target's prediction is kept (greedy) or kept by the rejection rule (sampling); at the
// first rejection the target's token (or the residual draw) is emitted, every task and draft
// built on the rejected token is cancelled, and drafting restarts from the corrected text.
// A prediction with no draft beside it (the target was quicker than the drafter) is emitted as
// the target's own token.
//
// With overlap off the same loop is SI (draft `lookahead`, verify [L, L+lookahead], wait), and
// with lookahead 0 it is non-SI: the comparisons run on the same code path.
// Not here: the llama.cpp and simulated backends (dsi/backends.h).
#pragma once

#include <atomic>
#include <functional>
#include <vector>

#include "speculative/acceptance.h"
#include "sampling/sampling.h"

namespace specllama {

// the target's prediction at one index: argmax (greedy) or the distribution to sample (T > 0)
struct dsi_prediction {
    llama_token argmax = -1;
    token_dist  p;
};

class dsi_drafter {
  public:
    virtual ~dsi_drafter() = default;
    // the next token after seq (drawn from q, which it fills when sampling). Returns false when
    // cancel was set meanwhile (the result is not used); may be called again with another seq.
    // seq's first n_verified tokens are verified text: a restart never goes back before them.
    virtual bool propose(const std::vector<llama_token> & seq, int32_t n_verified, const sampling_params & params,
                         rng_t & rng, const std::atomic<bool> & cancel, llama_token & token, token_dist & q) = 0;
    // called once, in the drafter's thread before its first propose, while the servers start on the
    // prompt: where the drafter reads the prompt itself, it does so here (so that the target's first
    // tokens do not wait for it), returning early once stop is set. Returns the tokens it read
    // (0: none, or stopped before it was done)
    virtual int32_t read_prompt(const std::vector<llama_token> & prompt, const std::atomic<bool> & stop) {
        (void) prompt;
        (void) stop;
        return 0;
    }
};

class dsi_server {
  public:
    virtual ~dsi_server() = default;
    // the target's predictions at indices first .. seq.size() given seq (preds[i] is for index
    // first + i; first >= 1; seq's first n_verified tokens are verified text). Returns false when
    // cancel was set meanwhile.
    virtual bool verify(const std::vector<llama_token> & seq, int32_t first, int32_t n_verified,
                        const sampling_params & params, const std::atomic<bool> & cancel,
                        std::vector<dsi_prediction> & preds) = 0;
    // a server that reads the prompt in its thread as the run starts (read_prompt, as the drafter's)
    // gets no task until it has; the others take tasks at once
    virtual bool    reads_prompt() const { return false; }
    virtual int32_t read_prompt(const std::vector<llama_token> & prompt, const std::atomic<bool> & stop) {
        (void) prompt;
        (void) stop;
        return 0;
    }
};

struct dsi_params {
    int32_t lookahead = 4;     // drafted tokens per verification task (0: non-SI; needs overlap off)
    int32_t max_ahead = 0;     // drafted tokens beyond the verified text at most (0: lookahead * (sp + 1))
    bool    overlap   = true;  // false: SI, each verification waited for
    // a prediction is used only once the drafter has proposed a token for its index (where it
    // still can), so every emitted token is a judged draft whatever the threads' timing
    bool    wait_for_drafts = false;
};

struct dsi_stats {
    int32_t n_tasks           = 0;  // verification tasks sent to servers
    int32_t n_tasks_cancelled = 0;  // of which were cancelled or built on a rejected draft
    int32_t n_drafted         = 0;  // tokens the drafter proposed (including cancelled ones)
    int32_t n_checked         = 0;  // drafts the target judged
    int32_t n_accepted        = 0;  // of which were kept
    int32_t n_target_only     = 0;  // tokens emitted from a prediction with no draft beside it
    double  t_total_ms        = 0;  // the whole run
    double  t_draft_ms        = 0;  // the drafter computing
    double  t_draft_idle_ms   = 0;  // the drafter waiting (max_ahead reached, or SI waiting for its task)
    int32_t n_draft_prompt    = 0;  // prompt tokens the drafter read in its thread (dsi_drafter::read_prompt)
    double  t_draft_prompt_ms = 0;  // its time reading them (0 where it read none)
    int32_t n_server_prompt   = 0;  // prompt tokens servers read in their threads (dsi_server::read_prompt), summed
    std::vector<int32_t> n_server_tasks;  // tasks sent to each server
    double  t_verify_ms       = 0;  // servers computing, summed over servers
    double  t_verify_wasted_ms = 0;  // of which on tasks whose results were not used
};

// emit: called for every token verified, in order; return false to stop.
// poll: called every few milliseconds from the calling thread; may throw (Ctrl-C) to stop.
struct dsi_callbacks {
    std::function<bool(llama_token)>  emit;
    std::function<void()>             poll;
    std::function<bool(llama_token)>  is_end;  // a drafted end token: the drafter waits instead of going on
    // after tokens were emitted (how many so far, drafts judged and kept so far); true: stop; may throw
    std::function<bool(int32_t, int32_t, int32_t)> on_round;
};

// Run DSI from the text seq (the prompt; the servers and the drafter catch up on it as part of their
// first batches), verifying indices up to last_index at most. The calling thread orchestrates; the
// drafter and each server run in threads of their own for the duration of the call.
// first: the target's prediction for the index after seq, where a server made it with the prompt's
// own pass (model_dsi_server::predict_first); the first task then starts at the index after it.
dsi_stats run_dsi(dsi_drafter & drafter, const std::vector<dsi_server *> & servers, std::vector<llama_token> seq,
                  int32_t last_index, const sampling_params & sampling, uint64_t seed, const dsi_params & params,
                  const dsi_callbacks & cb, int32_t n_vocab, const dsi_prediction * first = nullptr);

void dsi_params_validate(const dsi_params & params, int32_t n_servers);

}  // namespace specllama
