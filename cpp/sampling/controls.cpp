// sampling/controls.cpp: logit bias and repetition penalties, as llama.cpp's samplers apply them.
#include "sampling/controls.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace specllama {

void logit_controls_validate(const logit_controls & c, int32_t n_vocab) {
    for (const auto & [id, b] : c.bias) {
        if (id < 0 || id >= n_vocab) {
            throw std::invalid_argument("logit_bias names token " + std::to_string(id) + ", outside the vocabulary of " +
                                        std::to_string(n_vocab));
        }
        if (std::isnan(b) || b == INFINITY) {
            throw std::invalid_argument("logit_bias for token " + std::to_string(id) +
                                        " must be a number or -inf (never drawn)");
        }
    }
    std::vector<llama_token> banned;
    for (const auto & [id, b] : c.bias) {
        if (b == -INFINITY) {
            banned.push_back(id);
        }
    }
    std::sort(banned.begin(), banned.end());
    if ((int32_t) (std::unique(banned.begin(), banned.end()) - banned.begin()) >= n_vocab) {
        throw std::invalid_argument("logit_bias leaves no token that can be drawn");
    }
    if (c.last_n < -1) {
        throw std::invalid_argument("repeat_last_n must be >= -1 (-1: every token before), got " +
                                    std::to_string(c.last_n));
    }
    if (!(c.repeat > 0.0f) || !std::isfinite(c.repeat)) {
        throw std::invalid_argument("repeat_penalty must be a positive number, got " + std::to_string(c.repeat));
    }
    if (!std::isfinite(c.frequency) || !std::isfinite(c.presence)) {
        throw std::invalid_argument("frequency_penalty and presence_penalty must be finite numbers");
    }
    const auto in_vocab = [&](const std::vector<llama_token> & seq) {
        return std::all_of(seq.begin(), seq.end(), [&](llama_token t) { return t >= 0 && t < n_vocab; });
    };
    const thinking_budget & b = c.budget;
    if (b.tokens >= 0 && (b.forced.empty() || !in_vocab(b.forced) || !in_vocab(b.start) ||
                          !std::all_of(b.ends.begin(), b.ends.end(), in_vocab) || (!b.opened && b.start.empty()))) {
        throw std::invalid_argument("a thinking budget needs its forced tokens, and its start and end sequences, "
                                    "in the vocabulary (and a start sequence unless the prompt opened the thinking)");
    }
}

namespace {

// whether the text of the tokens at(from..to] ends inside a character of several bytes
template <typename At> bool ends_mid_character(const llama_vocab * vocab, At at, int32_t from, int32_t to) {
    std::string tail;
    char        buf[256];
    for (int32_t i = to; i > from && tail.size() < 4; --i) {
        const int32_t n = llama_token_to_piece(vocab, at(i), buf, sizeof(buf), 0, true);
        tail.insert(0, buf, n > 0 ? (size_t) n : 0);
    }
    // the last byte that is not a continuation byte (10xxxxxx), within the last four; its length as
    // llama.cpp's grammar decodes it (by the high four bits: 0xF8-0xFF lead four bytes too), so that a
    // closing tag is not forced where a grammar still waits for the character's bytes
    for (int32_t k = 1; k <= std::min<int32_t>(4, (int32_t) tail.size()); ++k) {
        const auto c = (unsigned char) tail[tail.size() - k];
        if ((c & 0xC0) != 0x80) {
            const int32_t len = c < 0x80                ? 1
                                : (c & 0xE0) == 0xC0 ? 2
                                : (c & 0xF0) == 0xE0 ? 3
                                                     : 4;
            return k < len;
        }
    }
    return false;
}

}  // namespace

