// speculative/decoder_threads.cpp: the CPU threads a generation's decodes used, for its Stats. The
// counts themselves are chosen per context (engine/thread_tuner.h, kv_cache::set_n_threads).
#include "speculative/decoder.h"

namespace specllama {

int64_t decoder::thread_probes() const {
    return tgt_cache_->n_thread_probes() + (dft_cache_ ? dft_cache_->n_thread_probes() : 0);
}

void decoder::follow_target_threads() {
    const int32_t now = tgt_cache_->n_threads();
    if (now != target_threads_seen_ && target_threads_seen_ > 0 && dft_cache_ && tgt_cache_->tuning_threads()) {
        dft_cache_->follow_threads(now);
    }
    target_threads_seen_ = now;
}

void decoder::report_threads(generate_stats & st, bool used_model, int64_t probes0) const {
    st.n_threads       = tgt_cache_->n_threads();
    st.n_threads_draft = used_model ? dft_cache_->n_threads() : 0;
    st.threads_tuned   = tgt_cache_->tuning_threads() || (used_model && dft_cache_->tuning_threads());
    st.n_thread_probes = thread_probes() - probes0;
}

}  // namespace specllama
