// sampling/grammar.cpp: a grammar's constraint on a row of logits.
#include "sampling/grammar.h"

#include "engine/llama_log.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace specllama {

grammar_state::grammar_state(const llama_vocab * vocab, const std::string & gbnf, const std::string & root) {
    take_last_error();
    smpl_ = llama_sampler_init_grammar(vocab, gbnf.c_str(), root.c_str());
    if (smpl_ == nullptr) {
        const std::string why = take_last_error();
        throw std::invalid_argument("the grammar does not parse as llama.cpp's GBNF from rule '" + root + "'" +
                                    (why.empty() ? std::string() : ": " + why));
    }
}

grammar_state::grammar_state(const grammar_state & other) : smpl_(llama_sampler_clone(other.smpl_)) {}

grammar_state & grammar_state::operator=(const grammar_state & other) {
    if (this != &other) {
        llama_sampler * copy = llama_sampler_clone(other.smpl_);
        llama_sampler_free(smpl_);
        smpl_ = copy;
    }
    return *this;
}

grammar_state::~grammar_state() {
    llama_sampler_free(smpl_);
}

bool grammar_state::allows(llama_token token) const {
    llama_token_data       d{token, 0.0f, 0.0f};
    llama_token_data_array a{&d, 1, -1, false};
    llama_sampler_apply(smpl_, &a);
    return d.logit != -INFINITY;
}

void grammar_state::accept(llama_token token) {
    llama_sampler_accept(smpl_, token);
}

const float * grammar_state::mask(const float * logits, int32_t n_vocab, const sampling_params & p,
                                  std::vector<float> & out) {
    out.assign(n_vocab, -INFINITY);
    const int32_t want = p.greedy() ? 1 : p.top_k > 0 ? p.top_k : n_vocab;
    const auto    by_logit = [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    order_.resize(n_vocab);
    std::iota(order_.begin(), order_.end(), 0);
    int32_t found = 0;
    // the likeliest tokens in growing blocks, checked a block at a time, until enough are allowed
    for (int32_t start = 0, block = 64; start < n_vocab && found < want; start += block, block *= 4) {
        const int32_t end = std::min(n_vocab, start + block);
        if (want < n_vocab) {
            if (end < n_vocab) {
                std::nth_element(order_.begin() + start, order_.begin() + end, order_.end(), by_logit);
            }
            std::sort(order_.begin() + start, order_.begin() + end, by_logit);
        }
        cand_.clear();
        for (int32_t i = start; i < end; ++i) {
            cand_.push_back({order_[i], logits[order_[i]], 0.0f});
        }
        llama_token_data_array a{cand_.data(), cand_.size(), -1, false};
        llama_sampler_apply(smpl_, &a);
        for (const llama_token_data & d : cand_) {
            if (d.logit != -INFINITY && found < want) {
                out[d.id] = logits[d.id];
                ++found;
            }
        }
    }
    if (found == 0) {
        throw std::invalid_argument("the grammar allows no token here");
    }
    return out.data();
}

}  // namespace specllama
