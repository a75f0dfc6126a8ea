// batch_drafting.cpp: decode costs by token count, and the best draft length for a round of N slots.
#include "batch_drafting.h"

#include <algorithm>
#include <cmath>

namespace specllama {

void decode_costs::add(int32_t n_tokens, double ms) {
    if (n_tokens < 1 || !(ms > 0.0)) {
        return;
    }
    if ((int32_t) ms_.size() <= n_tokens) {
        ms_.resize(n_tokens + 1, 0.0);
        seen_.resize(n_tokens + 1, 0);
    }
    if (seen_[n_tokens]) {
        ms_[n_tokens] += k_alpha * (ms - ms_[n_tokens]);
    } else {
        ms_[n_tokens]   = ms;
        seen_[n_tokens] = 1;
        n_seen_ += 1;
    }
}

double decode_costs::at(int32_t n) const {
    if (n_seen_ < 2) {
        return -1.0;
    }
    const int32_t size = (int32_t) ms_.size();
    if (n < size && seen_[n]) {
        return ms_[n];
    }
    // the nearest counts seen below and above n, or the two nearest on the one side there is
    int32_t lo = std::min(n, size - 1), hi = n;
    while (lo >= 1 && !seen_[lo]) {
        --lo;
    }
    while (hi < size && !seen_[hi]) {
        ++hi;
    }
    int32_t a = lo, b = hi;
    if (lo < 1) {  // none below: the two lowest above
        a = hi;
        for (b = hi + 1; b < size && !seen_[b]; ++b) {}
    } else if (hi >= size) {  // none above: the two highest below
        b = lo;
        for (a = lo - 1; a >= 1 && !seen_[a]; --a) {}
    }
    const double slope = (ms_[b] - ms_[a]) / (double) (b - a);
    // a decode never costs less than a smaller one: no negative slopes from noise
    return std::max(ms_[a], ms_[a] + std::max(0.0, slope) * (n - a));
}

void batch_drafting::observe_decode(bool draft, int32_t n_tokens, double ms, int32_t n_slots, int32_t n_generating) {
    std::lock_guard<std::mutex> lock(mutex_);
    (draft ? draft_ : target_).add(n_tokens, ms);
    if (draft && n_generating >= 2 && n_slots >= 1) {
        const double share = std::min(1.0, (double) n_slots / n_generating);
        draft_share_ += 0.05 * (share - draft_share_);
    }
}

void batch_drafting::observe_gap(bool draft, double ms) {
    if (!(ms >= 0.0)) {
        return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    double & g  = gap_ms_[draft];
    g           = has_gap_[draft] ? g + 0.05 * (ms - g) : ms;
    has_gap_[draft] = true;
}

void batch_drafting::observe_step(int32_t n_drafted, int32_t n_accepted) {
    if (n_drafted <= 0) {
        return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    constexpr double k_decay = 0.98;
    drafted_  = k_decay * drafted_ + n_drafted;
    accepted_ = k_decay * accepted_ + n_accepted;
}

double batch_drafting::rate_locked(int32_t n, int32_t k) const {
    const double t = target_.at(n * (k + 1));
    if (t <= 0.0) {
        return -1.0;
    }
    if (k == 0) {
        return n / (t + gap_ms_[0]);
    }
    const int32_t m = std::max(1, (int32_t) std::lround(draft_share_ * n));  // slots per draft decode
    const double  d = draft_.at(m);
    if (d <= 0.0 || drafted_ <= 0.0) {
        return -1.0;
    }
    const double a      = std::min(0.999, accepted_ / drafted_);
    const double tokens = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
    return n * tokens / (k * (double) n / m * (d + gap_ms_[1]) + t + gap_ms_[0]);
}

double batch_drafting::rate(int32_t n_generating, int32_t k) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return rate_locked(n_generating, k);
}

int32_t batch_drafting::cap(int32_t n_generating, int32_t n_max) const {
    if (n_generating < 2) {
        return n_max;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    int32_t best_k = n_max;
    double  best   = -1.0;
    for (int32_t k = 0; k <= n_max; ++k) {
        const double r = rate_locked(n_generating, k);
        if (r < 0.0) {
            return n_max;  // not priced yet: the slots' own rules decide
        }
        const double priced = k == 0 ? r : r / k_draft_margin;
        if (priced > best) {
            best   = priced;
            best_k = k;
        }
    }
    return best_k;
}

}  // namespace specllama
