// engine/thread_tuner.cpp: see thread_tuner.h.
#include "engine/thread_tuner.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace specllama {

thread_tuner::thread_tuner(int32_t max_threads) : max_(max_threads), cur_(max_threads) {
    if (max_threads < 1) {
        throw std::invalid_argument("max_threads must be >= 1, got " + std::to_string(max_threads));
    }
}

int32_t thread_tuner::candidate() const {
    // down by a quarter (at least one), up straight to the full count (where the cores came free)
    const int32_t down = std::max(1, cur_ - std::max(1, cur_ / 4));
    if (cur_ == max_) {
        return down;
    }
    if (cur_ == 1) {
        return max_;
    }
    return down_next_ ? down : max_;
}

void thread_tuner::forget() {
    for (size_cost & c : cost_) {
        c = size_cost{};
    }
}

int32_t thread_tuner::next(int32_t n_tokens) {
    if (max_ == 1 || n_tokens < 1 || n_tokens > k_max_tokens || cost_[n_tokens].n < 3) {
        return cur_;
    }
    if (trying_ == 0 && since_ >= gap_) {
        trying_ = candidate();
    }
    return trying_ != 0 ? trying_ : cur_;
}

void thread_tuner::move_to(int32_t threads) {
    threads = std::max(1, std::min(max_, threads));
    if (threads == cur_) {
        return;
    }
    down_next_ = threads < cur_;  // (go on in the direction of the move)
    cur_       = threads;
    trying_    = 0;
    wins_      = 0;
    gap_       = k_min_gap;
    since_     = 0;
    n_moves_ += 1;
    forget();
}

void thread_tuner::record(int32_t n_tokens, int32_t threads, double ms) {
    if (max_ == 1 || n_tokens < 1 || n_tokens > k_max_tokens || !(ms >= 0)) {
        return;
    }
    size_cost & c = cost_[n_tokens];
    if (threads == cur_) {
        // the first decode of a size is left out (a model's first decodes page its weights in), and
        // one decode moves the mean by at most a factor 1 + k_alpha (a descheduled spell)
        c.n += 1;
        if (c.n == 2) {
            c.mean = c.ref = ms;
        } else if (c.n > 2) {
            c.mean += k_alpha * (std::min(ms, 2 * c.mean) - c.mean);
            since_ += 1;
            if (c.mean > k_drift * c.ref || c.mean * k_drift < c.ref) {
                gap_  = std::min(gap_, k_min_gap);
                c.ref = c.mean;
            }
        }
        return;
    }
    if (threads != trying_ || c.n < 3) {
        return;  // (a probe's decode of a size not measured yet at the current count tells nothing)
    }
    n_probes_ += 1;
    since_ = 0;
    c.ref  = c.mean;
    if (ms <= k_win * c.mean) {
        wins_ += 1;
        if (wins_ >= 2) {
            move_to(trying_);
        }
        return;  // (after a first win, the next measured decode tries the same count again)
    }
    wins_      = 0;
    trying_    = 0;
    gap_       = std::min(std::max(2 * gap_, k_min_gap), k_max_gap);
    down_next_ = !down_next_;
}

}  // namespace specllama
