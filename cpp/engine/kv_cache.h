// engine/kv_cache.h: one llama_context and the exact tokens its KV cache holds. Decoding appends
// (split into n_batch chunks), rollback drops a tail. Speculation relies on rollback: a rejected
// draft's keys and values must leave the cache before the next step.
// Not here: what to decode (speculative/drafting.h, speculative/decoder.h). Rollback is implemented
// in rollback.cpp.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/context_params.h"
#include "engine/model.h"
#include "engine/thread_tuner.h"
#include "batching/slot_batcher.h"
#include "sampling/device_sampling.h"

namespace specllama {

// context_params::checkpoint_memory resolved for a model: true where step checkpoints go to device
// memory (std::invalid_argument for a value other than auto, host or device)
bool checkpoint_on_device(const std::string & checkpoint_memory, const model & mdl);

// llama_decode stopped because the abort flag was set (see kv_cache::set_abort_flag)
struct decode_aborted : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// whether copying a cache of n_copied tokens (kv_cache::copy_from) beats decoding the n_new of them
// that the destination lacks. Measured on the 2-core CPU with the default pair: a token's keys and
// values copy in 21 us, a prompt token costs the draft 4.2 ms to decode, about 200 times as much;
// a copy is taken where it moves at most 50 tokens per token it saves decoding.
bool copy_pays(int32_t n_new, int32_t n_copied);

class kv_cache {
  public:
    kv_cache(std::shared_ptr<model> mdl, const context_params & params);
    // slot seq's cache in a context shared by several slots (slot_batcher.h), of n_ctx positions:
    // its decodes are merged with the other slots' by the context's batcher
    kv_cache(std::shared_ptr<shared_context> shared, llama_seq_id seq, int32_t n_ctx);
    ~kv_cache();
    kv_cache(const kv_cache &)             = delete;
    kv_cache & operator=(const kv_cache &) = delete;

    // tokens whose keys and values the cache holds, in position order
    const std::vector<llama_token> & tokens() const { return tokens_; }
    int32_t n_past() const { return (int32_t) tokens_.size(); }
    int32_t n_ctx() const { return n_ctx_; }
    int32_t n_batch() const { return n_batch_; }
    int32_t n_vocab() const { return mdl_->n_vocab; }
    const model & mdl() const { return *mdl_; }
    // a slot's sequence in its shared context (0 for a cache with a context of its own)
    llama_seq_id seq() const { return seq_; }

    // append toks to the cache. all_logits: logits for every token (then n must fit in one batch,
    // unless out is given: out receives n * n_vocab floats); otherwise for the last one only.
    // between_chunks runs between llama_decode calls and may throw to stop (Ctrl-C).
    // On an error tokens() still says exactly what the cache holds.
    void decode(const llama_token * toks, int32_t n, bool all_logits, float * out = nullptr,
                const std::function<void()> & between_chunks = nullptr) {
        decode_outputs(toks, n, all_logits ? n : 1, out, between_chunks);
    }

    // append toks, with logits for the last n_out of them (1 <= n_out <= n). Without out, the
    // outputs must fit in one batch (n_out <= n_batch): the chunks are cut so that the last one
    // holds them all, and logits(i) reads them.
    void decode_outputs(const llama_token * toks, int32_t n, int32_t n_out, float * out = nullptr,
                        const std::function<void()> & between_chunks = nullptr);
    // decode_outputs without waiting for the last chunk: on a GPU its work is queued, and another
    // context's decodes may run meanwhile; finish() waits for it (before logits, sampled or a
    // rollback are read; another decode or a rollback on this cache waits first too). On a CPU
    // llama_decode has computed it already
    void launch_outputs(const llama_token * toks, int32_t n, int32_t n_out, float * out = nullptr,
                        const std::function<void()> & between_chunks = nullptr);
    void finish();

    // logits of output i of the last decode (i counts the positions that asked for logits); a
    // context with a device chain has none (std::logic_error): read sampled(i)
    const float * logits(int32_t i) const;

