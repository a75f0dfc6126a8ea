// sampling/sampling.cpp: top-k / top-p / min-p / temperature over a vocabulary of logits, as llama.cpp's
// sampler chain applies them.
#include "sampling/sampling.h"

#include "sampling/softmax.h"
#include "sampling/vocab_scan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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
    if (p.infill != nullptr && !p.greedy() && (p.top_k < 1 || p.top_k > k_max_infill_candidates)) {
        // its merge compares every pair of candidates
        throw std::invalid_argument("the infill sampler needs top_k in [1, " + std::to_string(k_max_infill_candidates) +
                                    "], got " + std::to_string(p.top_k));
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

// e^x for the chain's arguments (x <= 0: a logit less the largest, scaled), without a table: the
// candidates' arguments are scattered, and a table's lines are cold after every decode.
// Cody-Waite reduction to |r| <= ln2 / 2, then the Taylor polynomial of degree 13 (error below
// 2e-16 relative); below the normal range, 0
inline double exp_le0(double x) {
    if (!(x > -708.0)) {
        return x != x ? x : 0.0;  // (NaN stays NaN)
    }
    const double k = std::nearbyint(x * 1.4426950408889634);
    const double r = (x - k * 0.6931471803691238) - k * 1.9082149292705877e-10;
    double       p = 1.0 / 6227020800.0;
    for (const double c : {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
                           1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0}) {
        p = p * r + c;
    }
    const uint64_t bits = (uint64_t) ((int64_t) k + 1023) << 52;  // 2^k (k >= -1022 here)
    double         two_k;
    std::memcpy(&two_k, &bits, sizeof(two_k));
    return p * two_k;
}

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
            cum += exp_le0((double) logits[ids[i]] - lmax) / z;  // (as finish_chain's cut)
        }
        if (n_sorted == ids.size() || cum >= top_p) {
            ids.resize(n_sorted);
            return;
        }
        n_sorted = std::min(ids.size(), n_sorted * 8);
    }
}

