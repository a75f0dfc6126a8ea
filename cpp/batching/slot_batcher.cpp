// batching/slot_batcher.cpp: the batcher's thread. It takes the waiting jobs in order; other calls run at
// once, and decodes wait for the slots still busy between decodes (at most max_wait), then the
// chunks on one context, in order of arrival and as many as fit in n_batch, become one llama_decode.
#include "batching/slot_batcher.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/cpu.h"
#include "sampling/device_sampling.h"

namespace specllama {

std::shared_ptr<shared_context> make_shared_context(std::shared_ptr<slot_batcher> batcher, std::shared_ptr<model> mdl,
                                                    int32_t n_seq, const context_params & params, int32_t rank) {
    const int32_t n_ctx = params.n_ctx, n_batch = params.n_batch;
    if (n_seq < 1 || n_ctx < 1 || n_batch < 1) {
        throw std::invalid_argument("slots need n_seq, n_ctx and n_batch >= 1");
    }
    auto sc     = std::make_shared<shared_context>();
    sc->batcher = std::move(batcher);
    sc->mdl     = std::move(mdl);
    llama_context_params cparams = llama_context_default_params();
    set_cache_format(params, cparams);
    cparams.n_ctx           = (uint32_t) n_ctx * (uint32_t) n_seq;
    cparams.n_batch         = (uint32_t) n_batch;
    cparams.n_ubatch        = (uint32_t) n_batch;  // one graph per decode: a slot's verification is never split
    cparams.n_seq_max       = (uint32_t) n_seq;
    // a slot's device chain (kv_cache::set_device_chain) samples every output of its verification
    cparams.n_outputs_max_per_seq = 0;
    // sequences of any lengths share one ubatch. Not with a sliding window: in one cache for all
    // sequences llama.cpp reuses a cell another sequence's window has left, and that sequence's
    // rollback then needs it again; a cache per sequence reuses only its own, behind the window
    // of every length rollback keeps (llama.cpp then splits a decode into one ubatch per run of
    // sequences with equal token counts)
    cparams.kv_unified      = llama_model_n_swa(sc->mdl->get()) == 0;
    cparams.swa_full        = params.swa_full;
    const int32_t threads   = params.n_threads > 0 ? params.n_threads : default_threads();
    sc->n_threads           = threads;
    if (params.n_threads == -1 && !sc->mdl->offloaded) {
        sc->tuner = std::make_unique<thread_tuner>(threads);
    }
    cparams.n_threads       = threads;
    cparams.n_threads_batch = threads;
    cparams.no_perf         = true;
    llama_context * raw     = init_context(sc->mdl->get(), cparams,
                                           "a llama.cpp context of " + std::to_string(n_seq) + " slots x " +
                                               std::to_string(n_ctx) + " positions for " + sc->mdl->path);
    sc->ctx.reset(raw);
    sc->n_seq   = n_seq;
    sc->n_batch = (int32_t) llama_n_batch(raw);
    sc->swa_full = params.swa_full;
    sc->checkpoint_memory = params.checkpoint_memory;
    sc->rank    = rank;
    return sc;
}

slot_batcher::slot_batcher(std::chrono::microseconds max_wait) : max_wait_(max_wait), worker_([this] { loop(); }) {}

slot_batcher::~slot_batcher() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
    if (batch_cap_ > 0) {
        llama_batch_free(batch_);
    }
}

slot_batcher::generating::generating(slot_batcher & b, int32_t slot) : b(b), slot(slot) {
    std::lock_guard<std::mutex> lock(b.mutex_);
    b.n_generating_ += 1;
}

slot_batcher::generating::~generating() {
    {
        std::lock_guard<std::mutex> lock(b.mutex_);
        b.n_generating_ -= 1;
    }
    b.drafting_.leave(slot);
    b.cv_.notify_all();  // a decode held for this slot can go
}

int64_t slot_batcher::n_decodes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return n_decodes_;
}

int32_t slot_batcher::n_generating() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return n_generating_;
}

int64_t slot_batcher::n_chunks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return n_chunks_;
}

