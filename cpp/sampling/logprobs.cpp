// sampling/logprobs.cpp: log-probabilities of a distribution or a row of logits.
#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>

namespace specllama {

namespace {

bool likelier(const std::pair<llama_token, float> & a, const std::pair<llama_token, float> & b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
}

// the k likeliest of (id, value) pairs offered one by one, kept in a heap of k
class top_k_pairs {
  public:
    explicit top_k_pairs(int32_t k) : k_(k) {}
    void offer(llama_token id, float v) {
        if (k_ <= 0) {
            return;
        }
        const std::pair<llama_token, float> e{id, v};
        if ((int32_t) heap_.size() < k_) {
            heap_.push_back(e);
            std::push_heap(heap_.begin(), heap_.end(), likelier);  // the least likely on top
        } else if (likelier(e, heap_.front())) {
            std::pop_heap(heap_.begin(), heap_.end(), likelier);
            heap_.back() = e;
            std::push_heap(heap_.begin(), heap_.end(), likelier);
        }
    }
    void take(std::vector<std::pair<llama_token, float>> & out) {
        std::sort(heap_.begin(), heap_.end(), likelier);
        out = std::move(heap_);
    }

  private:
    int32_t                                    k_;
    std::vector<std::pair<llama_token, float>> heap_;
};

}  // namespace

void dist_logprobs(const token_dist & dist, llama_token token, int32_t k, float & logprob,
                   std::vector<std::pair<llama_token, float>> & top) {
    top_k_pairs best(k);
    for (size_t i = 0; i < dist.ids.size(); ++i) {
        best.offer(dist.ids[i], dist.probs[i]);
    }
    best.take(top);
    for (auto & [id, p] : top) {
        p = std::log(p);
    }
    logprob = std::log(dist.prob_of(token));
}

void row_logprobs(const float * logits, int32_t n_vocab, llama_token token, int32_t k, float & logprob,
                  std::vector<std::pair<llama_token, float>> & top) {
    const float m   = *std::max_element(logits, logits + n_vocab);
    double      sum = 0.0;
    top_k_pairs best(k);
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (logits[i] > -INFINITY) {  // (a token that cannot be drawn is no alternative)
            sum += std::exp((double) logits[i] - m);
            best.offer(i, logits[i]);
        }
    }
    const float lse = m + (float) std::log(sum);
    best.take(top);
    for (auto & [id, l] : top) {
        l -= lse;
    }
    logprob = logits[token] - lse;
}

}  // namespace specllama
