// speculative/acceptance.cpp: the greedy rule and the rejection-sampling rule.
#include "speculative/acceptance.h"

#include <stdexcept>

namespace specllama {

acceptance_result accept_greedy(const llama_token * draft, int32_t n_draft, const target_choice & target_argmax) {
    acceptance_result r;
    for (;;) {
        // there is always one more token: the target's own choice after the kept prefix
        r.next = target_argmax(r.n_accepted);
        if (r.n_accepted == n_draft || draft[r.n_accepted] != r.next) {
            return r;
        }
        ++r.n_accepted;
    }
}

bool accept_one_sampled(llama_token x, const token_dist & q, const token_dist & p, int32_t n_vocab, rng_t & rng,
                        acceptance_scratch & scratch, llama_token & correction) {
    const float px = p.prob_of(x);
    const float qx = q.prob_of(x);
    // keep x with probability min(1, p(x)/q(x)): u < p/q, written without the division
    if (uniform01(rng) * qx < px) {
        return true;
    }
    // rejected: draw from the residual max(0, p - q), renormalized. q(x) for each x of p's support:
    // a look-up in q's few tokens (a top-k chain), or in a dense row for a large q
    const bool dense = q.ids.size() > 64;
    auto &     qd    = scratch.q_dense;
    if (dense) {
        qd.assign(n_vocab, 0.0f);
        for (size_t j = 0; j < q.ids.size(); ++j) {
            qd[q.ids[j]] = q.probs[j];
        }
    }
    auto & res = scratch.residual;
    res.ids.clear();
    res.probs.clear();
    double mass = 0.0;
    for (size_t j = 0; j < p.ids.size(); ++j) {
        const float d = p.probs[j] - (dense ? qd[p.ids[j]] : q.prob_of(p.ids[j]));
        if (d > 0.0f) {
            res.ids.push_back(p.ids[j]);
            res.probs.push_back(d);
            mass += d;
        }
    }
    if (mass <= 0.0) {
        // p <= q everywhere only when p == q up to rounding, where a rejection has
        // probability ~0: fall back to p itself
        correction = sample(p, rng);
        return false;
    }
    for (auto & v : res.probs) {
        v = (float) (v / mass);
    }
    correction = sample(res, rng);
    return false;
}

acceptance_result accept_sampled(const llama_token * draft, int32_t n_draft, const std::vector<token_dist> & q,
                                 const target_dist & p, int32_t n_vocab, rng_t & rng, acceptance_scratch & scratch) {
    if ((int32_t) q.size() < n_draft) {
        throw std::invalid_argument("accept_sampled needs n_draft draft distributions");
    }
    acceptance_result r;
    for (int32_t i = 0; i < n_draft; ++i) {
        if (!accept_one_sampled(draft[i], q[i], p(i), n_vocab, rng, scratch, r.next)) {
            return r;
        }
        ++r.n_accepted;
    }
    r.next = sample(p(n_draft), rng);
    return r;
}

acceptance_result accept_sampled(const llama_token * draft, int32_t n_draft, const std::vector<token_dist> & q,
                                 const std::vector<token_dist> & p, int32_t n_vocab, rng_t & rng,
                                 acceptance_scratch & scratch) {
    if ((int32_t) q.size() < n_draft || (int32_t) p.size() < n_draft + 1) {
        throw std::invalid_argument("accept_sampled needs n_draft draft and n_draft + 1 target distributions");
    }
    return accept_sampled(draft, n_draft, q, [&p](int32_t i) -> const token_dist & { return p[i]; }, n_vocab, rng,
                          scratch);
}

acceptance_result accept_match(const llama_token * draft, int32_t n_draft, const std::vector<token_dist> & p,
                               rng_t & rng) {
    return accept_match(draft, n_draft, [&p](int32_t i) -> const token_dist & { return p[i]; }, rng);
}

acceptance_result accept_keyed(const llama_token * draft, int32_t n_draft, const target_dist & p, uint64_t key,
                               int64_t pos0) {
    // the greedy rule's: keep drafts while they equal the target's choice, here its keyed draw
    return accept_greedy(draft, n_draft, [&](int32_t i) { return sample_keyed(p(i), key, pos0 + i); });
}

acceptance_result accept_keyed(const llama_token * draft, int32_t n_draft, const std::vector<token_dist> & p,
                               uint64_t key, int64_t pos0) {
    return accept_keyed(draft, n_draft, [&p](int32_t i) -> const token_dist & { return p[i]; }, key, pos0);
}

acceptance_result accept_match(const llama_token * draft, int32_t n_draft, const target_dist & p, rng_t & rng) {
    acceptance_result r;
    for (int32_t i = 0; i <= n_draft; ++i) {
        const llama_token x = sample(p(i), rng);
        if (i == n_draft || x != draft[i]) {
            r.next = x;
            return r;
        }
        ++r.n_accepted;
    }
    return r;
}

}  // namespace specllama
