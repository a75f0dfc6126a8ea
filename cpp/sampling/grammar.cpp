// sampling/grammar.cpp: a grammar's constraint on a row of logits.
#include "sampling/grammar.h"

#include "engine/llama_log.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <regex>
#include <stdexcept>

namespace specllama {

namespace {

// top-p's head over candidates of weights w (descending) and normalizer z: how many it keeps, or
// w.size() + 1 where the candidates do not hold top_p of z
size_t top_p_head(const std::vector<double> & w, double z, float top_p) {
    double cum = 0.0;
    for (size_t i = 0; i < w.size(); ++i) {
        cum += w[i] / z;
        if (cum >= top_p) {
            return i + 1;
        }
    }
    return w.size() + 1;
}

// whether the chain p makes the same distribution from the allowed tokens found so far (logits
// found, descending) whatever the tokens not yet checked hold: each of them has a logit of at most
// l_next, and at most n_more of them could join the candidates. Their weight can only move top-p's
// cut further down; it settles where that cut stays among the found tokens, or where min-p drops
// everything below them. (The infill sampler, which reads every candidate, never settles.)
bool settled(const std::vector<float> & found, float l_next, int32_t n_more, const sampling_params & p) {
    if (p.infill != nullptr || found.empty()) {
        return false;
    }
    const float lmax       = found[0];
    const bool  min_p_cuts = p.min_p > 0.0f && l_next < lmax + std::log(p.min_p);
    if (p.top_p >= 1.0f) {
        return min_p_cuts;
    }
    thread_local std::vector<double> w;
    w.resize(found.size());
    double sum = 0.0;
    for (size_t i = 0; i < found.size(); ++i) {
        w[i] = std::exp((double) found[i] - lmax);
        sum += w[i];
    }
    const double rest  = (double) n_more * std::exp((double) l_next - lmax);
    const size_t least = top_p_head(w, sum, p.top_p);
    const size_t most  = top_p_head(w, sum + rest, p.top_p);
    return (most <= found.size() && least == most) || (least == found.size() && min_p_cuts);
}

// the deepest nesting of groups in a GBNF text (its parentheses outside literals, character
// classes, tokens and comments). llama.cpp's parser descends once per group, on the thread's stack:
// 30,000 nested groups run a thread of 8 MiB out of stack
int32_t group_depth(const std::string & gbnf) {
    int32_t depth = 0, most = 0;
    for (size_t i = 0; i < gbnf.size(); ++i) {
        const char c = gbnf[i];
        if (c == '"' || c == '[') {  // (a literal or a class, up to its unescaped end)
            const char end = c == '"' ? '"' : ']';
            for (++i; i < gbnf.size() && gbnf[i] != end; ++i) {
                i += gbnf[i] == '\\' ? 1 : 0;
            }
        } else if (c == '<' || c == '#') {  // (a token, up to its '>'; a comment, up to its line's end)
            const char * end = c == '<' ? ">" : "\r\n";
            i = std::min(gbnf.size(), gbnf.find_first_of(end, i + 1));
        } else if (c == '(' || c == ')') {
            depth += c == '(' ? 1 : -1;
            most = std::max(most, depth);
        }
    }
    return most;
}

}  // namespace

grammar_state::grammar_state(const llama_vocab * vocab, const std::string & gbnf, const std::string & root,
                             const std::vector<std::string> & trigger_patterns,
                             const std::vector<llama_token> & trigger_tokens, const thinking_markup & thinking)
    : vocab_(vocab),
      phase_(thinking.start == thinking_start::optional ? phase::undecided :
             thinking.start == thinking_start::open     ? phase::thinking :
                                                          phase::reading),
      open_tag_(thinking.open_tag),
      close_tag_(thinking.close_tag),
      call_tags_(thinking.call_tags) {
    if (thinking.start != thinking_start::none &&
        (open_tag_.empty() || close_tag_.empty() ||
         std::any_of(call_tags_.begin(), call_tags_.end(), [](const std::string & t) { return t.empty(); }))) {
        throw std::invalid_argument("a thinking block's tags must not be empty");
    }
    longest_tag_ = close_tag_.size();
    for (const std::string & tag : call_tags_) {
        longest_tag_ = std::max(longest_tag_, tag.size());
    }
    if (thinking.start != thinking_start::none && trigger_patterns.empty() && trigger_tokens.empty()) {
        throw std::invalid_argument("a grammar that reads a reply from after its thinking must be lazy (with "
                                    "trigger patterns or tokens)");
    }
    if (const int32_t depth = group_depth(gbnf); depth > k_max_group_depth) {
        throw std::invalid_argument("the grammar nests groups " + std::to_string(depth) + " deep; at most " +
                                    std::to_string(k_max_group_depth) + " are supported");
    }
    take_last_error();
    if (trigger_patterns.empty() && trigger_tokens.empty()) {
        smpl_ = llama_sampler_init_grammar(vocab, gbnf.c_str(), root.c_str());
    } else {
        const int32_t n_vocab = llama_vocab_n_tokens(vocab);
        for (const llama_token t : trigger_tokens) {
            if (t < 0 || t >= n_vocab) {
                throw std::invalid_argument("grammar trigger token " + std::to_string(t) + " is outside the vocabulary");
            }
        }
        std::vector<const char *> patterns;
        for (const std::string & p : trigger_patterns) {
            patterns.push_back(p.c_str());
        }
        try {
            smpl_ = llama_sampler_init_grammar_lazy_patterns(vocab, gbnf.c_str(), root.c_str(), patterns.data(),
                                                             patterns.size(), trigger_tokens.data(),
                                                             trigger_tokens.size());
        } catch (const std::regex_error & e) {
            throw std::invalid_argument(std::string("a grammar trigger pattern is not a regular expression: ") + e.what());
        }
    }
    if (smpl_ == nullptr) {
        const std::string why = take_last_error();
        throw std::invalid_argument("the grammar does not parse as llama.cpp's GBNF from rule '" + root + "'" +
                                    (why.empty() ? std::string() : ": " + why));
    }
    if (!(trigger_patterns.empty() && trigger_tokens.empty())) {  // (constraining() tells a lazy one's wait)
        llama_token   t[4];
        char          piece[8];
        const char    nul = '\0';
        const int32_t n   = llama_tokenize(vocab, &nul, 1, t, 4, false, false);  // (an SPM vocabulary puts a space first)
        for (int32_t i = 0; i < n; ++i) {
            if (llama_token_to_piece(vocab, t[i], piece, sizeof(piece), 0, true) == 1 && piece[0] == '\0') {
                nul_ = t[i];
            }
        }
    }
}

grammar_state::grammar_state(const grammar_state & other)
    : smpl_(llama_sampler_clone(other.smpl_)),
      vocab_(other.vocab_),
      phase_(other.phase_),
      open_tag_(other.open_tag_),
      close_tag_(other.close_tag_),
      call_tags_(other.call_tags_),
      longest_tag_(other.longest_tag_),
      text_(other.text_),
      recent_(other.recent_),
      held_(other.held_),
      nul_(other.nul_) {}

grammar_state & grammar_state::operator=(const grammar_state & other) {
    if (this != &other) {
        llama_sampler * copy = llama_sampler_clone(other.smpl_);
        llama_sampler_free(smpl_);
        smpl_  = copy;
        vocab_ = other.vocab_;
        phase_     = other.phase_;
        open_tag_  = other.open_tag_;
        close_tag_ = other.close_tag_;
        call_tags_ = other.call_tags_;
        longest_tag_ = other.longest_tag_;
        text_      = other.text_;
        recent_    = other.recent_;
        held_  = other.held_;
        nul_   = other.nul_;
    }
    return *this;
}

bool grammar_state::constraining() const {
    return phase_ == phase::reading && (nul_ < 0 || !allows(nul_));
}

std::pair<size_t, bool> grammar_state::thinking_end() const {
    std::pair<size_t, bool> first{text_.find(close_tag_), false};
    for (const std::string & tag : call_tags_) {
        const size_t at = text_.find(tag);
        if (at < first.first) {
            first = {at, true};
        }
    }
    return first;
}

bool grammar_state::read_by_grammar(llama_token token) {
    if (phase_ == phase::reading) {
        return true;
    }
    const size_t at = text_.size();  // (the piece goes straight to the end of text_)
    text_.resize(at + 64);
    int32_t n = llama_token_to_piece(vocab_, token, text_.data() + at, 64, 0, true);
    if (n < 0) {
        text_.resize(at - n);
        n = llama_token_to_piece(vocab_, token, text_.data() + at, -n, 0, true);
    }
    text_.resize(at + std::max<int32_t>(n, 0));
    if (phase_ == phase::undecided) {
        held_.push_back(token);
        const size_t      first = text_.find_first_not_of(" \t\n\r\v\f");
        const std::string head  = first == std::string::npos ? std::string() : text_.substr(first);
        if (head.compare(0, open_tag_.size(), open_tag_) == 0) {
            phase_ = phase::thinking;  // (the thinking block's tokens are not the grammar's to read)
            text_  = head.substr(open_tag_.size());
            recent_.assign(1, {token, text_.size()});  // (what follows the tag is the last token's)
            held_.clear();
        } else if (open_tag_.compare(0, head.size(), head) == 0) {
            return false;  // (it may still open one)
        } else {
            // no thinking block: the grammar reads the reply from its start (a lazy grammar waiting
            // for its trigger accepts whatever it is given)
            phase_ = phase::reading;
            text_.clear();
            for (size_t i = 0; i + 1 < held_.size(); ++i) {
                llama_sampler_accept(smpl_, held_[i]);
            }
            held_.clear();
            return true;
        }
    } else {
        recent_.emplace_back(token, text_.size() - at);
    }
    const auto [end, call] = thinking_end();
    if (end != std::string::npos) {
        phase_ = phase::reading;  // (from the next token on, or from the call tag's start)
        if (call) {  // the grammar reads the tokens from the one where the tag starts
            size_t from = text_.size(), i = recent_.size();
            while (i > 0 && from > end) {
                from -= recent_[--i].second;
            }
            for (; i < recent_.size(); ++i) {
                llama_sampler_accept(smpl_, recent_[i].first);
            }
        }
        text_.clear();
        recent_.clear();
        return false;
    }
    // keep the tokens that hold what may still begin a tag
    size_t drop = 0, n_drop = 0;
    while (n_drop < recent_.size() && text_.size() - drop - recent_[n_drop].second + 1 >= longest_tag_) {
        drop += recent_[n_drop++].second;
    }
    text_.erase(0, drop);
    recent_.erase(recent_.begin(), recent_.begin() + n_drop);
    return false;
}

grammar_state::~grammar_state() {
    llama_sampler_free(smpl_);
}

bool grammar_state::allows(llama_token token) const {
    if (phase_ != phase::reading) {
        return true;
    }
    llama_token_data       d{token, 0.0f, 0.0f};
    llama_token_data_array a{&d, 1, -1, false};
    llama_sampler_apply(smpl_, &a);
    return d.logit != -INFINITY;
}

void grammar_state::apply(std::vector<llama_token_data> & cand) const {
    if (phase_ != phase::reading) {
        return;
    }
    llama_token_data_array a{cand.data(), cand.size(), -1, false};
    llama_sampler_apply(smpl_, &a);
}

void grammar_state::accept(llama_token token) {
    if (read_by_grammar(token)) {
        llama_sampler_accept(smpl_, token);
    }
}

const float * grammar_state::mask(const float * logits, int32_t n_vocab, const sampling_params & p,
                                  std::vector<float> & out) {
    if (!constraining()) {
        return logits;  // (a lazy grammar before its trigger allows every token)
    }
    out.assign(n_vocab, -INFINITY);
    const int32_t want = p.greedy() ? 1 : p.top_k > 0 ? p.top_k : n_vocab;
    const auto    by_logit = [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    order_.resize(n_vocab);
    std::iota(order_.begin(), order_.end(), 0);
    int32_t found = 0;
    found_.clear();
    // the likeliest tokens in growing blocks, checked a block at a time, until enough are allowed or
    // the rest cannot change what the chain makes of those
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
                found_.push_back(logits[d.id]);
                ++found;
            }
        }
        // (after a partial sort the next token in order is the likeliest one not yet checked)
        if (want < n_vocab && end < n_vocab && found < want &&
            settled(found_, logits[order_[end]], want - found, p)) {
            break;
        }
    }
    if (found == 0) {
        throw std::invalid_argument("the grammar allows no token here");
    }
    return out.data();
}

