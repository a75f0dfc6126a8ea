// speculative/vocab_map.cpp: pairing two vocabularies by their tokens' bytes, and the draft's view of the
// target's tokens.
#include "speculative/vocab_map.h"

#include "engine/vocab.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace specllama {

namespace {

// a token's key: its bytes, with control tokens apart from text (a literal "<|im_end|>" in text is
// not the end-of-turn token); empty for tokens that never stand for text (unknown, unused, empty)
std::string token_key(const model & mdl, llama_token id, bool & control, bool & byte) {
    const auto attr = llama_vocab_get_attr(mdl.vocab, id);
    control         = (attr & LLAMA_TOKEN_ATTR_CONTROL) != 0;
    byte            = (attr & LLAMA_TOKEN_ATTR_BYTE) != 0;
    if (attr & (LLAMA_TOKEN_ATTR_UNKNOWN | LLAMA_TOKEN_ATTR_UNUSED)) {
        return std::string();
    }
    const std::string piece = token_to_piece(mdl, id, true);
    if (piece.empty()) {
        return piece;
    }
    return (control ? 'C' : 'T') + piece;
}

// key -> token, one token per key: the first that is not a byte token (an SPM vocabulary has both
// "A" and <0x41>), else the first
std::unordered_map<std::string, llama_token> keyed(const model & mdl, int32_t & n_keyed) {
    std::unordered_map<std::string, llama_token> out;
    std::vector<bool>                            is_byte(mdl.n_vocab, false);
    n_keyed = 0;
    for (llama_token id = 0; id < mdl.n_vocab; ++id) {
        bool              control, byte;
        const std::string key = token_key(mdl, id, control, byte);
        if (key.empty()) {
            continue;
        }
        is_byte[id] = byte;
        auto it     = out.find(key);
        if (it == out.end()) {
            out.emplace(key, id);
            n_keyed += 1;
        } else if (is_byte[it->second] && !byte) {
            it->second = id;
        }
    }
    return out;
}

std::string percent(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * x);
    return buf;
}

}  // namespace

vocab_map::vocab_map(const model & target, const model & draft, double min_share) {
    int32_t n_target = 0, n_draft = 0;
    const auto tk = keyed(target, n_target);
    const auto dk = keyed(draft, n_draft);
    d2t_.assign(draft.n_vocab, -1);
    t2d_.assign(target.n_vocab, -1);
    for (const auto & [key, d] : dk) {
        auto it = tk.find(key);
        if (it != tk.end()) {
            d2t_[d]          = it->second;
            t2d_[it->second] = d;
            n_shared_ += 1;
        }
        if (key[0] == 'T') {
            draft_pieces_.emplace(key.substr(1), d);
            max_piece_ = std::max(max_piece_, key.size() - 1);
        }
    }
    draft_share_  = n_draft > 0 ? (double) n_shared_ / n_draft : 0.0;
    target_share_ = n_target > 0 ? (double) n_shared_ / n_target : 0.0;
    if (draft_share_ < min_share) {
        throw std::invalid_argument(
            "the draft " + draft.path + " shares " + std::to_string(n_shared_) + " tokens (" + percent(draft_share_) +
            " of its " + std::to_string(n_draft) + ") with the target " + target.path + "; at least " +
            percent(min_share) + " are needed for its drafts to be of use: pick a draft with a closer tokenizer");
    }
    for (llama_token d = 0; d < draft.n_vocab; ++d) {
        if (d2t_[d] < 0) {
            continue;
        }
        id_run * last = runs_.empty() ? nullptr : &runs_.back();
        if (last != nullptr && last->draft + last->n == d && last->target + last->n == d2t_[d]) {
            last->n += 1;
        } else {
            runs_.push_back({d, d2t_[d], 1});
        }
    }
    target_text_.resize(target.n_vocab);
    for (llama_token t = 0; t < target.n_vocab; ++t) {
        bool control, byte;
        if (t2d_[t] < 0 && !token_key(target, t, control, byte).empty() && !control) {
            target_text_[t] = token_to_piece(target, t, true);  // spelled with draft pieces
        }
    }
    draft_bos_  = llama_vocab_get_add_bos(draft.vocab) ? llama_vocab_bos(draft.vocab) : -1;
    target_bos_ = llama_vocab_get_add_bos(target.vocab) ? llama_vocab_bos(target.vocab) : -1;
    target_vocab_ = target.vocab;
}

void vocab_map::append_draft_tokens(llama_token t, std::vector<llama_token> & out) const {
    if (t2d_[t] >= 0) {
        out.push_back(t2d_[t]);
        return;
    }
    const std::string & text = target_text_[t];  // empty for controls without a partner
    for (size_t i = 0; i < text.size();) {
        size_t len = std::min(max_piece_, text.size() - i);
        for (; len > 0; --len) {
            auto it = draft_pieces_.find(text.substr(i, len));
            if (it != draft_pieces_.end()) {
                out.push_back(it->second);
                break;
            }
        }
        i += len > 0 ? len : 1;  // a byte no piece holds is left out
    }
}

const std::vector<llama_token> & draft_view::update(const std::vector<llama_token> & target_seq) {
    if (tgt_.empty() && dft_.empty() && map_.draft_bos() >= 0) {
        dft_.push_back(map_.draft_bos());
        n_head_ = 1;
    }
    size_t common = 0;
    while (common < tgt_.size() && common < target_seq.size() && tgt_[common] == target_seq[common]) {
        ++common;
    }
    tgt_.resize(common);
    ends_.resize(common);
    dft_.resize(common > 0 ? ends_[common - 1] : n_head_);
    for (size_t i = common; i < target_seq.size(); ++i) {
        const llama_token t = target_seq[i];
        if (!(i == 0 && t == map_.target_bos())) {  // the draft's own BOS stands for the target's
            map_.append_draft_tokens(t, dft_);
        }
        tgt_.push_back(t);
        ends_.push_back((int32_t) dft_.size());
    }
    return dft_;
}

}  // namespace specllama