// the chain after its candidates are chosen: top-p (on their softmax, whose normalizer is z; 0: over
// the candidates themselves), min-p against lmax, temperature on the survivors, then infill.
// ids: the candidates, most likely first where top-p needs an order; logit(i): ids[i]'s logit
template <typename Logit>
void finish_chain(std::vector<llama_token> & ids, const Logit & logit, float lmax, double z,
                  const sampling_params & params, token_dist & out) {
    thread_local std::vector<double> weights;  // exp(logit - lmax) of the candidates, for top-p
    const bool                       own_z = z == 0.0;
    if (params.top_p < 1.0f) {
        // as llama.cpp's top-p: the smallest head of the candidates that holds top_p of their softmax
        weights.resize(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) {
            weights[i] = exp_le0((double) logit(i) - lmax);
            z += own_z ? weights[i] : 0.0;
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
    // temperature on the survivors of min-p, renormalized. min-p: p_i >= min_p * p_max  <=>
    // logit_i >= lmax + log(min_p); the most likely token always stays
    const float  threshold = params.min_p > 0.0f ? lmax + std::log(params.min_p) : -INFINITY;
    const double inv_t     = 1.0 / params.temperature;
    auto &       probs     = out.probs;
    probs.clear();
    size_t n   = 0;
    double sum = 0.0;
    for (size_t i = 0; i < ids.size(); ++i) {
        const float l = logit(i);
        if (l < threshold) {
            continue;
        }
        const double e = exp_le0(((double) l - lmax) * inv_t);
        ids[n++]       = ids[i];
        probs.push_back((float) e);
        sum += e;
    }
    ids.resize(n);
    for (auto & p : probs) {
        p = (float) (p / sum);
    }
    if (params.infill != nullptr) {
        apply_infill(params.infill, out);
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
    auto &     ids  = out.ids;
    const bool by_k = params.top_k > 0 && params.top_k < n_vocab;
    float      lmax;
    double     z = 0.0;  // the softmax normalizer over the whole vocabulary (0: over the candidates)
    if (by_k) {
        top_k(logits, n_vocab, params.top_k, ids);
        lmax = logits[ids[0]];
    } else {
        lmax = logits[argmax(logits, n_vocab)];
        z    = params.top_p < 1.0f ? sum_exp(logits, n_vocab, lmax) : 0.0;
        all_tokens(logits, n_vocab, lmax, z, params.top_p, ids);
    }
    finish_chain(ids, [&](size_t i) { return logits[ids[i]]; }, lmax, z, params, out);
}

namespace {

// a logit's sort key: ascending keys order the candidates most likely first, equal logits lower id
// first. The high half is the float's bits turned so that unsigned order is descending float order
// (-0 counted as +0, as the float comparison does), the low half the id
uint64_t candidate_key(float logit, llama_token id) {
    uint32_t u;
    const float f = logit + 0.0f;  // (-0 + 0 = +0)
    std::memcpy(&u, &f, sizeof(u));
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // unsigned order = float order
    return (uint64_t) ~u << 32 | (uint32_t) id;
}

float key_logit(uint64_t key) {
    uint32_t u = ~(uint32_t) (key >> 32);
    u          = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}

}  // namespace

void sparse_distribution(const float * logits, const llama_token * ids, int32_t n, const sampling_params & params,
                         token_dist & out) {
    // the candidates most likely first, equal logits lower id first (as top_k orders them): one sort
    // of integer keys, each holding its logit and id
    thread_local std::vector<uint64_t> keys;
    keys.resize(n);
    for (int32_t i = 0; i < n; ++i) {
        keys[i] = candidate_key(logits[i], ids[i]);
    }
    std::sort(keys.begin(), keys.end());
    out.ids.resize(n);
    for (int32_t i = 0; i < n; ++i) {
        out.ids[i] = (llama_token) (uint32_t) keys[i];
    }
    finish_chain(out.ids, [&](size_t i) { return key_logit(keys[i]); }, key_logit(keys[0]), 0.0, params, out);
}

namespace {

std::string piece_of(const llama_vocab * vocab, llama_token id) {
    char          buf[256];
    const int32_t n = llama_token_to_piece(vocab, id, buf, sizeof(buf), 0, false);
    if (n >= 0) {
        return std::string(buf, n);
    }
    std::string big(-n, '\0');
    llama_token_to_piece(vocab, id, big.data(), -n, 0, false);
    return big;
}

}  // namespace

void apply_infill(const llama_vocab * vocab, token_dist & d) {
    // llama_sampler_infill_apply (llama-sampler.cpp), step for step, on the candidates sorted most
    // likely first (ties by id)
    const size_t        n = d.ids.size();
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return d.probs[a] != d.probs[b] ? d.probs[a] > d.probs[b] : d.ids[a] < d.ids[b];
    });
    std::vector<llama_token> ids(n);
    std::vector<double>      chain_p(n), p(n);
    std::vector<char>        eog(n), gone(n, 0);
    double                   p_txt = 0.0, p_eog = 0.0;
    for (size_t i = 0; i < n; ++i) {
        ids[i]     = d.ids[order[i]];
        chain_p[i] = p[i] = d.probs[order[i]];
        eog[i]            = llama_vocab_is_eog(vocab, ids[i]);
        (eog[i] ? p_eog : p_txt) += p[i];
    }
    const auto keep = [&](const std::vector<size_t> & kept) {
        // the survivors, drawn by the chain's probabilities
        double sum = 0.0;
        for (const size_t i : kept) {
            sum += chain_p[i];
        }
        d.ids.clear();
        d.probs.clear();
        for (const size_t i : kept) {
            d.ids.push_back(ids[i]);
            d.probs.push_back((float) (chain_p[i] / sum));
        }
    };
    std::vector<size_t> kept;
    if (3.0 * p_eog * (double) n > p_txt) {  // end-of-generation likely enough: only those
        for (size_t i = 0; i < n; ++i) {
            if (eog[i]) {
                kept.push_back(i);
            }
        }
        keep(kept);
        return;
    }
    // a token whose text starts another's is merged with it, into the likelier of the two
    std::vector<std::string> pieces(n);
    for (size_t i = 0; i < n; ++i) {
        pieces[i] = piece_of(vocab, ids[i]);
    }
    for (size_t i0 = 0; i0 < n; ++i0) {
        for (size_t i1 = 0; i1 < n; ++i1) {
            if (gone[i0]) {
                break;
            }
            if (i0 == i1 || gone[i1]) {
                continue;
            }
            const std::string & a = pieces[i0];
            const std::string & b = pieces[i1];
            if (!a.empty() && a.size() <= b.size() && b.compare(0, a.size(), a) == 0) {
                size_t dst = i0, src = i1;
                if (p[i1] > p[i0]) {
                    std::swap(dst, src);
                }
                p[dst] += p[src];
                p[src]    = 0.0;
                gone[src] = 1;
            }
        }
    }
    // drop text tokens below 0.2, then below 1 / (the text tokens left + 1) of what is left
    size_t n_text = 0;
    double sum    = 0.0;
    for (size_t i = 0; i < n; ++i) {
        if (eog[i] || (float) p[i] >= 0.2f) {
            kept.push_back(i);
            n_text += eog[i] ? 0 : 1;
            sum += p[i];
        }
    }
    if (n_text == 0) {  // no text token is likely enough: end here
        llama_token end = llama_vocab_eot(vocab);
        d.ids.assign(1, end != LLAMA_TOKEN_NULL ? end : llama_vocab_eos(vocab));
        d.probs.assign(1, 1.0f);
        return;
    }
    const double        thold = 1.0 / (double) (n_text + 1);
    std::vector<size_t> kept2;
    for (const size_t i : kept) {
        if (eog[i] || (float) (p[i] / sum) >= (float) thold) {
            kept2.push_back(i);
        }
    }
    keep(kept2);
}

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t seed_or_random(const std::optional<uint64_t> & seed) {
    return seed ? *seed : ((uint64_t) std::random_device{}() << 32 | std::random_device{}());
}

llama_token sample_keyed(const token_dist & dist, uint64_t key, int64_t pos) {
    const uint64_t base  = splitmix64(splitmix64(key) ^ (uint64_t) pos);
    llama_token    best  = dist.ids.empty() ? -1 : dist.ids[0];
    double         score = -INFINITY;
    for (size_t i = 0; i < dist.ids.size(); ++i) {
        if (!(dist.probs[i] > 0.0f)) {
            continue;
        }
        const uint64_t h = splitmix64(base ^ (uint64_t) (uint32_t) dist.ids[i]);
        const double   u = ((double) (h >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // in (0, 1)
        const double   s = std::log((double) dist.probs[i]) - std::log(-std::log(u));
        if (s > score) {
            score = s;
            best  = dist.ids[i];
        }
    }
    return best;
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
