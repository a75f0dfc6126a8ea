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
    explicit model_dsi_drafter(kv_cache & cache) : cache_(cache), drafter_(cache) {}
    bool propose(const std::vector<llama_token> & seq, int32_t n_verified, const sampling_params & params,
                 rng_t & rng, const std::atomic<bool> & cancel, llama_token & token, token_dist & q) override;

  private:
    kv_cache &    cache_;
    model_drafter drafter_;
    draft_result  out_;
};

// a target server: catches its cache up on what it has not seen and verifies, in one batch.
// Both keep a recurrent or hybrid state's checkpoint where the verified text ends: a restart
// after a rejection comes back there.
class model_dsi_server : public dsi_server {
  public:
    explicit model_dsi_server(kv_cache & cache) : cache_(cache) {}
    bool verify(const std::vector<llama_token> & seq, int32_t first, int32_t n_verified,
                const sampling_params & params, const std::atomic<bool> & cancel,
                std::vector<dsi_prediction> & preds) override;

  private:
    kv_cache & cache_;
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

class simulated_drafter : public dsi_drafter {
  public:
    simulated_drafter(const simulated_world & world, double latency_ms) : world_(world), latency_ms_(latency_ms) {}
    bool propose(const std::vector<llama_token> & seq, int32_t n_verified, const sampling_params & params,
                 rng_t & rng, const std::atomic<bool> & cancel, llama_token & token, token_dist & q) override;

  private:
    const simulated_world & world_;
    double                  latency_ms_;
};

class simulated_server : public dsi_server {
  public:
    simulated_server(const simulated_world & world, double latency_ms) : world_(world), latency_ms_(latency_ms) {}
    bool verify(const std::vector<llama_token> & seq, int32_t first, int32_t n_verified,
                const sampling_params & params, const std::atomic<bool> & cancel,
                std::vector<dsi_prediction> & preds) override;

  private:
    const simulated_world & world_;
    double                  latency_ms_;
};

// wait ms milliseconds unless cancel is set first (then false)
bool wait_unless_cancelled(double ms, const std::atomic<bool> & cancel);

}  // namespace specllama
