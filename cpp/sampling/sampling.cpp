// sampling/sampling.cpp: top-k / top-p / min-p / temperature over a vocabulary of logits, as llama.cpp's
// sampler chain applies them.
#include "sampling/sampling.h"

#include "sampling/softmax.h"
#include "sampling/vocab_scan.h"

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

double uniform01(rng_t & rng) {
    // 53 random bits: the same draws on every platform for a given seed
    return (double) (rng() >> 11) * (1.0 / 9007199254740992.0);
}

namespace {

// the whole vocabulary as candidates, as sorted as top-p needs: the head is sorted in growing slices
// until it holds top_p of softmax(logits), whose normalizer is z (no order at all without top-p)
void all_tokens(const float * logits, int32_t n_vocab, float lmax, double z, float top_p,
                std::vector<llama_token> & ids) {
    ids.resize(n_vocab);
    std::iota(ids.begin(), ids.end(), 0);
    if (top_p >= 1.0f) {
        return;
    }
    auto by_logit = [logits](llama_token a, llama_token b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    size_t n_sorted = std::min<size_t>(ids.size(), 64);
    for (;;) {
        std::partial_sort(ids.begin(), ids.begin() + n_sorted, ids.end(), by_logit);
        double cum = 0.0;
        for (size_t i = 0; i < n_sorted; ++i) {
            cum += std::exp((double) logits[ids[i]] - lmax) / z;
        }
        if (n_sorted == ids.size() || cum >= top_p) {
            ids.resize(n_sorted);
            return;
        }
        n_sorted = std::min(ids.size(), n_sorted * 8);
    }
}

}  // namespace

void sampling_distribution(const float * logits, int32_t n_vocab, const sampling_params & params, token_dist & out) {
    if (params.greedy()) {
        out.ids.assign(1, argmax(logits, n_vocab));
        out.probs.assign(1, 1.0f);
        return;
    }
    // the candidates, most likely first where top-p needs an order: the top k (a scan of the row),
    // or the whole vocabulary (of which ids then holds the sorted head top-p needs)
    auto &                           ids  = out.ids;
    thread_local std::vector<double> weights;  // exp(logit - lmax) of the candidates, for top-p
    const bool                       by_k = params.top_k > 0 && params.top_k < n_vocab;
    float                            lmax;
    double                           z = 0.0;  // the softmax normalizer over the candidates
    if (by_k) {
        top_k(logits, n_vocab, params.top_k, ids);
        lmax = logits[ids[0]];
    } else {
        lmax = logits[argmax(logits, n_vocab)];
        z    = params.top_p < 1.0f ? sum_exp(logits, n_vocab, lmax) : 0.0;
        all_tokens(logits, n_vocab, lmax, z, params.top_p, ids);
    }
    if (params.top_p < 1.0f) {
        // as llama.cpp's top-p: the smallest head of the candidates that holds top_p of their softmax
        weights.resize(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) {
            weights[i] = std::exp((double) logits[ids[i]] - lmax);
            z += by_k ? weights[i] : 0.0;
        }
        double cum = 0.0;
        size_t i   = 0;
        while (i < ids.size()) {
            cum += weights[i] / z;
            ++i;
            if (cum >= params.top_p) {
                break;
            }
        }
        ids.resize(i);
    }
    if (params.min_p > 0.0f) {
        // p_i >= min_p * p_max  <=>  logit_i >= lmax + log(min_p); the most likely token always stays
        const float threshold = lmax + std::log(params.min_p);
        ids.erase(std::remove_if(ids.begin(), ids.end(), [&](llama_token t) { return logits[t] < threshold; }),
                  ids.end());
    }

    // temperature on the survivors, renormalized
    auto &       probs = out.probs;
    probs.resize(ids.size());
    const double inv_t = 1.0 / params.temperature;
    double       sum   = 0.0;
    for (size_t i = 0; i < ids.size(); ++i) {
        const double e = std::exp(((double) logits[ids[i]] - lmax) * inv_t);
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
