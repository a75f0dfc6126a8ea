// dsi/backends.cpp: llama.cpp and simulated drafters and target servers for DSI.
#include "dsi/backends.h"

#include "sampling/device_sampling.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace specllama {

namespace {

// while alive, llama_decode on cache stops early once *flag is set
class abort_scope {
  public:
    abort_scope(kv_cache & cache, const std::atomic<bool> & flag) : cache_(cache) { cache_.set_abort_flag(&flag); }
    ~abort_scope() { cache_.set_abort_flag(nullptr); }
    abort_scope(const abort_scope &)             = delete;
    abort_scope & operator=(const abort_scope &) = delete;

  private:
    kv_cache & cache_;
};

// a memory that cannot drop a tail (kv_cache::recurrent) saves its step checkpoint where the verified
// text ends, at most at limit: decoded up to there first, unless the checkpoint is there already
void checkpoint_verified(kv_cache & cache, const std::vector<llama_token> & seq, int32_t n_verified, int32_t limit) {
    const int32_t at = std::min(n_verified, limit);
    if (!cache.recurrent() || at <= 0 || cache.checkpoint_pos() == at) {
        return;
    }
    const int32_t n_keep = cache.keep_common_prefix(seq, at);
    cache.decode(seq.data() + n_keep, at - n_keep, false);
    cache.checkpoint();
}

}  // namespace

bool model_dsi_drafter::propose(const std::vector<llama_token> & seq, int32_t n_verified,
                                const sampling_params & params, rng_t & rng, const std::atomic<bool> & cancel,
                                llama_token & token, token_dist & q) {
    abort_scope scope(cache_, cancel);
    try {
        // the draft decodes its last token itself (its logits draw the next)
        checkpoint_verified(cache_, seq, n_verified, (int32_t) seq.size() - 1);
        drafter_.draft(seq, 1, params, rng, out_);
    } catch (const decode_aborted &) {
        return false;
    }
    if (out_.tokens.empty()) {
        return false;
    }
    token = out_.tokens[0];
    if (!params.greedy()) {
        std::swap(q, out_.dists[0]);
    }
    return true;
}

int32_t model_dsi_drafter::read_prompt(const std::vector<llama_token> & prompt, const std::atomic<bool> & stop) {
    if (!reads_prompt_ || prompt.size() < 2) {
        return 0;
    }
    abort_scope   scope(cache_, stop);
    const int32_t n_new = (int32_t) prompt.size() - 1 - cache_.common_prefix(prompt, (int32_t) prompt.size() - 1);
    try {
        drafter_.prefill(prompt);
    } catch (const decode_aborted &) {
        return 0;  // the run ended first: the cache holds what it held before
    }
    return n_new;
}

int32_t model_dsi_server::read_prompt(const std::vector<llama_token> & prompt, const std::atomic<bool> & stop) {
    const int32_t n = (int32_t) prompt.size();
    if (!reads_prompt_ || n < 2) {
        return 0;
    }
    abort_scope scope(cache_, stop);
    try {
        return n - 1 - prefill(prompt);
    } catch (const decode_aborted &) {
        return 0;  // the run ended first: the cache holds what it held before
    }
}

int32_t model_dsi_server::prefill(const std::vector<llama_token> & prompt,
                                  const std::function<void()> & between_chunks) {
    const int32_t n      = (int32_t) prompt.size();
    const int32_t n_keep = cache_.keep_common_prefix(prompt, n - 1);
    cache_.decode(prompt.data() + n_keep, n - 1 - n_keep, false, nullptr, between_chunks);
    cache_.keep_checkpoint();  // a state that cannot drop a tail comes back here for the next run
    return n_keep;
}

bool model_dsi_server::verify(const std::vector<llama_token> & seq, int32_t first, int32_t n_verified,
                              const sampling_params & params, const std::atomic<bool> & cancel,
                              std::vector<dsi_prediction> & preds) {
    const int32_t n = (int32_t) seq.size();
    if (first < 1 || first > n) {
        throw std::invalid_argument("a verification task must predict indices in [1, " + std::to_string(n) + "]");
    }
    abort_scope scope(cache_, cancel);
    // the logits at input index first - 1 predict index first: decode from there on at least
    const int32_t n_out = n - (first - 1);
    int32_t row0 = 0;  // the output row of index first
    try {
        checkpoint_verified(cache_, seq, n_verified, first - 1);
        const int32_t n_keep = cache_.keep_common_prefix(seq, first - 1);
        const int32_t n_new  = n - n_keep;
        if (n_new < pad_to_ && n_keep + pad_to_ <= cache_.n_ctx()) {
            batch_.assign(seq.begin() + n_keep, seq.end());
            batch_.resize(pad_to_, seq.back());
            cache_.decode_outputs(batch_.data(), pad_to_, pad_to_);
            n_padded_ += pad_to_ - n_new;
            row0 = n_new - n_out;
        } else {
            cache_.decode_outputs(seq.data() + n_keep, n_new, n_out);
        }
    } catch (const decode_aborted &) {
        return false;
    }
    preds.resize(n_out);
    for (int32_t i = 0; i < n_out; ++i) {
        read(row0 + i, params, preds[i]);
    }
    cache_.rollback(n);  // (the padding, where there was any)
    return true;
}

