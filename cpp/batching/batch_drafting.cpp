// batching/batch_drafting.cpp: decode costs by token count, and the best draft length for a round of N slots.
#include "batching/batch_drafting.h"

#include <algorithm>
#include <cmath>

namespace specllama {

void decode_costs::add(int32_t n_tokens, double ms) {
    if (n_tokens < 1 || !(ms > 0.0)) {
        return;
    }
    if ((int32_t) ms_.size() <= n_tokens) {
        ms_.resize(n_tokens + 1, 0.0);
        weight_.resize(n_tokens + 1, 0.0);
    }
    if (weight_[n_tokens] > 0.0) {
        ms_[n_tokens] += k_alpha * (ms - ms_[n_tokens]);
    } else {
        ms_[n_tokens] = ms;
        n_seen_ += 1;
    }
    weight_[n_tokens] = std::min(k_max_weight, weight_[n_tokens] + 1.0);
}

double decode_costs::at(int32_t n) const {
    if (n_seen_ < 2) {
        return -1.0;
    }
    // the line through the counts seen near n, weighted by how often each was seen
    const int32_t lo = std::max(1, n / 2), hi = std::min((int32_t) ms_.size() - 1, 2 * n);
    double        sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int32_t       points = 0, first = -1, last = -1;
    for (int32_t m = lo; m <= hi; ++m) {
        const double w = weight_[m];
        if (w <= 0.0) {
            continue;
        }
        points += 1;
        first = first < 0 ? m : first;
        last  = m;
        sw += w;
        sx += w * m;
        sy += w * ms_[m];
        sxx += w * m * (double) m;
        sxy += w * m * ms_[m];
    }
    const double var = sxx - sx * sx / sw;
    if (points < 3 || var <= 0.0 || n < first || n > last) {
        return interpolated(n);  // too few counts near n, or n beyond them
    }
    // a decode never costs less than a smaller one: no negative slopes from noise
    const double slope = std::max(0.0, (sxy - sx * sy / sw) / var);
    return sy / sw + slope * (n - sx / sw);
}

double decode_costs::interpolated(int32_t n) const {
    const int32_t size = (int32_t) ms_.size();
    if (n < size && weight_[n] > 0.0) {
        return ms_[n];
    }
    // the nearest counts seen below and above n, or the two nearest on the one side there is
    int32_t lo = std::min(n, size - 1), hi = n;
    while (lo >= 1 && weight_[lo] <= 0.0) {
        --lo;
    }
    while (hi < size && weight_[hi] <= 0.0) {
        ++hi;
    }
    int32_t a = lo, b = hi;
    if (lo < 1) {  // none below: the two lowest above
        a = hi;
        for (b = hi + 1; b < size && weight_[b] <= 0.0; ++b) {}
    } else if (hi >= size) {  // none above: the two highest below
        b = lo;
        for (a = lo - 1; a >= 1 && weight_[a] <= 0.0; --a) {}
    }
    // a decode never costs less than a smaller one: no negative slopes from noise
    const double slope = std::max(0.0, (ms_[b] - ms_[a]) / (double) (b - a));
    if (n < a) {
        // below every count seen (slots that have only drafted price their plain steps from
        // here): down the line, and at least the per-token cost of the smallest count seen
        return std::max(ms_[a] * n / a, ms_[a] + slope * (n - a));
    }
    return ms_[a] + slope * (n - a);
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

void batch_drafting::observe_step(int32_t n_judged, int32_t n_accepted, int32_t n_lookup_judged,
                                  int32_t n_lookup_accepted) {
    std::lock_guard<std::mutex> lock(mutex_);
    constexpr double k_decay = 0.98;
    if (n_judged > 0) {
        judged_   = k_decay * judged_ + n_judged;
        n_judged_ += n_judged;
        accepted_ = k_decay * accepted_ + n_accepted;
    }
    if (n_lookup_judged > 0) {
        lookup_judged_   = k_decay * lookup_judged_ + n_lookup_judged;
        n_lookup_judged_ += n_lookup_judged;
        lookup_accepted_ = k_decay * lookup_accepted_ + n_lookup_accepted;
    }
}

void batch_drafting::observe_verified(int32_t n_model, int32_t n_before_lookup, int32_t n_drafted, int32_t n_accepted) {
    const int32_t model_kept    = std::min(n_accepted, n_model);
    const int32_t model_judged  = std::min(n_model, n_accepted + 1);
    const int32_t n_lookup      = n_drafted - n_before_lookup;
    const int32_t lookup_kept   = std::max(0, n_accepted - n_before_lookup);
    const int32_t lookup_judged = n_accepted >= n_before_lookup ? std::min(n_lookup, lookup_kept + 1) : 0;
    observe_step(model_judged, model_kept, lookup_judged, lookup_kept);
}

double batch_drafting::acceptance(bool lookup) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const double judged = lookup ? lookup_judged_ : judged_;
    return judged > 0.0 ? (lookup ? lookup_accepted_ : accepted_) / judged : -1.0;
}

namespace {
// expected tokens of a step with k drafts each kept with probability a, in order
double expected_tokens(double a, int32_t k) {
    a = std::min(0.999, std::max(0.0, a));
    return (1.0 - std::pow(a, k + 1)) / (1.0 - a);
}
}  // namespace

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
    if (d <= 0.0 || n_judged_ < k_min_judged) {
        return -1.0;
    }
    return n * expected_tokens(accepted_ / judged_, k) / (k * (double) n / m * (d + gap_ms_[1]) + t + gap_ms_[0]);
}

