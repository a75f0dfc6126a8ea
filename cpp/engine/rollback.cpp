// engine/rollback.cpp: a cache back to a shorter length. A KV cache drops its tail; a recurrent
// or hybrid state, or a sliding window that no longer holds what comes before the new end, goes
// back to a checkpoint taken before the batch and decodes the kept tokens again.
#include "engine/kv_cache.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "engine/cpu.h"

namespace specllama {

bool checkpoint_on_device(const std::string & checkpoint_memory, const model & mdl) {
    if (checkpoint_memory != "auto" && checkpoint_memory != "host" && checkpoint_memory != "device") {
        throw std::invalid_argument("checkpoint_memory must be auto, host or device, got '" + checkpoint_memory + "'");
    }
    return llama_model_n_swa(mdl.get()) == 0 &&
           (checkpoint_memory == "device" || (checkpoint_memory == "auto" && mdl.offloaded));
}

std::string checkpoint_memory(const std::vector<const kv_cache *> & caches) {
    bool device = false;
    bool host   = false;
    for (const kv_cache * c : caches) {
        if (c != nullptr && c->recurrent()) {
            (c->checkpoints_on_device() ? device : host) = true;
        }
    }
    return device && host ? "device and host" : device ? "device" : host ? "host" : "";
}

void kv_cache::rollback(int32_t n_keep) {
    if (n_keep < 0) {
        throw std::invalid_argument("rollback to a negative length " + std::to_string(n_keep));
    }
    finish();
    if (n_keep >= n_past()) {
        return;
    }
    if (n_keep < n_forgotten_) {  // what is kept would follow positions the memory no longer holds
        clear_all();
        return;
    }
    for (saved_state * c : {&step_ckpt_, &kept_ckpt_}) {
        if (c->pos > n_keep) {  // it follows tokens that are being dropped
            c->pos = -1;
        }
    }
    if (recurrent_) {
        restore_and_redecode(n_keep);
        return;
    }
    if (shared_) {
        if (window_ > 0) {
            // the token after n_keep attends to the window before it: still held, or gone
            llama_pos pos_min = 0;
            on_context([&] { pos_min = llama_memory_seq_pos_min(llama_get_memory(get()), seq_); });
            if (pos_min > std::max(0, n_keep - window_)) {
                trim_from_ = -1;  // the restore drops everything from the checkpoint on
                restore_and_redecode(n_keep);
                return;
            }
        }
        // applied by the batcher before this slot's next call (no other slot reads it)
        trim_from_ = trim_from_ < 0 ? n_keep : std::min<llama_pos>(trim_from_, n_keep);
        tokens_.resize(n_keep);
        n_outputs_ = 0;
        return;
    }
    llama_memory_t mem = llama_get_memory(ctx_.get());
    // the token after n_keep attends to the window before it: still held, or gone with older positions
    if (window_ > 0 && llama_memory_seq_pos_min(mem, 0) > std::max(0, n_keep - window_)) {
        restore_and_redecode(n_keep);
        return;
    }
    if (!llama_memory_seq_rm(mem, 0, n_keep, -1)) {
        throw std::runtime_error("this model's cache cannot drop a partial sequence: " + mdl_->path);
    }
    tokens_.resize(n_keep);
    n_outputs_ = 0;
}

kv_cache::saved_state * kv_cache::latest_checkpoint(int32_t n) {
    saved_state * best = nullptr;
    for (saved_state * c : {&step_ckpt_, &kept_ckpt_}) {
        if (c->pos > 0 && c->pos <= n && (best == nullptr || c->pos > best->pos)) {
            best = c;
        }
    }
    return best;
}

bool kv_cache::restore(const saved_state & c) {
    // the partial state comes back whole; then (its last position now before c.pos) the rest of
    // the memory (a hybrid's attention, the full-attention layers) drops its tail, which
    // llama.cpp refuses while a recurrent state is still past it
    bool ok = false;
    on_context([&] {
        const auto flags = LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY | (c.on_device ? LLAMA_STATE_SEQ_FLAGS_ON_DEVICE : 0);
        ok = llama_state_seq_set_data_ext(get(), c.data.data(), c.data.size(), seq_, flags) == c.data.size() &&
             llama_memory_seq_rm(llama_get_memory(get()), seq_, c.pos, -1);
    });
    return ok;
}

void kv_cache::clear_memory() {
    on_context([&] { llama_memory_seq_rm(llama_get_memory(get()), seq_, -1, -1); });
}

void kv_cache::clear_all() {
    clear_memory();
    tokens_.clear();
    n_forgotten_   = 0;
    step_ckpt_.pos = kept_ckpt_.pos = -1;
    n_outputs_     = 0;
    trim_from_     = -1;
}

void kv_cache::restore_and_redecode(int32_t n_keep) {
    const auto          t0   = std::chrono::steady_clock::now();
    const saved_state * from = latest_checkpoint(n_keep);
    if (from != nullptr && !restore(*from)) {
        clear_all();
        throw std::runtime_error("failed to restore a checkpoint of " + mdl_->path + "; its cache was cleared");
    }
    if (from == nullptr) {
        clear_memory();
    }
    // (checkpoints follow the forgotten positions: restart_at drops older ones)
    const int32_t                  start = from != nullptr ? from->pos : n_forgotten_;
    const std::vector<llama_token> redo(tokens_.begin() + start, tokens_.begin() + n_keep);
    tokens_.resize(start);
    n_outputs_ = 0;
    decode(redo.data(), (int32_t) redo.size(), false);
    n_outputs_ = 0;
    n_redecoded_ += (int64_t) redo.size();
    rollback_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void kv_cache::recover_after_failed_decode() {
    const saved_state * from = latest_checkpoint(n_past());
    if (from != nullptr && restore(*from)) {
        tokens_.resize(from->pos);
    } else {
        clear_memory();
        tokens_.clear();
        n_forgotten_ = 0;
    }
    for (saved_state * c : {&step_ckpt_, &kept_ckpt_}) {
        if (c->pos > n_past()) {
            c->pos = -1;
        }
    }
}

void kv_cache::save(saved_state & into, bool on_device) {
    const auto t0 = std::chrono::steady_clock::now();
    bool       ok = false;
    into.on_device = on_device;
    on_context([&] {
        const auto   flags = LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY | (on_device ? LLAMA_STATE_SEQ_FLAGS_ON_DEVICE : 0);
        const size_t n     = llama_state_seq_get_size_ext(get(), seq_, flags);
        into.data.resize(n);
        ok = llama_state_seq_get_data_ext(get(), into.data.data(), n, seq_, flags) == n;
    });
    if (!ok) {
        into.pos = -1;
        throw std::runtime_error("failed to save a checkpoint of " + mdl_->path);
    }
    into.pos = n_past();
    rollback_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void kv_cache::checkpoint() {
    if (recurrent_ && n_past() > 0) {
        save(step_ckpt_, ckpt_on_device_);
    }
}

bool kv_cache::keep_checkpoint() {
    if ((recurrent_ || window_ > 0) && n_past() > 0 && kept_ckpt_.pos != n_past()) {
        save(kept_ckpt_, false);  // host memory: the device copy is the step checkpoint's
        return true;
    }
    return false;
}

int32_t kv_cache::keep_common_prefix(const std::vector<llama_token> & seq, int32_t n_max) {
    int32_t i = common_prefix(seq, n_max);
    if (i < n_forgotten_) {
        i = 0;
    }
    rollback(i);
    return i;
}

}  // namespace specllama