    // run chain c in every decode from now on (device_sampling.h), in place of returning raw logits;
    // kind none goes back to raw logits. Returns false, with no chain attached, where llama.cpp
    // cannot run it on the device holding the output layer. A slot's chain runs on its sequence of
    // the shared context, on the rows of its outputs in the slots' merged decodes. A change of
    // chain makes llama.cpp rebuild its graphs once.
    bool set_device_chain(const device_chain & c);
    const device_chain & chain() const { return chain_; }
    // what the chain returned for output i of the last decode
    sampled_row sampled(int32_t i) const;

    // keep the first n_keep tokens and drop the rest. (A slot's cache drops them on the batcher's
    // thread, before its next decode or copy.) A memory that cannot drop a tail (a recurrent or
    // hybrid model's state; a sliding-window cache that no longer holds the window before
    // n_keep) goes back to the latest checkpoint at or before n_keep and decodes the tokens from
    // there to n_keep again; with no such checkpoint, it decodes all n_keep again.
    void rollback(int32_t n_keep);
    // whether the memory is recurrent or hybrid: every rollback goes back to a checkpoint, so one
    // is taken before each batch that may be rolled back (checkpoint()); decided at load
    bool recurrent() const { return recurrent_; }
    // whether the memory keeps only a sliding window (swa_full false): rollback drops a tail while
    // the window before the new end is still held, and goes back to a checkpoint further back
    bool window_only() const { return window_ > 0; }
    // a recurrent or hybrid model: save the state's recurrent part now (llama.cpp's partial
    // sequence state), for rollback to any length from here on; a no-op otherwise. Replaces the
    // previous one of these.
    void checkpoint();
    // save a checkpoint that later checkpoint() calls leave in place (where a prompt ends, so that
    // the next turn or a retry of the reply comes back there): recurrent and window-only memories.
    // Whether it saved (not where one is kept at this length already, nor on other memories)
    bool keep_checkpoint();
    // where checkpoint() last saved (the tokens it follows; -1: none, or dropped by a rollback before it)
    int32_t checkpoint_pos() const { return step_ckpt_.pos; }
    // where checkpoint() saves: "device" or "host" (context_params::checkpoint_memory); "" where the
    // memory takes no checkpoints (a KV cache, which drops a tail)
    const char * checkpoint_memory() const {
        return recurrent_ ? (ckpt_on_device_ ? "device" : "host") : window_ > 0 ? "host" : "";
    }
    bool checkpoints_on_device() const { return recurrent_ && ckpt_on_device_; }
    // time spent taking checkpoints, restoring them and decoding tokens again after a restore
    double rollback_ms() const { return rollback_ms_; }
    // time spent in llama_decode and waiting for its results (a slot's: in its batcher's merged
    // decodes, waits included)
    double decode_ms() const { return decode_ms_; }
    // bytes of logits the decodes so far wrote out for the host to read: a row of n_vocab floats per
    // output (llama.cpp copies every output row, from the device where the model runs on one), or
    // what a device chain returned for it
    int64_t logits_bytes() const { return logits_bytes_; }
    // tokens decoded again after a restore (or, with no checkpoint to go back to, from the start)
    int64_t n_redecoded() const { return n_redecoded_; }
    // decodes so far: llama_decode calls (a slot's: its chunks, merged with other slots' by the batcher)
    int64_t n_calls() const { return n_calls_; }

    // the length of the longest common prefix of tokens() and seq, at most n_max
    int32_t common_prefix(const std::vector<llama_token> & seq, int32_t n_max) const;
    // roll back to the longest common prefix with seq, keeping at most n_max tokens; returns its length
    // (0 where that prefix would end among forgotten positions)
    int32_t keep_common_prefix(const std::vector<llama_token> & seq, int32_t n_max);

