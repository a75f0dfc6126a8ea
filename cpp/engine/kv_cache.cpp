// engine/kv_cache.cpp: contexts, and decoding with size checks (llama.cpp aborts the process on an
// oversized batch), one message per llama_decode return code; a slot's decodes through its
// batcher; the copy of another cache's keys and values.
// Not here: rollback and checkpoints (rollback.cpp).
#include "engine/kv_cache.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "engine/cpu.h"

namespace specllama {

namespace {

[[noreturn]] void throw_decode_error(int32_t ret, int32_t n_chunk, int32_t n_past) {
    switch (ret) {
        case 1:
            throw std::runtime_error("llama_decode found no KV cache slot for " + std::to_string(n_chunk) +
                                     " tokens at position " + std::to_string(n_past) + "; use a larger n_ctx");
        case 2:
            throw decode_aborted("llama_decode was aborted");
        case -1:
            throw std::invalid_argument("llama_decode rejected the batch (invalid tokens or positions)");
        default:
            throw std::runtime_error("llama_decode failed with code " + std::to_string(ret) +
                                     " (a fatal backend error; the model's context is unusable)");
    }
}

}  // namespace

kv_cache::kv_cache(std::shared_ptr<model> mdl, const context_params & params) : mdl_(std::move(mdl)) {
    if (params.n_ctx < 0) {
        throw std::invalid_argument("n_ctx must be >= 0 (0 = the model's training context), got " +
                                    std::to_string(params.n_ctx));
    }
    if (params.n_batch < 1) {
        throw std::invalid_argument("n_batch must be >= 1, got " + std::to_string(params.n_batch));
    }
    if (params.n_threads < -1) {
        throw std::invalid_argument("n_threads must be >= -1 (0: the physical cores; -1: tuned), got " +
                                    std::to_string(params.n_threads));
    }
    recurrent_ = llama_model_is_recurrent(mdl_->get()) || llama_model_is_hybrid(mdl_->get());
    window_    = params.swa_full ? 0 : std::max<int32_t>(0, llama_model_n_swa(mdl_->get()));
    ckpt_on_device_ = checkpoint_on_device(params.checkpoint_memory, *mdl_);
    llama_context_params cparams = llama_context_default_params();
    set_cache_format(params, cparams);
    cparams.swa_full        = params.swa_full;
    cparams.n_ctx           = (uint32_t) params.n_ctx;
    cparams.n_batch         = (uint32_t) params.n_batch;
    cparams.n_ubatch        = (uint32_t) params.n_batch;  // a verification batch is never split
    // a device chain (set_device_chain) samples every output of a verification batch
    cparams.n_outputs_max_per_seq = 0;
    // a second sequence in the same cells, where keep_reusable parks what it moves (a model with
    // plain attention only: recurrent states and sliding windows cannot move)
    const bool spare        = !recurrent_ && llama_model_n_swa(mdl_->get()) == 0;
    cparams.n_seq_max       = spare ? 2 : 1;
    cparams.kv_unified      = spare;
    n_threads_              = params.n_threads > 0 ? params.n_threads : default_threads();
    n_threads_given_        = params.n_threads;
    cparams.n_threads       = n_threads_;
    cparams.n_threads_batch = n_threads_;
    cparams.no_perf         = true;

    llama_context * raw = init_context(mdl_->get(), cparams, "a llama.cpp context for " + mdl_->path + " (n_ctx " +
                                                                std::to_string(params.n_ctx) + ")");
    ctx_.reset(raw);
    spare_seq_ = spare && llama_memory_can_shift(llama_get_memory(raw)) ? 1 : -1;
    n_ctx_   = (int32_t) llama_n_ctx(raw);
    n_batch_ = (int32_t) llama_n_batch(raw);
    batch_   = llama_batch_init(n_batch_, 0, 1);
    if (params.n_threads == -1 && !mdl_->offloaded) {
        tuner_  = std::make_unique<thread_tuner>(n_threads_);
        tuning_ = true;
    }
}

kv_cache::kv_cache(std::shared_ptr<shared_context> shared, llama_seq_id seq, int32_t n_ctx)
    : mdl_(shared->mdl), shared_(std::move(shared)), seq_(seq) {  // mdl_ is declared first
    if (seq < 0 || seq >= shared_->n_seq) {
        throw std::invalid_argument("slot " + std::to_string(seq) + " outside the context's " +
                                    std::to_string(shared_->n_seq) + " slots");
    }
    recurrent_ = llama_model_is_recurrent(mdl_->get()) || llama_model_is_hybrid(mdl_->get());
    window_    = shared_->swa_full ? 0 : std::max<int32_t>(0, llama_model_n_swa(mdl_->get()));
    ckpt_on_device_ = checkpoint_on_device(shared_->checkpoint_memory, *mdl_);
    n_ctx_   = n_ctx;
    n_batch_ = shared_->n_batch;
}

kv_cache::~kv_cache() {
    if (chain_smpl_) {  // (the context keeps a pointer to the chain it runs)
        try {
            on_context([&] { llama_set_sampler(raw_context(), seq_, nullptr); });
        } catch (...) {  // (the batcher's thread runs it; it does not throw)
        }
    }
    if (!shared_) {
        llama_batch_free(batch_);
    }
}

llama_context * kv_cache::raw_context() const {
    return shared_ ? shared_->ctx.get() : ctx_.get();
}

bool kv_cache::set_device_chain(const device_chain & c) {
    if (c == chain_) {
        return true;
    }
    llama_sampler_ptr smpl(make_device_chain(c));
    bool              ok = false;
    on_context([&] { ok = llama_set_sampler(raw_context(), seq_, smpl.get()); });  // (a slot's: its sequence)
    n_outputs_ = 0;  // what the last decode returned is read as it was made, or not at all
    if (!ok) {  // (llama.cpp has detached any chain it ran)
        chain_ = device_chain();
        chain_smpl_.reset();
        return c.what == device_chain::kind::none;
    }
    chain_ = c;
    chain_smpl_ = std::move(smpl);
    return true;
}

sampled_row kv_cache::sampled(int32_t i) const {
    if (pending_) {
        throw std::logic_error("sampled(): the last decode was launched and not finished");
    }
    if (i < 0 || i >= n_outputs_) {
        throw std::out_of_range("sampled row " + std::to_string(i) + " outside the " + std::to_string(n_outputs_) +
                                " outputs of the last decode");
    }
    if (chain_.what == device_chain::kind::none) {
        throw std::logic_error("sampled(): this context runs no device chain; read logits()");
    }
    if (shared_) {
        sampled_row          r;
        const sampled_copy & s = slot_sampled_[i];
        r.logits               = s.logits.data();
        r.ids                  = s.ids.data();
        r.n                    = (int32_t) s.logits.size();
        return r;
    }
    if (rows_[i].n < 1) {
        throw std::runtime_error("llama.cpp returned no sampled row for output " + std::to_string(i));
    }
    return rows_[i];
}

void kv_cache::set_n_threads(int32_t n_threads) {
    if (shared_) {
        return;  // a slot's context keeps the slot group's threads: other slots decode on it too
    }
    tuning_ = n_threads <= 0 && tuner_;
    if (tuning_) {
        apply_threads(tuner_->threads());
        return;
    }
    const int32_t given = n_threads > 0 ? n_threads : n_threads_given_;
    apply_threads(given > 0 ? given : default_threads());
}

void kv_cache::follow_threads(int32_t n_threads) {
    if (tuning_ && !shared_) {
        tuner_->move_to(n_threads);
        apply_threads(tuner_->threads());
    }
}

int32_t kv_cache::n_threads() const {
    if (shared_) {
        return shared_->n_threads;
    }
    return tuning_ ? tuner_->threads() : n_threads_;
}

int64_t kv_cache::n_thread_probes() const {
    if (shared_) {
        return shared_->n_probes;
    }
    return tuner_ ? tuner_->n_probes() : 0;
}

void kv_cache::apply_threads(int32_t n) {
    if (n != n_threads_) {
        llama_set_n_threads(ctx_.get(), n, n);
        n_threads_ = n;
    }
}

void kv_cache::set_abort_flag(const std::atomic<bool> * flag) {
    if (shared_) {
        slot_abort_ = flag;
        return;
    }
    if (flag == nullptr) {
        llama_set_abort_callback(ctx_.get(), nullptr, nullptr);
        return;
    }
    llama_set_abort_callback(
        ctx_.get(), [](void * data) { return static_cast<const std::atomic<bool> *>(data)->load(); },
        const_cast<std::atomic<bool> *>(flag));
}

void kv_cache::decode_outputs(const llama_token * toks, int32_t n, int32_t n_out, float * out,
                              const std::function<void()> & between_chunks) {
    launch_outputs(toks, n, n_out, out, between_chunks);
    finish();
}

void kv_cache::launch_outputs(const llama_token * toks, int32_t n, int32_t n_out, float * out,
                              const std::function<void()> & between_chunks) {
    finish();
    if (n <= 0) {
        return;
    }
    if (n_out < 1 || n_out > n) {
        throw std::invalid_argument("n_out must be in [1, " + std::to_string(n) + "], got " + std::to_string(n_out));
    }
    if (n_past() + n > n_ctx_) {
        throw std::invalid_argument("context full: " + std::to_string(n_past()) + " tokens cached + " +
                                    std::to_string(n) + " new > n_ctx " + std::to_string(n_ctx_));
    }
    if (out != nullptr && chain_.what != device_chain::kind::none) {
        throw std::logic_error("a context with a device chain returns no raw logits");
    }
    if (out == nullptr && n_out > n_batch_) {
        throw std::invalid_argument("cannot keep logits for " + std::to_string(n_out) +
                                    " positions in one batch of n_batch " + std::to_string(n_batch_));
    }
    for (int32_t i = 0; i < n; ++i) {
        if (toks[i] < 0 || toks[i] >= mdl_->n_vocab) {
            throw std::invalid_argument("token id " + std::to_string(toks[i]) + " outside the vocabulary of " +
                                        std::to_string(mdl_->n_vocab));
        }
    }
    if (shared_) {
        decode_slot(toks, n, n_out, out, between_chunks);
        return;
    }
    const int32_t n_vocab     = mdl_->n_vocab;
    const int32_t first_out   = n - n_out;
    // several outputs read back through logits(): make the last chunk full so that it holds them all
    const int32_t first_chunk = (out == nullptr && n_out > 1) ? (n - 1) % n_batch_ + 1 : std::min(n, n_batch_);
    for (int32_t start = 0; start < n;) {
        if (start > 0 && between_chunks) {
            between_chunks();
        }
        const int32_t n_chunk = start == 0 ? first_chunk : std::min(n_batch_, n - start);
        const bool    last    = start + n_chunk == n;
        batch_.n_tokens       = n_chunk;
        for (int32_t i = 0; i < n_chunk; ++i) {
            batch_.token[i]     = toks[start + i];
            batch_.pos[i]       = n_past() + i;
            batch_.n_seq_id[i]  = 1;
            batch_.seq_id[i][0] = 0;
            batch_.logits[i]    = start + i >= first_out;
        }
        if (tuning_) {
            apply_threads(tuner_->next(n_chunk));
        }
        const auto    t_decode = std::chrono::steady_clock::now();
        const int32_t ret      = llama_decode(ctx_.get(), batch_);
        const double  ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_decode).count();
        decode_ms_ += ms;
        n_calls_ += 1;
        if (tuning_ && ret == 0) {  // (a model on the CPU alone: llama_decode has computed the batch)
            tuner_->record(n_chunk, n_threads_, ms);
        }
        if (ret != 0) {
            n_outputs_ = 0;
            if (recurrent_) {  // a state stopped mid-batch is neither before nor after it
                recover_after_failed_decode();
            } else {  // drop whatever part of the failed batch reached the cache
                llama_memory_seq_rm(llama_get_memory(ctx_.get()), 0, n_past(), -1);
            }
            throw_decode_error(ret, n_chunk, n_past());
        }
        tokens_.insert(tokens_.end(), toks + start, toks + start + n_chunk);
        const int32_t chunk_first_out = std::max(first_out, start) - start;  // batch index of its first output
        const int32_t chunk_n_out     = std::max(0, n_chunk - chunk_first_out);
        if (chain_.what == device_chain::kind::none) {
            logits_bytes_ += (int64_t) chunk_n_out * n_vocab * (int64_t) sizeof(float);
        }
        if (out != nullptr) {
            for (int32_t i = chunk_first_out; i < n_chunk; ++i) {
                std::copy_n(llama_get_logits_ith(ctx_.get(), i), n_vocab,
                            out + (size_t) (start + i - first_out) * n_vocab);
            }
        }
        if (last) {
            n_outputs_ = chunk_n_out;
            out_base_  = chunk_first_out;
        }
        start += n_chunk;
    }
    pending_ = true;
}

