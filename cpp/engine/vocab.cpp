// engine/vocab.cpp: tokenizing, token pieces, chat templates through llama.cpp's C API, and the
// comparison of two vocabularies.
#include "engine/vocab.h"

#include <cstring>
#include <utility>

namespace specllama {

std::string vocab_difference(const model & target, const model & draft) {
    const llama_vocab * vt = target.vocab;
    const llama_vocab * vd = draft.vocab;
    if (llama_vocab_type(vt) != llama_vocab_type(vd)) {
        return "draft vocab type " + std::to_string(llama_vocab_type(vd)) + " differs from target vocab type " +
               std::to_string(llama_vocab_type(vt));
    }
    if (target.n_vocab != draft.n_vocab) {
        return "draft vocab has " + std::to_string(draft.n_vocab) + " tokens, target " + std::to_string(target.n_vocab);
    }
    const std::pair<const char *, std::pair<llama_token, llama_token>> specials[] = {
        {"BOS", {llama_vocab_bos(vt), llama_vocab_bos(vd)}},
        {"EOS", {llama_vocab_eos(vt), llama_vocab_eos(vd)}},
        {"EOT", {llama_vocab_eot(vt), llama_vocab_eot(vd)}},
    };
    for (const auto & s : specials) {
        if (s.second.first != s.second.second) {
            return std::string("draft ") + s.first + " token is " + std::to_string(s.second.second) + ", target's is " +
                   std::to_string(s.second.first);
        }
    }
    if (llama_vocab_get_add_bos(vt) != llama_vocab_get_add_bos(vd)) {
        return std::string("draft ") + (llama_vocab_get_add_bos(vd) ? "adds" : "does not add") +
               " a BOS token and the target " + (llama_vocab_get_add_bos(vt) ? "does" : "does not");
    }
    for (llama_token id = 0; id < target.n_vocab; ++id) {
        const char * a = llama_vocab_get_text(vt, id);
        const char * b = llama_vocab_get_text(vd, id);
        if (std::strcmp(a ? a : "", b ? b : "") != 0) {
            return "draft token " + std::to_string(id) + " is '" + (b ? b : "") + "', target's is '" + (a ? a : "") + "'";
        }
    }
    return std::string();
}

namespace {

// every occurrence of from in s replaced by to
std::string replace_all(std::string s, const std::string & from, const std::string & to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
        s.replace(at, from.size(), to);
    }
    return s;
}

}  // namespace

std::string chat_apply_template(const std::string & tmpl,
                                const std::vector<std::pair<std::string, std::string>> & messages,
                                bool add_assistant) {
    // llama_chat_apply_template reads C strings: a NUL byte in a message travels as a marker that
    // occurs in no message (U+F8FF repeated) and is put back in the result
    std::string marker = "\xEF\xA3\xBF";
    bool        has_nul = false;
    for (bool clash = true; clash;) {
        clash = false;
        for (const auto & m : messages) {
            has_nul = has_nul || m.first.find('\0') != std::string::npos || m.second.find('\0') != std::string::npos;
            clash   = clash || m.first.find(marker) != std::string::npos || m.second.find(marker) != std::string::npos;
        }
        if (clash) {
            marker += "\xEF\xA3\xBF";
        }
    }
    const std::string nul(1, '\0');
    std::vector<std::pair<std::string, std::string>> texts;
    texts.reserve(messages.size());
    std::vector<llama_chat_message> chat;
    chat.reserve(messages.size());
    size_t n_chars = 0;
    for (const auto & m : messages) {
        texts.emplace_back(has_nul ? replace_all(m.first, nul, marker) : m.first,
                           has_nul ? replace_all(m.second, nul, marker) : m.second);
        chat.push_back({texts.back().first.c_str(), texts.back().second.c_str()});
        n_chars += texts.back().first.size() + texts.back().second.size();
    }
    if (tmpl.find('\0') != std::string::npos) {
        throw std::invalid_argument("a chat template name holds a NUL byte");
    }
    std::vector<char> buf(2 * n_chars + 256);
    int32_t n = llama_chat_apply_template(tmpl.c_str(), chat.data(), chat.size(), add_assistant, buf.data(),
                                          (int32_t) buf.size());
    if (n < 0) {
        throw std::invalid_argument("chat template not supported by llama.cpp's built-in templates");
    }
    if ((size_t) n > buf.size()) {
        buf.resize(n);
        n = llama_chat_apply_template(tmpl.c_str(), chat.data(), chat.size(), add_assistant, buf.data(),
                                      (int32_t) buf.size());
    }
    std::string out(buf.data(), n);
    return has_nul ? replace_all(out, marker, nul) : out;
}

std::vector<llama_token> tokenize(const model & mdl, const std::string & text, bool add_special, bool parse_special) {
    if (text.size() > (size_t) INT32_MAX / 2) {
        throw std::invalid_argument("text too long to tokenize");
    }
    std::vector<llama_token> out(text.size() + 8);
    int32_t n = llama_tokenize(mdl.vocab, text.data(), (int32_t) text.size(), out.data(), (int32_t) out.size(),
                               add_special, parse_special);
    if (n < 0) {
        if (n == INT32_MIN) {
            throw std::invalid_argument("text too long to tokenize");
        }
        out.resize(-n);
        n = llama_tokenize(mdl.vocab, text.data(), (int32_t) text.size(), out.data(), (int32_t) out.size(),
                           add_special, parse_special);
    }
    out.resize(n);
    return out;
}

std::vector<llama_token> tokenize_bounded(const model & mdl, const std::string & text, bool add_special,
                                          bool parse_special, int64_t max_tokens) {
    const size_t budget = (size_t) (max_tokens + 64) * (size_t) mdl.max_piece_bytes;
    if (max_tokens >= 0 && text.size() > budget) {
        size_t cut = budget;
        while (cut > 0 && ((unsigned char) text[cut] & 0xC0) == 0x80) {  // not inside a UTF-8 character
            --cut;
        }
        const auto head = tokenize(mdl, text.substr(0, cut), add_special, parse_special);
        if ((int64_t) head.size() > max_tokens + 32) {  // the cut changes at most the last word's tokens
            throw text_too_long((int64_t) head.size() - 32, max_tokens, false);
        }
    }
    auto out = tokenize(mdl, text, add_special, parse_special);
    if (max_tokens >= 0 && (int64_t) out.size() > max_tokens) {
        throw text_too_long((int64_t) out.size(), max_tokens, true);
    }
    return out;
}

std::string token_to_piece(const model & mdl, llama_token token, bool special) {
    if (token < 0 || token >= mdl.n_vocab) {
        throw std::invalid_argument("token id " + std::to_string(token) + " outside the vocabulary of " +
                                    std::to_string(mdl.n_vocab));
    }
    char    buf[128];
    int32_t n = llama_token_to_piece(mdl.vocab, token, buf, sizeof(buf), 0, special);
    if (n >= 0) {
        return std::string(buf, n);
    }
    std::string big(-n, '\0');
    n = llama_token_to_piece(mdl.vocab, token, big.data(), (int32_t) big.size(), 0, special);
    big.resize(n < 0 ? 0 : n);
    return big;
}

}  // namespace specllama
