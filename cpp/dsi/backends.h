// dsi/backends.h: what the DSI orchestrator (dsi.h) drives. On llama.cpp: the draft model
// proposing one token at a time, and target servers that are contexts on the shared target
// model, each with its own KV cache and threads. Simulated: a drafter and servers whose forward
// passes are waits of given latencies and whose drafts are right where a given pattern says,
// so that the simulation measures the orchestrator's real code path.
// Not here: the orchestration (dsi.h).
#pragma once

#include <vector>

#include "speculative/drafting.h"
#include "dsi/dsi.h"
#include "engine/kv_cache.h"

namespace specllama {

class model_dsi_drafter : public dsi_drafter {
  public:
    // catch_up_by_token: model_drafter::set_catch_up_by_token
    explicit model_dsi_drafter(kv_cache & cache, int32_t catch_up_by_token = 0) : cache_(cache), drafter_(cache) {
        drafter_.set_catch_up_by_token(catch_up_by_token);
    }
    bool propose(const std::vector<llama_token> & seq, int32_t n_verified, const sampling_params & params,
                 rng_t & rng, const std::atomic<bool> & cancel, llama_token & token, token_dist & q) override;
    // read_prompt decodes what the cache lacks of the prompt but its last token (model_drafter::
    // prefill), when asked to by set_reads_prompt; else the caller cached it before the run
    int32_t read_prompt(const std::vector<llama_token> & prompt, const std::atomic<bool> & stop) override;
    void set_reads_prompt(bool on) { reads_prompt_ = on; }

  private:
    kv_cache &    cache_;
    model_drafter drafter_;
    draft_result  out_;
    bool          reads_prompt_ = false;
};

// a target server: catches its cache up on what it has not seen and verifies, in one batch.
// Both keep a recurrent or hybrid state's checkpoint where the verified text ends: a restart
// after a rejection comes back there.
// pad_to > 0: a batch shorter than that is padded to pad_to tokens with copies of its last, every
// row an output, so that every verification has one shape (a GPU replays its recorded graph for a
// decode shaped like the one before, decoder_params::verify_shape); the padding's rows are read by
// no one and its cache cells are dropped at once. A memory that cannot drop a tail is never padded.
class model_dsi_server : public dsi_server {
  public:
    explicit model_dsi_server(kv_cache & cache, int32_t pad_to = 0)
        : cache_(cache), pad_to_(cache.recurrent() || cache.window_only() ? 0 : pad_to) {}
    bool verify(const std::vector<llama_token> & seq, int32_t first, int32_t n_verified,
                const sampling_params & params, const std::atomic<bool> & cancel,
                std::vector<dsi_prediction> & preds) override;
    // before the run: decode what the cache lacks of the prompt, and the target's prediction for the
    // token after it into out, in one pass (a memory that cannot drop a tail: the prompt but its
    // last token first, keeping a checkpoint there for the next run, then that token).
    // between_chunks: kv_cache::decode's. Returns the prompt tokens the cache held.
    int32_t predict_first(const std::vector<llama_token> & prompt, const sampling_params & params,
                          const std::function<void()> & between_chunks, dsi_prediction & out);
    // decode what the cache lacks of the prompt but its last token, keeping a checkpoint there (a
    // memory that cannot drop a tail comes back to it for the next run); returns the tokens it held
    int32_t prefill(const std::vector<llama_token> & prompt, const std::function<void()> & between_chunks = nullptr);
    // with set_reads_prompt, read_prompt runs prefill in the server's thread as the run starts; else
    // the caller cached the prompt before the run
    bool    reads_prompt() const override { return reads_prompt_; }
    int32_t read_prompt(const std::vector<llama_token> & prompt, const std::atomic<bool> & stop) override;
    void    set_reads_prompt(bool on) { reads_prompt_ = on; }

    int32_t pad_to() const { return pad_to_; }
    int64_t n_padded() const { return n_padded_; }  // tokens decoded as padding so far

  private:
    // the prediction from the last decode's output row i
    void read(int32_t i, const sampling_params & params, dsi_prediction & out) const;

    kv_cache &               cache_;
    int32_t                  pad_to_   = 0;
    int64_t                  n_padded_ = 0;
    bool                     reads_prompt_ = false;
    std::vector<llama_token> batch_;
};

// the simulated text: after the prompt the target's token at index j is truth(j); the drafter
// proposes it where drafter_right[j - n_prompt] is set and another token elsewhere
struct simulated_world {
    int32_t           n_prompt = 1;
    int32_t           n_vocab  = 1000;
    uint64_t          seed     = 0;
    std::vector<char> drafter_right;

    llama_token truth(int32_t j) const;
    // seq[n_prompt .. end) is the true text
    bool on_truth(const std::vector<llama_token> & seq, int32_t end) const;
};

// prompt_ms > 0: it reads the prompt in its thread as the run starts, a wait of prompt_ms
class simulated_drafter : public dsi_drafter {
  public:
    simulated_drafter(const simulated_world & world, double latency_ms, double prompt_ms = 0)
        : world_(world), latency_ms_(latency_ms), prompt_ms_(prompt_ms) {}
    bool propose(const std::vector<llama_token> & seq, int32_t n_verified, const sampling_params & params,
                 rng_t & rng, const std::atomic<bool> & cancel, llama_token & token, token_dist & q) override;
    int32_t read_prompt(const std::vector<llama_token> & prompt, const std::atomic<bool> & stop) override;

  private:
    const simulated_world & world_;
    double                  latency_ms_;
    double                  prompt_ms_;
};

// prompt_ms > 0: it reads the prompt in its thread as the run starts, a wait of prompt_ms
class simulated_server : public dsi_server {
  public:
    simulated_server(const simulated_world & world, double latency_ms, double prompt_ms = 0)
        : world_(world), latency_ms_(latency_ms), prompt_ms_(prompt_ms) {}
    bool verify(const std::vector<llama_token> & seq, int32_t first, int32_t n_verified,
                const sampling_params & params, const std::atomic<bool> & cancel,
                std::vector<dsi_prediction> & preds) override;
    bool    reads_prompt() const override { return prompt_ms_ > 0; }
    int32_t read_prompt(const std::vector<llama_token> & prompt, const std::atomic<bool> & stop) override;

  private:
    const simulated_world & world_;
    double                  latency_ms_;
    double                  prompt_ms_;
};

// wait ms milliseconds unless cancel is set first (then false)
bool wait_unless_cancelled(double ms, const std::atomic<bool> & cancel);

}  // namespace specllama