grammar_forcing::grammar_forcing(const llama_vocab * vocab) : vocab_(vocab) {
    // a probe token for each one-character text the vocabulary has (of the characters a JSON
    // schema's or a GBNF literal's fixed text is made of), the end-of-generation tokens, and every
    // token's text for tokenizing forced text where llama.cpp's tokenizer does not spell it back
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<llama_token> by_char(128, -1);
    char                     buf[256];
    for (llama_token t = 0; t < n_vocab; ++t) {
        if (llama_vocab_is_eog(vocab, t)) {
            probe_.push_back({t, 0.0f, 0.0f});
            chars_.push_back('\0');
            continue;
        }
        if (llama_vocab_is_control(vocab, t)) {
            continue;
        }
        const int32_t n = llama_token_to_piece(vocab, t, buf, sizeof(buf), 0, false);
        if (n <= 0) {
            continue;
        }
        const std::string piece(buf, n);
        pieces_.emplace(piece, t);  // (the first token with this text)
        max_piece_ = std::max(max_piece_, n);
        const unsigned char c = (unsigned char) piece[0];
        if (n == 1 && c < 128 && (c >= ' ' || c == '\t' || c == '\n' || c == '\r') && by_char[c] < 0) {
            by_char[c] = t;
        }
    }
    for (int c = 0; c < 128; ++c) {
        if (by_char[c] >= 0) {
            probe_.push_back({by_char[c], 0.0f, 0.0f});
            chars_.push_back((char) c);
        }
    }
}