    // what keep_reusable kept: n_kept tokens of seq are held (the caller decodes from there), of
    // which n_shifted moved to new positions and n_decoded were decoded between them
    struct reuse_result {
        int32_t n_kept    = 0;
        int32_t n_shifted = 0;
        int32_t n_decoded = 0;
    };
    // keep_common_prefix, and beyond it reuse runs of at least n_min tokens (n_min >= 1) that the
    // cache holds at other positions, in order: their keys and values move to the positions seq
    // gives them (llama.cpp's KV shift), and the tokens seq has between them are decoded in place.
    // This is llama-server's --cache-reuse, extended from deleted text to inserted text: after an
    // edit in the middle of a prompt, what follows the edit is not decoded again. The moved keys
    // and values were computed after the old text, so the model's output from here is no longer
    // exactly that of a fresh pass over seq. Without a match, or on a memory that cannot shift (a
    // recurrent, hybrid or sliding-window model, a slot's cache, one with forgotten positions) it
    // is keep_common_prefix. On an error the cache keeps the tokens decoded so far.
    reuse_result keep_reusable(const std::vector<llama_token> & seq, int32_t n_max, int32_t n_min,
                               const std::function<void()> & between_chunks = nullptr);
    // whether keep_reusable can move keys and values in this cache
    bool can_reuse() const;
    // the tokens keep_reusable would keep without decoding them (the common prefix and the runs)
    int32_t n_reusable(const std::vector<llama_token> & seq, int32_t n_max, int32_t n_min) const;

    // empty the memory and go on from position n_from of seq: tokens() becomes seq[0..n_from), of
    // which the memory holds none (they are forgotten: the next decodes attend to what follows
    // them only). A draft that lags far behind catches up on the last tokens alone this way
    // (decoder::draft_step). A rollback into the forgotten positions empties the cache.
    void restart_at(const std::vector<llama_token> & seq, int32_t n_from);
    // leading positions the memory does not hold (restart_at); 0 normally
    int32_t n_forgotten() const { return n_forgotten_; }

    // make this cache hold exactly what src holds, with src's keys and values (llama.cpp's sequence
    // state, copied through host memory). The two models must have the same attention shapes
    // (kv_interchangeable). Returns false, with this
    // cache emptied, when llama.cpp refuses the copy.
    bool copy_from(const kv_cache & src);

    // decode on n_threads threads from now on; 0 or -1: the count given at construction, which where
    // it was -1 (context_params::n_threads) and the model runs on the CPU alone is tuned by measuring
    // the decodes (thread_tuner.h), at most default_threads(). A slot's cache keeps its slot group's
    // count
    void set_n_threads(int32_t n_threads);
    // where the count is tuned: move it to n_threads, as another model's tuner on the same cores found
    // (thread_tuner::move_to); a no-op elsewhere
    void follow_threads(int32_t n_threads);
    // the thread count decodes use now (the tuned count, where tuned; a slot's: its shared context's)
    int32_t n_threads() const;
    // whether the thread count is tuned now
    bool tuning_threads() const { return shared_ ? shared_->tuner != nullptr : tuning_; }
    // decodes so far run at another thread count than the tuned one, to compare (thread_tuner.h; a
    // slot's: all slots' decodes on its shared context)
    int64_t n_thread_probes() const;
    // while *flag is true, llama_decode stops early and decode throws decode_aborted (the cache
    // keeps exactly what it held before the call). nullptr: never abort. A slot's cache stops
    // before its next chunk's decode (the decodes it shares with other slots run to the end).
    void set_abort_flag(const std::atomic<bool> * flag);
    llama_context * get() const { return shared_ ? shared_->ctx.get() : ctx_.get(); }

  private:
    // the thread count llama_decode uses from now on
    void apply_threads(int32_t n);
    void decode_slot(const llama_token * toks, int32_t n, int32_t n_out, float * out,
                     const std::function<void()> & between_chunks);