void kv_cache::finish() {
    if (!pending_) {
        return;
    }
    pending_ = false;
    // on a GPU llama_decode only queues the work: wait for it, so that the caller's timing (the
    // adaptive draft length prices each decode) counts the decode, not the next logits read
    const auto t_sync = std::chrono::steady_clock::now();
    llama_synchronize(ctx_.get());
    decode_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_sync).count();
    if (chain_.what != device_chain::kind::none) {  // what the chain returned for each output row, read once
        llama_context * ctx = ctx_.get();
        rows_.resize(n_outputs_);
        for (int32_t i = 0; i < n_outputs_; ++i) {
            int64_t bytes = 0;
            rows_[i]      = read_sampled_row(ctx, out_base_ + i, bytes);
            logits_bytes_ += bytes;
        }
    }
}

// a slot's chunks go to the batcher, which merges them with other slots' into one llama_decode and
// copies this slot's logits out (the shared context's are overwritten by the next decode)
void kv_cache::decode_slot(const llama_token * toks, int32_t n, int32_t n_out, float * out,
                           const std::function<void()> & between_chunks) {
    const int32_t n_vocab     = mdl_->n_vocab;
    const int32_t first_out   = n - n_out;
    const int32_t first_chunk = (out == nullptr && n_out > 1) ? (n - 1) % n_batch_ + 1 : std::min(n, n_batch_);
    n_outputs_                = 0;
    for (int32_t start = 0; start < n;) {
        if (start > 0 && between_chunks) {
            between_chunks();
        }
        const int32_t n_chunk         = start == 0 ? first_chunk : std::min(n_batch_, n - start);
        const int32_t chunk_first_out = std::min(n_chunk, std::max(first_out, start) - start);
        const int32_t chunk_n_out     = n_chunk - chunk_first_out;
        const bool    sampled         = chain_.what != device_chain::kind::none && chunk_n_out > 0;
        if (!sampled) {
            logits_bytes_ += (int64_t) chunk_n_out * n_vocab * (int64_t) sizeof(float);
        }
        float *       dest            = nullptr;
        if (chunk_n_out > 0 && !sampled) {
            if (out != nullptr) {
                dest = out + (size_t) (start + chunk_first_out - first_out) * n_vocab;
            } else {
                slot_logits_.resize((size_t) chunk_n_out * n_vocab);
                dest = slot_logits_.data();
            }
        }
        slot_chunk c;
        c.sc        = shared_.get();
        c.seq       = seq_;
        c.trim_from = trim_from_;
        c.pos0      = n_past();
        c.toks      = toks + start;
        c.n         = n_chunk;
        c.first_out = chunk_first_out;
        c.out       = dest;
        c.sampled   = sampled ? &slot_sampled_ : nullptr;
        c.cancel    = slot_abort_;
        const auto    t_decode = std::chrono::steady_clock::now();
        const int32_t ret      = shared_->batcher->decode(c);
        decode_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_decode).count();
        n_calls_ += 1;
        trim_from_        = -1;  // applied, whatever the outcome
        if (ret != 0) {
            if (recurrent_ && ret != 2) {  // a state stopped mid-batch (code 2: the chunk never ran)
                recover_after_failed_decode();
            }
            throw_decode_error(ret, n_chunk, n_past());
        }
        tokens_.insert(tokens_.end(), toks + start, toks + start + n_chunk);
        if (sampled) {
            for (const sampled_copy & s : slot_sampled_) {
                logits_bytes_ += s.bytes;
            }
        }
        if (start + n_chunk == n && out == nullptr) {
            n_outputs_ = chunk_n_out;
        }
        start += n_chunk;
    }
}

