// batching/slot_batcher.h: slots (decoders that serve several users at once) keep their caches as
// sequences of one llama_context per model, and one thread runs every llama.cpp call on those
// contexts. It merges the decodes that the slots send while they wait for it: the verification
// batches of all waiting slots go to the target in ONE llama_decode, their draft decodes to the
// draft in one. The weights are read once per decode, not once per slot: where a decode is bound
// by reading them (a GPU, a large model), N slots' steps cost little more than one slot's; on a
// small CPU model each token still costs compute (the default pair on 2 cores: a 4-token target
// decode about 1.7 times a 1-token one).
// One thread also keeps llama.cpp's CPU thread pools from competing for the cores.
// Not here: what a slot decodes (speculative/decoder.h), a cache's bookkeeping (kv_cache.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "batching/batch_drafting.h"
#include "engine/context_params.h"
#include "engine/model.h"
#include "engine/thread_tuner.h"

namespace specllama {

class slot_batcher;

// one model's llama_context for all slots: slot s's cache is sequence s
struct shared_context {
    std::shared_ptr<slot_batcher> batcher;  // declared first: outlives the context
    std::shared_ptr<model>        mdl;
    llama_context_ptr             ctx;
    int32_t                       n_seq   = 0;  // slots
    int32_t                       n_batch = 0;  // tokens per llama_decode, all slots' together
    bool                          swa_full = true;  // context_params::swa_full
    std::string                   checkpoint_memory = "auto";  // context_params::checkpoint_memory
    // when slots wait on both contexts, the lower rank's decodes run first (the draft's: they are
    // cheap, and the slots that finish drafting then verify together)
    int32_t                       rank = 0;
    // the thread count of the merged decodes, tuned by measuring them (thread_tuner.h) where no count
    // was given and the model runs on the CPU alone (tuner: used on the batcher's thread only)
    std::unique_ptr<thread_tuner> tuner;
    std::atomic<int32_t>          n_threads{ 0 };  // the count decodes use now (the tuned one, where tuned)
    std::atomic<int64_t>          n_probes{ 0 };   // decodes run at another count to compare
};

// a context of params.n_ctx positions for each of n_seq slots on mdl, run by batcher (params'
// n_threads, n_batch, cache formats, swa_full, checkpoint_memory)
std::shared_ptr<shared_context> make_shared_context(std::shared_ptr<slot_batcher> batcher, std::shared_ptr<model> mdl,
                                                    int32_t n_seq, const context_params & params, int32_t rank);

// what a slot's device chain returned for one output row, copied out of the shared context (whose
// rows the next decode overwrites)
struct sampled_copy {
    std::vector<float>       logits;
    std::vector<llama_token> ids;
    int64_t                  bytes = 0;  // what llama.cpp copied back for the row (its probabilities too)
};

// one slot's part of a decode
struct slot_chunk {
    shared_context *    sc        = nullptr;
    llama_seq_id        seq       = 0;
    llama_pos           trim_from = -1;  // drop the sequence from here first (a rollback not yet applied); -1: none
    llama_pos           pos0      = 0;   // position of toks[0]
    const llama_token * toks      = nullptr;
    int32_t             n         = 0;
    int32_t             first_out = 0;   // tokens [first_out, n) have logits
    float *             out       = nullptr;  // receives (n - first_out) * n_vocab floats, or
    std::vector<sampled_copy> * sampled = nullptr;  // with a device chain on seq: each output's row
    // set before the chunk's decode starts: it is not decoded (code 2, as an aborted llama_decode)
    const std::atomic<bool> * cancel = nullptr;
};

class slot_batcher {
  public:
    // max_wait: how long a waiting decode is held for slots that are still busy between decodes.
    // Their work between decodes takes well under a millisecond, but on a loaded machine a woken
    // thread can wait for a core far longer: on the 2-core test machine, 4 slots' plain steps
    // merged 3.0 slots per decode with 3 ms and 3.8 with 100 ms (benchmarks/slots_bench.py)
    explicit slot_batcher(std::chrono::microseconds max_wait = std::chrono::microseconds(100000));
    ~slot_batcher();
    slot_batcher(const slot_batcher &)             = delete;
    slot_batcher & operator=(const slot_batcher &) = delete;

    // decode c together with the other slots' chunks waiting on the same context; returns
    // llama_decode's code (2 when c.cancel was set first). On a failure the chunk's tokens are
    // removed from its sequence again.
    int32_t decode(const slot_chunk & c);

    // run fn on the batcher's thread (any other llama.cpp call on a shared context); rethrows
    void run(const std::function<void()> & fn);

    // while a slot generates, a decode waits (up to max_wait) until every generating slot has sent
    // one, so that their steps share a llama_decode. A slot in its step callback counts as
    // generating: a server's callback only hands the step to a queue, yet it takes the GIL, and
    // not waiting for slots in it merged 13% fewer tokens per second of 4 streaming clients
    // (slot: the slot's sequence, which leaves the group's pricing to another slot when it ends)
    struct generating {
        generating(slot_batcher & b, int32_t slot);
        ~generating();
        slot_batcher & b;
        int32_t        slot;
    };

    // decodes run and chunks merged into them since the start (statistics)
    int64_t n_decodes() const;
    int64_t n_chunks() const;
    // slots generating now
    int32_t n_generating() const;
    // the slots' draft length while several generate, priced from the merged decodes (batch_drafting.h)
    batch_drafting &       drafting() { return drafting_; }
    const batch_drafting & drafting() const { return drafting_; }

  private:
    struct job {
        const slot_chunk *              chunk = nullptr;  // a decode, or
        const std::function<void()> *   fn    = nullptr;  // another call
        int32_t                         ret   = 0;
        std::exception_ptr              error;
        bool                            done = false;
        std::chrono::steady_clock::time_point queued;
    };

    void submit(job & j);
    void loop();
    void run_decodes(std::unique_lock<std::mutex> & lock);
    int32_t decode_jobs(shared_context * sc, const std::vector<job *> & jobs, int32_t n_tokens);

    std::chrono::microseconds max_wait_;
    mutable std::mutex        mutex_;
    std::condition_variable   cv_, done_cv_;
    std::deque<job *>         queue_;
    int32_t                   n_generating_ = 0;
    int64_t                   n_decodes_ = 0, n_chunks_ = 0;
    bool                      stopping_ = false;
    batch_drafting            drafting_;
    std::optional<std::chrono::steady_clock::time_point> last_end_;  // of the last decode (batcher's thread)
    int32_t                   gap_slots_ = 0;
    llama_batch               batch_{};
    int32_t                   batch_cap_ = 0;
    std::thread               worker_;  // last: started once the rest is ready
};

}  // namespace specllama