double batch_drafting::lookup_rate_locked(int32_t n, int32_t k, double extra_weight) const {
    const double t = target_.at(n + k);
    if (t <= 0.0) {
        return -1.0;
    }
    if (k == 0) {
        return n / (t + gap_ms_[0]);
    }
    if (n_lookup_judged_ < k_min_judged) {
        return -1.0;
    }
    const double extra = expected_tokens(lookup_accepted_ / lookup_judged_, k) - 1.0;  // beyond the step's one
    return (n + extra_weight * extra) / (t + gap_ms_[0]);
}

double batch_drafting::lookup_rate(int32_t n_generating, int32_t k) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lookup_rate_locked(n_generating, k);
}

double batch_drafting::rate(int32_t n_generating, int32_t k) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return rate_locked(n_generating, k);
}

template <class Priced>
int32_t batch_drafting::best_k(int32_t n_generating, int32_t n_max, Priced priced, int32_t slot) {
    if (n_generating < 2) {
        return n_max;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    int32_t best_k = n_max;
    double  best   = -1.0;
    for (int32_t k = 0; k <= n_max; ++k) {
        const double r = priced(k);
        if (r < 0.0) {
            // not priced yet: one draft a step prices the merged rounds, from one slot at a time
            // (a drafting slot's first step runs its prompt through the draft: cap())
            if (slot >= 0 && explorer_ < 0) {
                explorer_ = slot;
            }
            return slot < 0 || explorer_ == slot ? std::min(n_max, k_explore_drafts) : 0;
        }
        if (r > best) {
            best   = r;
            best_k = k;
        }
    }
    return best_k;
}

int32_t batch_drafting::cap(int32_t n_generating, int32_t n_max, int32_t slot) {
    return best_k(
        n_generating, n_max,
        [&](int32_t k) {
            const double r = rate_locked(n_generating, k);
            return k == 0 || r < 0.0 ? r : r / k_draft_margin;
        },
        slot);
}

bool batch_drafting::catch_up_pays(int32_t n_generating, int32_t k, int32_t n_unread, int32_t n_remaining) const {
    if (n_generating < 2 || k < 1 || n_unread < 1) {
        return true;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const double r0 = rate_locked(n_generating, 0), rk = rate_locked(n_generating, k), d = draft_.at(n_unread);
    if (r0 <= 0.0 || rk <= 0.0 || d <= 0.0) {
        return true;
    }
    return rk > r0 && d < n_remaining * (1.0 / r0 - 1.0 / rk);
}

void batch_drafting::leave(int32_t slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (explorer_ == slot) {
        explorer_ = -1;
    }
}

int32_t batch_drafting::lookup_cap(int32_t n_generating, int32_t n_max) {
    // the slot's extra tokens count at 1 / margin: the other slots' share of the round is no gain to
    // discount. Every slot prices lookup's drafts: they cost no draft prompt pass
    return best_k(
        n_generating, n_max, [&](int32_t k) { return lookup_rate_locked(n_generating, k, 1.0 / k_draft_margin); },
        -1);
}

}  // namespace specllama