void slot_batcher::submit(job & j) {
    if (std::this_thread::get_id() == worker_.get_id()) {
        throw std::logic_error("a slot's call was made on the batcher's own thread");
    }
    std::unique_lock<std::mutex> lock(mutex_);
    j.queued = std::chrono::steady_clock::now();
    queue_.push_back(&j);
    cv_.notify_all();
    done_cv_.wait(lock, [&] { return j.done; });
    if (j.error) {
        std::rethrow_exception(j.error);
    }
}

int32_t slot_batcher::decode(const slot_chunk & c) {
    if (c.n < 1 || c.n > c.sc->n_batch || c.first_out < 0 || c.first_out > c.n) {
        throw std::invalid_argument("a slot's chunk must hold 1.." + std::to_string(c.sc->n_batch) + " tokens");
    }
    job j;
    j.chunk = &c;
    submit(j);
    return j.ret;
}

void slot_batcher::run(const std::function<void()> & fn) {
    job j;
    j.fn = &fn;
    submit(j);
}

void slot_batcher::loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) {
            return;  // stopping, nothing left
        }
        // other calls first: they are quick, and their slots wait for them
        auto it = std::find_if(queue_.begin(), queue_.end(), [](job * j) { return j->fn != nullptr; });
        if (it != queue_.end()) {
            job * j = *it;
            queue_.erase(it);
            lock.unlock();
            try {
                (*j->fn)();
            } catch (...) {
                j->error = std::current_exception();
            }
            lock.lock();
            j->done = true;
            done_cv_.notify_all();
            continue;
        }
        // hold the decodes until every generating slot has one waiting, for at most max_wait
        const auto deadline = queue_.front()->queued + max_wait_;
        const auto all_in   = [&] {
            return stopping_ || (int32_t) queue_.size() >= n_generating_ ||
                   std::any_of(queue_.begin(), queue_.end(), [](job * j) { return j->fn != nullptr; });
        };
        if (!all_in() && cv_.wait_until(lock, deadline, all_in) &&
            std::any_of(queue_.begin(), queue_.end(), [](job * j) { return j->fn != nullptr; })) {
            continue;
        }
        run_decodes(lock);
    }
}

void slot_batcher::run_decodes(std::unique_lock<std::mutex> & lock) {
    // the context whose decodes go first, then its chunks in order of arrival while they fit
    shared_context * sc = nullptr;
    for (job * j : queue_) {
        if (sc == nullptr || j->chunk->sc->rank < sc->rank) {
            sc = j->chunk->sc;
        }
    }
    std::vector<job *> jobs;
    int32_t            n_tokens = 0;
    for (auto it = queue_.begin(); it != queue_.end();) {
        job * j = *it;
        if (j->chunk->cancel != nullptr && j->chunk->cancel->load()) {
            if (j->chunk->trim_from >= 0) {  // the slot's rollback still applies
                llama_memory_seq_rm(llama_get_memory(j->chunk->sc->ctx.get()), j->chunk->seq, j->chunk->trim_from, -1);
            }
            j->ret  = 2;  // cancelled before its decode
            j->done = true;
            it      = queue_.erase(it);
            done_cv_.notify_all();
        } else if (j->chunk->sc == sc && n_tokens + j->chunk->n <= sc->n_batch) {
            n_tokens += j->chunk->n;
            jobs.push_back(j);
            it = queue_.erase(it);
        } else {
            ++it;
        }
    }
    if (jobs.empty()) {
        return;  // all cancelled
    }
    gap_slots_ = n_generating_;
    if (n_generating_ < 2) {
        last_end_.reset();  // a gap measured across idle time or one slot's steps says nothing
    }
    lock.unlock();
    std::exception_ptr error;
    int32_t            ret = 0;
    try {
        ret = decode_jobs(sc, jobs, n_tokens);
    } catch (...) {
        error = std::current_exception();
    }
    lock.lock();
    n_decodes_ += 1;
    n_chunks_ += (int64_t) jobs.size();
    for (job * j : jobs) {
        j->ret   = ret;
        j->error = error;
        j->done  = true;
    }
    done_cv_.notify_all();
}

