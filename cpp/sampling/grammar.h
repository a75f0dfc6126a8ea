// sampling/grammar.h: a GBNF grammar (llama.cpp's grammar sampler) as a constraint on what can be
// drawn: the tokens it rejects after the text so far leave the distribution before the chain
// (sampling.h) takes its top-k, for the draft's logits and the target's alike, so the rejection
// rule emits exactly the constrained target's distribution. Only as much of the vocabulary is
// checked as the chain reads: the likeliest tokens, in order, until top_k of them are allowed (the
// first allowed one for greedy decoding), or until no token further down could change what top-p
// and min-p keep of those found; the whole vocabulary without top-k.
// Not here: which state goes with which drafted position (speculative/decoder.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llama.h"
#include "sampling/sampling.h"

namespace specllama {

class grammar_state {
  public:
    // std::invalid_argument where llama.cpp cannot parse the grammar
    grammar_state(const llama_vocab * vocab, const std::string & gbnf, const std::string & root = "root");
    grammar_state(const grammar_state & other);
    grammar_state & operator=(const grammar_state & other);
    ~grammar_state();

    // whether the grammar allows token next
    bool allows(llama_token token) const;
    // advance over token (which it must allow)
    void accept(llama_token token);
    // logits with what sampling with p reads of the rejected tokens at -inf, in out (n_vocab
    // entries): for greedy decoding the first allowed token by logit, for top_k > 0 the top_k
    // likeliest allowed ones (or as many of them as decide p's distribution), else every allowed
    // token. std::invalid_argument where it allows none.
    const float * mask(const float * logits, int32_t n_vocab, const sampling_params & p, std::vector<float> & out);

  private:
    llama_sampler *                   smpl_ = nullptr;
    std::vector<int32_t>              order_;  // token ids, partly sorted by logit
    std::vector<llama_token_data>     cand_;
    std::vector<float>                found_;  // logits of the allowed tokens found, descending
};

// the grammar's state at each position of a verification step: after the tokens emitted so far
// (at(0)), and after each of the step's drafts
class grammar_track {
  public:
    explicit grammar_track(const grammar_state & start) : committed_(start) {}
    void begin_step() { at_.assign(1, committed_); }
    grammar_state & at(int32_t i) { return at_[i]; }
    // the state after one more draft; false (and nothing added) where the grammar rejects it
    bool push(llama_token token) {
        grammar_state next = at_.back();
        if (!next.allows(token)) {
            return false;
        }
        next.accept(token);
        at_.push_back(std::move(next));
        return true;
    }
    // after a step that kept n_kept drafts and then emitted next
    void commit(int32_t n_kept, llama_token next) {
        committed_ = at_[n_kept];
        committed_.accept(next);
    }

  private:
    grammar_state              committed_;
    std::vector<grammar_state> at_;
};

}  // namespace specllama