    std::shared_ptr<model>   mdl_;
    llama_context_ptr        ctx_;
    llama_batch              batch_{};
    std::vector<llama_token> tokens_;
    int32_t                  n_forgotten_ = 0;  // tokens_[0..n_forgotten_) are not in the memory
    int32_t                  n_ctx_   = 0;
    int32_t                  n_batch_ = 0;
    int32_t                  n_outputs_ = 0;  // outputs of the last decode
    bool                     pending_   = false;  // the last decode is launched, not yet waited for (finish)
    int32_t                  out_base_  = 0;  // batch index of the first of them in the last chunk
    std::vector<sampled_row> rows_;           // the device chain's rows of those outputs, read once by finish()
    std::vector<uint8_t>     state_buf_;      // copy_from's staging buffer, reused
    int32_t                  n_threads_ = 0;  // the count llama_decode uses now
    int32_t                  n_threads_given_ = 0;  // context_params::n_threads (0: none given)
    std::unique_ptr<thread_tuner> tuner_;      // where the count may be tuned
    bool                     tuning_    = false;  // it is tuned now (set_n_threads)
    struct saved_state {
        std::vector<uint8_t> data;      // llama.cpp's partial sequence state
        int32_t              pos = -1;  // the tokens it follows (-1: none saved)
        // the tensors are in llama.cpp's device copy of this sequence (one per sequence: the next
        // save to device replaces it), and data holds only the state's layout
        bool                 on_device = false;
    };
    void save(saved_state & into, bool on_device);
    // the latest checkpoint at or before position n (nullptr: none)
    saved_state * latest_checkpoint(int32_t n);
    // back to checkpoint c (false: llama.cpp refused)
    bool restore(const saved_state & c);
    // empty this cache's sequence in llama.cpp's memory (tokens() unchanged)
    void clear_memory();
    // empty the memory and tokens(), and drop the checkpoints
    void clear_all();
    // run fn where this cache's context may be used: here, or a slot's on the batcher's thread
    void on_context(const std::function<void()> & fn) const;
    // the llama.cpp context this cache's sequence is in (a slot's: the shared one; use on_context)
    llama_context * raw_context() const;
    // back to a checkpoint at or before n_keep (or to nothing), then decode up to n_keep again
    void restore_and_redecode(int32_t n_keep);
    // after a failed decode of a recurrent state: back to the latest checkpoint, or empty
    void recover_after_failed_decode();

    bool                     recurrent_ = false;
    // the sequence keep_reusable parks moved runs in while it decodes before them (-1: none: the
    // context holds one sequence)
    llama_seq_id             spare_seq_ = -1;
    bool                     ckpt_on_device_ = false;  // checkpoint() saves to device memory
    int32_t                  window_    = 0;  // the sliding window of a window-only cache (0: none)
    saved_state              step_ckpt_;      // checkpoint()
    saved_state              kept_ckpt_;      // keep_checkpoint()
    double                   rollback_ms_ = 0;
    double                   decode_ms_   = 0;
    int64_t                  logits_bytes_ = 0;
    int64_t                  n_redecoded_ = 0;
    int64_t                  n_calls_     = 0;
    std::shared_ptr<shared_context> shared_;  // a slot's cache: the shared context, and
    llama_seq_id             seq_       = 0;   // its sequence there
    mutable llama_pos        trim_from_ = -1;  // rollback still to apply on the batcher's thread (-1: none)
    std::vector<float>       slot_logits_;     // a slot's outputs of its last decode, or
    std::vector<sampled_copy> slot_sampled_;   // its device chain's rows
    const std::atomic<bool> * slot_abort_ = nullptr;  // a slot's abort flag
    device_chain              chain_;            // set_device_chain
    llama_sampler_ptr         chain_smpl_;       // its llama.cpp chain, alive while attached
};

// where the checkpoints of these caches live, for a generation's stats: "device", "host", "device
// and host" (some of each), or "" where none takes checkpoints (null entries are skipped)
std::string checkpoint_memory(const std::vector<const kv_cache *> & caches);

}  // namespace specllama
