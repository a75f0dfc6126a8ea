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
#include <unordered_map>
#include <utility>
#include <vector>

#include "llama.h"
#include "sampling/sampling.h"

namespace specllama {

// where a reasoning model's reply may hold its thinking before the answer: none (the grammar reads
// the whole reply), optional (the reply may open a thinking block), open (the prompt opened one: the
// reply starts inside it); the block's tags (Qwen3's and DeepSeek-R1's, Gemma 4's <|channel>thought
// and <channel|>, ...); call_tags: tags that also end the thinking and that the grammar reads, from
// their start on (a tool call's opening tag, where the model may call a tool from inside its
// thinking, as Qwen3.5 does)
enum class thinking_start : int8_t { none, optional, open };

struct thinking_markup {
    thinking_start           start     = thinking_start::none;
    std::string              open_tag  = "<think>";
    std::string              close_tag = "</think>";
    std::vector<std::string> call_tags;
};

class grammar_state {
  public:
    // groups (parentheses) a grammar may nest: llama.cpp's parser descends once per group on the thread's
    // stack, and no grammar written or converted from a schema comes near this
    static constexpr int32_t k_max_group_depth = 256;

    // std::invalid_argument where llama.cpp cannot parse the grammar (or a trigger pattern) or where it
    // nests groups deeper than k_max_group_depth.
    // Lazy (llama.cpp's lazy grammar, as llama-server's for tool calls) where triggers are given:
    // it allows everything until the output matches one of trigger_patterns (regular expressions;
    // the grammar then follows from the first capture group's start, or the match's) or holds one of
    // trigger_tokens (from that token on). thinking (a lazy grammar's only): the grammar reads the
    // reply from after its thinking block's closing tag on, so that a trigger inside the thinking does
    // not start it (and a trigger anchored at the start matches the answer's start), or from the
    // token where one of its call tags starts; a reply that turns out not to open one is read whole
    grammar_state(const llama_vocab * vocab, const std::string & gbnf, const std::string & root = "root",
                  const std::vector<std::string> & trigger_patterns = {},
                  const std::vector<llama_token> & trigger_tokens = {},
                  const thinking_markup & thinking = {});
    grammar_state(const grammar_state & other);
    grammar_state & operator=(const grammar_state & other);
    ~grammar_state();

    // whether the grammar allows token next
    bool allows(llama_token token) const;
    // the grammar's verdict on each of cand (a rejected one's logit becomes -inf); the state is unchanged
    void apply(std::vector<llama_token_data> & cand) const;
    // advance over token (which it must allow)
    void accept(llama_token token);
    // logits with what sampling with p reads of the rejected tokens at -inf, in out (n_vocab
    // entries): for greedy decoding the first allowed token by logit, for top_k > 0 the top_k
    // likeliest allowed ones (or as many of them as decide p's distribution), else every allowed
    // token; logits themselves while a lazy grammar awaits its trigger. std::invalid_argument where it
    // allows none.
    const float * mask(const float * logits, int32_t n_vocab, const sampling_params & p, std::vector<float> & out);

  private:
    // whether the grammar constrains the next token: false only for a lazy grammar still awaiting its
    // trigger (told by the token of the NUL byte, which llama.cpp's grammar rejects whenever it is
    // active and leaves alone while it waits); true where the vocabulary has no such token
    bool constraining() const;
    // thinking: whether the grammar reads token (false while the reply's thinking goes on, or while
    // it is not yet known whether the reply opens one: those tokens wait in held_; false too where a
    // call tag ended the thinking: the tokens from the tag's start on were read here)
    bool read_by_grammar(llama_token token);
    // thinking: the first thinking-ending tag in text_ (its position, and whether it is a call tag),
    // or npos
    std::pair<size_t, bool> thinking_end() const;

    enum class phase : int8_t { reading, undecided, thinking };
    llama_sampler *                   smpl_ = nullptr;
    const llama_vocab *               vocab_ = nullptr;
    phase                             phase_ = phase::reading;
    std::string                       open_tag_, close_tag_;  // the thinking block's
    std::vector<std::string>          call_tags_;
    size_t                            longest_tag_ = 0;  // the length of the longest of the closing and call tags
    std::string                       text_;  // undecided: the reply so far; thinking: the pieces of recent_
    // thinking: the last tokens and their pieces' lengths (as many as hold the longest tag's start)
    std::vector<std::pair<llama_token, size_t>> recent_;
    std::vector<llama_token>          held_;  // undecided: the reply's tokens
    llama_token                       nul_  = -1;  // a lazy grammar's: the NUL byte's token (-1: none, or not lazy)
    std::vector<int32_t>              order_;  // token ids, partly sorted by logit
    std::vector<llama_token_data>     cand_;
    std::vector<float>                found_;  // logits of the allowed tokens found, descending
};

// grammar-forced drafts: where the grammar admits a single character next (the keys and closing
// quotes of a fixed JSON schema, say), a run of such characters is text the output must contain
// whatever either model's logits say. Its tokens (the vocabulary's own tokenization of the text)
// are proposed as drafts with q = 1, without a draft decode; the rejection rule is exact for any q,
// so a proposal the target would not make costs acceptance, never exactness. The text's last token
// is left out (the output may merge it with what follows, as `name` + `":` for the text `name"`),
// unless nothing but the end of the output can follow it.
class grammar_forcing {
  public:
    explicit grammar_forcing(const llama_vocab * vocab);
    // up to n_max forced tokens to follow state (none where the next character is not forced), in out
    void tokens(const grammar_state & state, int32_t n_max, std::vector<llama_token> & out);

    static constexpr int32_t k_max_chars = 64;  // the longest forced text looked for at once

  private:
    void tokenize(const std::string & text, std::vector<llama_token> & out);

    const llama_vocab *           vocab_;
    std::unordered_map<std::string, llama_token> pieces_;  // a token for each token text
    int32_t                       max_piece_ = 1;
    std::vector<llama_token_data> probe_;  // a token for each one-character text, then the end tokens
    std::vector<char>             chars_;  // probe_[i]'s character ('\0': an end-of-generation token)
    std::vector<llama_token_data> cand_;
    std::string                   text_;
    std::vector<llama_token>      toks_;
};

// the grammar's state at each position of a verification step: after the tokens emitted so far
// (at(0)), and after each of the step's drafts
class grammar_track {
  public:
    // forcing: where given, the grammar proposes the tokens it forces (forced())
    explicit grammar_track(const grammar_state & start, grammar_forcing * forcing = nullptr)
        : committed_(start), forcing_(forcing) {}
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
    // the tokens the grammar forces after the latest state (at most n_max; none without forcing)
    void forced(int32_t n_max, std::vector<llama_token> & out) {
        out.clear();
        if (forcing_ != nullptr) {
            forcing_->tokens(at_.back(), n_max, out);
        }
    }
    // after a step that kept n_kept drafts and then emitted next
    void commit(int32_t n_kept, llama_token next) {
        committed_ = at_[n_kept];
        committed_.accept(next);
    }

  private:
    grammar_state              committed_;
    grammar_forcing *          forcing_ = nullptr;
    std::vector<grammar_state> at_;
};

}  // namespace specllama
