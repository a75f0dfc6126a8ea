// speculative/vocab_map.h: drafts from a model with another vocabulary, by token-level intersection (TLI,
// Timor et al., "Accelerating LLM Inference with Lossless Speculative Decoding Algorithms for
// Heterogeneous Vocabularies", ICML 2025, sec. 4). Draft and target tokens whose text is the same
// bytes pair one-to-one: the shared set I. The draft only proposes tokens of I: its logits over I,
// moved to their partners' target ids, go through the target's sampler (its grammar, logit controls
// and chain), which gives q' (zero outside I), and the usual rejection rule against q' keeps the
// output exactly the target's, greedy or sampled. The draft reads the target's text as its own
// tokens: a target token in I as its partner, any other by the longest draft pieces that spell
// its bytes.
// Not here: the drafting loop (drafting.h) and verification (speculative/decoder.h).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model.h"

namespace specllama {

class vocab_map {
  public:
    // pairs the two vocabularies; throws std::invalid_argument when the shared tokens cover less
    // than min_share of the draft's proposable tokens (such a draft cannot propose most of what it
    // predicts)
    vocab_map(const model & target, const model & draft, double min_share = k_min_share);

    static constexpr double k_min_share = 0.25;

    llama_token to_target(llama_token d) const { return d2t_[d]; }  // -1 outside I
    llama_token to_draft(llama_token t) const { return t2d_[t]; }   // -1 outside I
    int32_t     n_shared() const { return n_shared_; }
    // shared tokens over the draft's proposable tokens (not unknown, unused or unpaired controls
    // with no text)
    double      draft_share() const { return draft_share_; }
    double      target_share() const { return target_share_; }

    // the draft's tokens for target token t: its partner, or draft pieces that spell its text
    // (longest first; bytes no draft piece holds are left out: the draft then conditions on
    // slightly different text, which costs acceptance, never correctness)
    void append_draft_tokens(llama_token t, std::vector<llama_token> & out) const;
    // I as runs of consecutive draft ids whose partners are consecutive target ids (a vocabulary cut
    // or renamed from the target's is a few long runs): the draft's logits over I, at their partners'
    // ids, are what it samples from
    struct id_run {
        llama_token draft  = 0;
        llama_token target = 0;
        int32_t     n      = 0;
    };
    const std::vector<id_run> & shared_runs() const { return runs_; }
    int32_t                          n_target_vocab() const { return (int32_t) t2d_.size(); }
    const llama_vocab *              target_vocab() const { return target_vocab_; }

    llama_token draft_bos() const { return draft_bos_; }        // -1: the draft adds none
    llama_token target_bos() const { return target_bos_; }      // -1: the target adds none

  private:
    std::vector<llama_token>                     d2t_, t2d_;
    std::vector<id_run>                          runs_;
    std::vector<std::string>                     target_text_;  // for tokens outside I
    std::unordered_map<std::string, llama_token> draft_pieces_;  // text -> draft token (not controls)
    size_t                                       max_piece_ = 1;
    int32_t                                      n_shared_ = 0;
    double                                       draft_share_ = 0, target_share_ = 0;
    llama_token                                  draft_bos_ = -1, target_bos_ = -1;
    const llama_vocab *                          target_vocab_ = nullptr;
};

// the draft's view of a target token sequence, kept up to date as the sequence grows and is cut
// back: update() converts only what changed since the last call
class draft_view {
  public:
    explicit draft_view(const vocab_map & map) : map_(map) {}

    const std::vector<llama_token> & update(const std::vector<llama_token> & target_seq);
    const std::vector<llama_token> & tokens() const { return dft_; }

  private:
    const vocab_map &        map_;
    std::vector<llama_token> tgt_;   // the target sequence last converted
    std::vector<llama_token> dft_;   // its draft tokens
    std::vector<int32_t>     ends_;  // ends_[i]: draft tokens after converting tgt_[0..i]
    int32_t                  n_head_ = 0;  // draft tokens before tgt_[0]'s (the draft's BOS)
};

}  // namespace specllama