void grammar_forcing::tokenize(const std::string & text, std::vector<llama_token> & out) {
    // llama.cpp's tokenizer where its tokens spell the text back (a BPE vocabulary's); else (an SPM
    // vocabulary adds a space in front) the longest token that starts the rest, one after another
    out.resize(text.size() + 2);
    const int32_t n = llama_tokenize(vocab_, text.data(), (int32_t) text.size(), out.data(), (int32_t) out.size(),
                                     false, false);
    out.resize(std::max(0, n));
    std::string spelled;
    char        buf[256];
    for (const llama_token t : out) {
        const int32_t m = llama_token_to_piece(vocab_, t, buf, sizeof(buf), 0, false);
        spelled.append(buf, std::max(0, m));
    }
    if (n > 0 && spelled == text) {
        return;
    }
    out.clear();
    for (size_t at = 0; at < text.size();) {
        size_t len = std::min<size_t>(max_piece_, text.size() - at);
        for (; len > 0; --len) {
            const auto it = pieces_.find(text.substr(at, len));
            if (it != pieces_.end()) {
                out.push_back(it->second);
                break;
            }
        }
        if (len == 0) {
            return;  // (a character no token spells: the tokens up to it)
        }
        at += len;
    }
}

void grammar_forcing::tokens(const grammar_state & state, int32_t n_max, std::vector<llama_token> & out) {
    out.clear();
    if (n_max <= 0) {
        return;
    }
    text_.clear();
    std::optional<grammar_state> ahead;  // the state after the forced text so far (copied at its first character)
    bool                         ends = false;
    while ((int32_t) text_.size() < k_max_chars) {
        cand_ = probe_;
        (ahead ? *ahead : state).apply(cand_);
        int32_t n_chars = 0;
        int32_t which   = -1;
        bool    can_end = false;
        for (size_t j = 0; j < cand_.size(); ++j) {
            if (cand_[j].logit != -INFINITY) {
                can_end |= chars_[j] == '\0';
                n_chars += chars_[j] != '\0';
                which = chars_[j] != '\0' ? (int32_t) j : which;
            }
        }
        ends = can_end && n_chars == 0;
        if (n_chars != 1 || can_end) {
            break;
        }
        text_ += chars_[which];
        if (!ahead) {
            ahead.emplace(state);
        }
        ahead->accept(probe_[which].id);
    }
    if (text_.empty()) {
        return;
    }
    tokenize(text_, toks_);
    const int32_t n = (int32_t) toks_.size();
    if (n == 0) {
        return;
    }
    const int32_t n_out = std::min(n_max, ends ? n : n - 1);
    out.assign(toks_.begin(), toks_.begin() + std::max(0, n_out));
}

}  // namespace specllama