const float * kv_cache::logits(int32_t i) const {
    if (pending_) {
        throw std::logic_error("logits(): the last decode was launched and not finished");
    }
    if (chain_.what != device_chain::kind::none) {
        throw std::logic_error("logits(): this context runs a device chain; read sampled()");
    }
    if (i < 0 || i >= n_outputs_) {
        throw std::out_of_range("logits index " + std::to_string(i) + " outside the " +
                                std::to_string(n_outputs_) + " outputs of the last decode");
    }
    if (shared_) {
        return slot_logits_.data() + (size_t) i * mdl_->n_vocab;
    }
    const float * l = llama_get_logits_ith(ctx_.get(), out_base_ + i);
    if (l == nullptr) {
        throw std::runtime_error("llama.cpp returned no logits for output " + std::to_string(i));
    }
    return l;
}

void kv_cache::on_context(const std::function<void()> & fn) const {
    if (shared_) {  // a slot's context is used by the batcher's thread only
        shared_->batcher->run(fn);
    } else {
        fn();
    }
}

void kv_cache::restart_at(const std::vector<llama_token> & seq, int32_t n_from) {
    if (n_from < 0 || n_from > (int32_t) seq.size() || n_from > n_ctx_) {
        throw std::invalid_argument("restart_at " + std::to_string(n_from) + " outside a sequence of " +
                                    std::to_string(seq.size()) + " tokens (n_ctx " + std::to_string(n_ctx_) + ")");
    }
    clear_all();
    tokens_.assign(seq.begin(), seq.begin() + n_from);
    n_forgotten_ = n_from;
}