llama_token thinking_budget_forces(const thinking_budget & b, const llama_token * before, int32_t n_before,
                                   const llama_token * after, int32_t n_after) {
    if (!b.active()) {
        return -1;
    }
    const int32_t n  = n_before + n_after;
    const auto    at = [&](int32_t i) { return i < n_before ? before[i] : after[i - n_before]; };
    // whether seq ends at position i (inclusive) of the history, within the reply (it may begin in
    // the prompt: gpt-oss's first analysis message opens on the prompt's <|start|>assistant)
    const auto ends_with = [&](const std::vector<llama_token> & seq, int32_t i) {
        const int32_t k = (int32_t) seq.size();
        if (k == 0 || i < b.reply_start || i + 1 - k < 0) {
            return false;
        }
        for (int32_t j = 0; j < k; ++j) {
            if (at(i + 1 - k + j) != seq[j]) {
                return false;
            }
        }
        return true;
    };
    enum class state : int8_t { idle, thinking, done };
    state         s       = b.opened ? state::thinking : state::idle;
    const int32_t first   = std::max(b.reply_start, 0);
    int32_t       begun   = first - 1;  // the position before the thinking's first token
    int32_t       count   = 0;          // thinking tokens so far
    int32_t       forcing = -1;         // where the forced text began (-1: not yet)
    // whether the forced text begins at position i: the budget is spent, and the thinking does not
    // end inside a character (or has waited three tokens for it)
    const auto spent = [&](int32_t i) {
        return count >= b.tokens &&
               (b.vocab == nullptr || count >= b.tokens + 3 || !ends_mid_character(b.vocab, at, begun, i - 1));
    };
    for (int32_t i = first; i < n; ++i) {
        if (s != state::thinking) {  // (a start sequence after a closed thinking opens a new budget)
            if (ends_with(b.start, i)) {
                s = state::thinking, begun = i, count = 0, forcing = -1;
            }
            continue;
        }
        if (forcing < 0 && spent(i)) {
            forcing = i;
        }
        if (forcing >= 0) {
            s = i + 1 - forcing >= (int32_t) b.forced.size() ? state::done : s;
        } else if (std::any_of(b.ends.begin(), b.ends.end(), [&](const auto & e) { return ends_with(e, i); })) {
            s = state::done;
        } else {
            ++count;
        }
    }
    if (s != state::thinking) {
        return -1;
    }
    if (forcing < 0 && spent(n)) {
        forcing = n;
    }
    return forcing < 0 ? -1 : b.forced[n - forcing];
}

const float * logit_editor::apply(const logit_controls & c, const float * logits, int32_t n_vocab,
                                  const llama_token * before, int32_t n_before, const llama_token * after,
                                  int32_t n_after) {
    const llama_token forced = thinking_budget_forces(c.budget, before, n_before, after, n_after);
    if (forced >= 0) {  // (its logit stays what it was: a logit_bias of -inf does not keep it out)
        row_.assign(n_vocab, -INFINITY);
        row_[forced] = std::isfinite(logits[forced]) ? logits[forced] : 0.0f;
        return row_.data();
    }
    if (c.bias.empty() && !c.penalizes()) {
        return logits;
    }
    row_.assign(logits, logits + n_vocab);
    for (const auto & [id, b] : c.bias) {
        row_[id] += b;
    }
    if (c.penalizes()) {
        if ((int32_t) count_.size() != n_vocab) {
            count_.assign(n_vocab, 0);
        }
        // the window: the last last_n of before + after
        const int32_t n_all  = n_before + n_after;
        const int32_t n_win  = c.last_n < 0 ? n_all : std::min(c.last_n, n_all);
        const auto    count  = [&](llama_token t) {
            if (t >= 0 && t < n_vocab && count_[t]++ == 0) {
                counted_.push_back(t);
            }
        };
        for (int32_t i = n_all - n_win; i < n_all; ++i) {
            count(i < n_before ? before[i] : after[i - n_before]);
        }
        for (const llama_token t : counted_) {
            float & l = row_[t];
            l         = l <= 0.0f ? l * c.repeat : l / c.repeat;
            l -= (float) count_[t] * c.frequency + c.presence;
            count_[t] = 0;
        }
        counted_.clear();
    }
    if (!std::any_of(row_.begin(), row_.end(), [](float l) { return l > -INFINITY; })) {
        throw std::invalid_argument("logit_bias leaves no token that can be drawn");
    }
    return row_.data();
}

}  // namespace specllama
