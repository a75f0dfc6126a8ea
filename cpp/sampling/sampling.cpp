// sampling/sampling.cpp: top-k / top-p / min-p / temperature over a vocabulary of logits.
#include "sampling/sampling.h"

#include "sampling/softmax.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace specllama {

void sampling_params_validate(const sampling_params & p) {
    if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
        throw std::invalid_argument("temperature must be >= 0 (0 = greedy), got " + std::to_string(p.temperature));
    }
    if (p.top_k < 0) {
        throw std::invalid_argument("top_k must be >= 0 (0 = all tokens), got " + std::to_string(p.top_k));
    }
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
        throw std::invalid_argument("top_p must be in (0, 1], got " + std::to_string(p.top_p));
    }
    if (!(p.min_p >= 0.0f && p.min_p < 1.0f)) {
        throw std::invalid_argument("min_p must be in [0, 1), got " + std::to_string(p.min_p));
    }
}

float token_dist::prob_of(llama_token id) const {
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] == id) {
            return probs[i];
        }
    }
    return 0.0f;
}

llama_token argmax(const float * logits, int32_t n_vocab) {
    return (llama_token) (std::max_element(logits, logits + n_vocab) - logits);
}

double uniform01(rng_t & rng) {
    // 53 random bits: the same draws on every platform for a given seed
    return (double) (rng() >> 11) * (1.0 / 9007199254740992.0);
}

void sampling_distribution(const float * logits, int32_t n_vocab, const sampling_params & params, token_dist & out) {
    if (params.greedy()) {
        out.ids.assign(1, argmax(logits, n_vocab));
        out.probs.assign(1, 1.0f);
        return;
    }
    auto & ids = out.ids;
    ids.resize(n_vocab);
    std::iota(ids.begin(), ids.end(), 0);
    auto by_logit = [logits](llama_token a, llama_token b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };

    // softmax normalizer over the whole vocabulary: top-p and min-p are defined on it
    const float lmax = *std::max_element(logits, logits + n_vocab);
    const double z    = sum_exp(logits, n_vocab, lmax);

    size_t n_keep = (params.top_k > 0 && params.top_k < n_vocab) ? (size_t) params.top_k : ids.size();
    if (params.top_p >= 1.0f) {
        // no top-p: no order needed, only the top-k set (linear time)
        if (n_keep < ids.size()) {
            std::nth_element(ids.begin(), ids.begin() + n_keep, ids.end(), by_logit);
        }
    } else {
        // top-p needs the head in order: sort it in growing slices until it holds top_p
        size_t n_sorted = std::min<size_t>(n_keep, 64);
        for (;;) {
            std::partial_sort(ids.begin(), ids.begin() + n_sorted, ids.end(), by_logit);
            if (n_sorted == n_keep) {
                break;
            }
            double cum = 0.0;
            for (size_t i = 0; i < n_sorted; ++i) {
                cum += std::exp((double) logits[ids[i]] - lmax) / z;
            }
            if (cum >= params.top_p) {
                break;
            }
            n_sorted = std::min(n_keep, n_sorted * 8);
        }
        n_keep     = std::min(n_keep, n_sorted);
        double cum = 0.0;
        size_t i   = 0;
        while (i < n_keep) {
            cum += std::exp((double) logits[ids[i]] - lmax) / z;
            ++i;
            if (cum >= params.top_p) {
                break;
            }
        }
        n_keep = i;
    }
    ids.resize(n_keep);
    if (params.min_p > 0.0f) {
        // p_i >= min_p * p_max  <=>  logit_i >= lmax + log(min_p); the most likely token always stays
        const float threshold = lmax + std::log(params.min_p);
        ids.erase(std::remove_if(ids.begin(), ids.end(), [&](llama_token t) { return logits[t] < threshold; }),
                  ids.end());
        n_keep = ids.size();
    }

    // temperature on the survivors, renormalized
    auto &       probs = out.probs;
    probs.resize(n_keep);
    const double inv_t = 1.0 / params.temperature;
    const float  top   = lmax;
    double       sum   = 0.0;
    for (size_t i = 0; i < n_keep; ++i) {
        const double e = std::exp(((double) logits[ids[i]] - top) * inv_t);
        probs[i]       = (float) e;
        sum += e;
    }
    for (auto & p : probs) {
        p = (float) (p / sum);
    }
}

llama_token sample(const token_dist & dist, rng_t & rng) {
    const double u   = uniform01(rng);
    double       cum = 0.0;
    for (size_t i = 0; i < dist.ids.size(); ++i) {
        cum += dist.probs[i];
        if (u < cum) {
            return dist.ids[i];
        }
    }
    return dist.ids.back();  // rounding: u landed above the float sum
}

}  // namespace specllama