// the device chain's rows for batch positions [first, first + n)
static void copy_sampled(llama_context * ctx, int32_t first, int32_t n, std::vector<sampled_copy> & out) {
    out.resize(n);
    for (int32_t i = 0; i < n; ++i) {
        const sampled_row r = read_sampled_row(ctx, first + i, out[i].bytes);
        if (r.n < 1) {
            throw std::runtime_error("llama.cpp returned no sampled row for a slot's output");
        }
        out[i].logits.assign(r.logits, r.logits + r.n);
        out[i].ids.assign(r.ids, r.ids + r.n);
    }
}

int32_t slot_batcher::decode_jobs(shared_context * sc, const std::vector<job *> & jobs, int32_t n_tokens) {
    if (batch_cap_ < n_tokens) {
        if (batch_cap_ > 0) {
            llama_batch_free(batch_);
        }
        batch_cap_ = std::max(n_tokens, 512);
        batch_     = llama_batch_init(batch_cap_, 0, 1);
    }
    llama_memory_t mem = llama_get_memory(sc->ctx.get());
    batch_.n_tokens    = 0;
    std::vector<int32_t> base(jobs.size());
    for (size_t k = 0; k < jobs.size(); ++k) {
        const slot_chunk & c = *jobs[k]->chunk;
        if (c.trim_from >= 0) {
            llama_memory_seq_rm(mem, c.seq, c.trim_from, -1);
        }
        base[k] = batch_.n_tokens;
        for (int32_t i = 0; i < c.n; ++i) {
            const int32_t b     = batch_.n_tokens++;
            batch_.token[b]     = c.toks[i];
            batch_.pos[b]       = c.pos0 + i;
            batch_.n_seq_id[b]  = 1;
            batch_.seq_id[b][0] = c.seq;
            batch_.logits[b]    = i >= c.first_out;
        }
    }
    const auto    t0  = std::chrono::steady_clock::now();
    if (last_end_ && gap_slots_ >= 2) {  // the slots' own work since the last decode
        drafting_.observe_gap(sc->rank == 0, std::chrono::duration<double, std::milli>(t0 - *last_end_).count());
    }
    const int32_t threads = sc->tuner ? sc->tuner->next(n_tokens) : sc->n_threads.load();
    if (threads != sc->n_threads) {
        llama_set_n_threads(sc->ctx.get(), threads, threads);
        sc->n_threads = threads;
    }
    const auto    t1  = std::chrono::steady_clock::now();
    const int32_t ret = llama_decode(sc->ctx.get(), batch_);
    if (ret == 0) {
        llama_synchronize(sc->ctx.get());  // on a GPU the decode was only queued
        const auto t2 = std::chrono::steady_clock::now();
        drafting_.observe_decode(sc->rank == 0, n_tokens, std::chrono::duration<double, std::milli>(t2 - t0).count(),
                                 (int32_t) jobs.size(), gap_slots_);
        if (sc->tuner) {
            sc->tuner->record(n_tokens, threads, std::chrono::duration<double, std::milli>(t2 - t1).count());
            sc->n_probes = sc->tuner->n_probes();
        }
    }
    const int32_t n_vocab = sc->mdl->n_vocab;
    for (size_t k = 0; k < jobs.size(); ++k) {
        const slot_chunk & c = *jobs[k]->chunk;
        if (ret != 0) {
            llama_memory_seq_rm(mem, c.seq, c.pos0, -1);  // whatever part of the failed batch reached the cache
            continue;
        }
        if (c.sampled != nullptr) {
            copy_sampled(sc->ctx.get(), base[k] + c.first_out, c.n - c.first_out, *c.sampled);
            continue;
        }
        for (int32_t i = c.first_out; i < c.n; ++i) {
            const float * l = llama_get_logits_ith(sc->ctx.get(), base[k] + i);
            if (l == nullptr) {
                throw std::runtime_error("llama.cpp returned no logits for a slot's output");
            }
            std::copy_n(l, n_vocab, c.out + (size_t) (i - c.first_out) * n_vocab);
        }
    }
    last_end_ = std::chrono::steady_clock::now();
    return ret;
}

}  // namespace specllama
