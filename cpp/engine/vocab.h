// engine/vocab.h: a model's vocabulary: text to tokens (bounded for untrusted input), tokens to
// bytes, chat messages to a prompt with llama.cpp's built-in templates, and whether two models
// share one vocabulary.
// Not here: drafting across vocabularies (speculative/vocab_map.h), Jinja templates (specllama/templates.py).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/model.h"

namespace specllama {

// the first difference between the draft's vocabulary and the target's, in words ("" when they are
// one: same tokens with the same ids and texts, same special tokens, same BOS rule). A draft with
// another vocabulary drafts through vocab_map.h.
std::string vocab_difference(const model & target, const model & draft);

// render messages (role, content) with a chat template; add_assistant appends the reply header
std::string chat_apply_template(const std::string & tmpl,
                                const std::vector<std::pair<std::string, std::string>> & messages,
                                bool add_assistant);

// tokenize text; add_special adds BOS/EOS as the model asks, parse_special reads "<|im_end|>" etc. as tokens
std::vector<llama_token> tokenize(const model & mdl, const std::string & text, bool add_special, bool parse_special);

// a text with more than a limit of tokens
struct text_too_long : std::invalid_argument {
    int64_t n_tokens_at_least;  // the text's token count where exact, else a lower bound
    bool    exact;
    text_too_long(int64_t n, int64_t limit, bool exact)
        : std::invalid_argument("the text has " + std::string(exact ? "" : "at least ") + std::to_string(n) +
                                " tokens, more than " + std::to_string(limit)),
          n_tokens_at_least(n),
          exact(exact) {}
};

// tokenize, refusing (text_too_long) a text of more than max_tokens tokens at the cost of
// tokenizing a bounded prefix: a text longer than max_tokens tokens of the longest piece each is
// judged by its first (max_tokens + 64) * max_piece_bytes bytes
std::vector<llama_token> tokenize_bounded(const model & mdl, const std::string & text, bool add_special,
                                          bool parse_special, int64_t max_tokens);

// the bytes of one token (special tokens render as "" unless special is true)
std::string token_to_piece(const model & mdl, llama_token token, bool special = false);

}  // namespace specllama