int32_t kv_cache::common_prefix(const std::vector<llama_token> & seq, int32_t n_max) const {
    const int32_t n = std::min<int32_t>({n_past(), (int32_t) seq.size(), n_max});
    int32_t       i = 0;
    while (i < n && tokens_[i] == seq[i]) {
        ++i;
    }
    return i;
}

bool copy_pays(int32_t n_new, int32_t n_copied) { return n_new > 0 && (int64_t) n_new * 50 >= n_copied; }

bool kv_cache::copy_from(const kv_cache & src) {
    if (shared_ && src.shared_ && shared_->batcher != src.shared_->batcher) {
        throw std::logic_error("copy_from between slots of different groups");
    }
    bool       ok   = false;
    const auto copy = [&] {
        if (src.trim_from_ >= 0) {  // a slot's rollback not yet applied
            llama_memory_seq_rm(llama_get_memory(src.get()), src.seq_, src.trim_from_, -1);
            src.trim_from_ = -1;
        }
        trim_from_ = -1;
        llama_memory_seq_rm(llama_get_memory(get()), seq_, -1, -1);
        const size_t n = llama_state_seq_get_size(src.get(), src.seq_);
        state_buf_.resize(n);
        ok = llama_state_seq_get_data(src.get(), state_buf_.data(), n, src.seq_) == n &&
             llama_state_seq_set_data(get(), state_buf_.data(), n, seq_) != 0;
        if (!ok) {  // a refused copy may leave part of it behind
            llama_memory_seq_rm(llama_get_memory(get()), seq_, -1, -1);
        }
    };
    // a slot's context is used by the batcher's thread only
    slot_batcher * batcher = shared_ ? shared_->batcher.get() : src.shared_ ? src.shared_->batcher.get() : nullptr;
    if (batcher) {
        batcher->run(copy);
    } else {
        copy();
    }
    n_outputs_     = 0;
    step_ckpt_.pos = kept_ckpt_.pos = -1;
    tokens_        = ok ? src.tokens_ : std::vector<llama_token>{};
    n_forgotten_   = ok ? src.n_forgotten_ : 0;
    return ok;
}

}  // namespace specllama