int32_t model_dsi_server::predict_first(const std::vector<llama_token> & prompt, const sampling_params & params,
                                        const std::function<void()> & between_chunks, dsi_prediction & out) {
    const int32_t n = (int32_t) prompt.size();
    int32_t       n_keep;
    if (cache_.recurrent() || cache_.window_only()) {
        n_keep = prefill(prompt, between_chunks);
        cache_.decode(prompt.data() + n - 1, 1, false);
    } else {
        n_keep = cache_.keep_common_prefix(prompt, n - 1);
        cache_.decode(prompt.data() + n_keep, n - n_keep, false, nullptr, between_chunks);
    }
    read(0, params, out);
    return n_keep;
}

void model_dsi_server::read(int32_t i, const sampling_params & params, dsi_prediction & out) const {
    if (cache_.chain().what != device_chain::kind::none) {  // (its candidates came back)
        const sampled_row row = cache_.sampled(i);
        if (params.greedy()) {
            out.argmax = row_argmax(row);
        } else {
            row_distribution(row, params, out.p);
        }
        return;
    }
    const float * logits = cache_.logits(i);
    if (params.greedy()) {
        out.argmax = argmax(logits, cache_.n_vocab());
    } else {
        sampling_distribution(logits, cache_.n_vocab(), params, out.p);
    }
}

bool wait_unless_cancelled(double ms, const std::atomic<bool> & cancel) {
    using clock_type    = std::chrono::steady_clock;
    const auto deadline = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                                  std::chrono::duration<double, std::milli>(ms));
    const auto slice = std::chrono::microseconds(200);
    while (true) {
        if (cancel) {
            return false;
        }
        const auto now = clock_type::now();
        if (now >= deadline) {
            return true;
        }
        std::this_thread::sleep_for(std::min<clock_type::duration>(deadline - now, slice));
    }
}

llama_token simulated_world::truth(int32_t j) const {
    return (llama_token) (splitmix64(seed * 1000003ULL + (uint64_t) j) % (uint64_t) n_vocab);
}

bool simulated_world::on_truth(const std::vector<llama_token> & seq, int32_t end) const {
    for (int32_t j = n_prompt; j < end; ++j) {
        if (seq[j] != truth(j)) {
            return false;
        }
    }
    return true;
}

bool simulated_drafter::propose(const std::vector<llama_token> & seq, int32_t, const sampling_params &, rng_t &,
                                const std::atomic<bool> & cancel, llama_token & token, token_dist &) {
    if (!wait_unless_cancelled(latency_ms_, cancel)) {
        return false;
    }
    const int32_t j   = (int32_t) seq.size();
    const int32_t off = j - world_.n_prompt;
    const bool right  = off >= 0 && off < (int32_t) world_.drafter_right.size() && world_.drafter_right[off];
    token             = right ? world_.truth(j) : (world_.truth(j) + 1) % world_.n_vocab;
    return true;
}

namespace {
// a simulated read of the prompt: a wait of ms, the tokens before the last read unless stopped first
int32_t simulated_read(double ms, const std::vector<llama_token> & prompt, const std::atomic<bool> & stop) {
    return ms > 0 && wait_unless_cancelled(ms, stop) ? (int32_t) prompt.size() - 1 : 0;
}
}  // namespace

int32_t simulated_drafter::read_prompt(const std::vector<llama_token> & prompt, const std::atomic<bool> & stop) {
    return simulated_read(prompt_ms_, prompt, stop);
}

int32_t simulated_server::read_prompt(const std::vector<llama_token> & prompt, const std::atomic<bool> & stop) {
    return simulated_read(prompt_ms_, prompt, stop);
}

bool simulated_server::verify(const std::vector<llama_token> & seq, int32_t first, int32_t, const sampling_params &,
                              const std::atomic<bool> & cancel, std::vector<dsi_prediction> & preds) {
    if (!wait_unless_cancelled(latency_ms_, cancel)) {
        return false;
    }
    const int32_t n = (int32_t) seq.size();
    preds.resize(n - first + 1);
    for (int32_t j = first; j <= n; ++j) {
        // after a wrong draft the target would say something else; the orchestrator never uses it
        preds[j - first].argmax = world_.on_truth(seq, j) ? world_.truth(j) : (world_.truth(j) + 2) % world_.n_vocab;
    }
    return true;
}

}  // namespace specllama
