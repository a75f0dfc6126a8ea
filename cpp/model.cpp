// model.cpp: loading GGUF models, the vocabulary (checks, tokenization, chat templates), and
// routing llama.cpp's log.
// Not here: checks of the file before loading (gguf_checks.cpp), quantization (quantize.cpp).
#include "model.h"

#include "gguf_checks.h"
#include "llama_log.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <sys/stat.h>
#include <utility>

namespace specllama {

namespace {

std::atomic<int> g_log_level{GGML_LOG_LEVEL_NONE};  // errors reach the user in exceptions
std::mutex       g_log_mutex;
std::string      g_last_error;  // error lines llama.cpp logged since the last take, to explain a failure
int              g_last_level = GGML_LOG_LEVEL_NONE;

void log_callback(ggml_log_level level, const char * text, void * /*user_data*/) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (level != GGML_LOG_LEVEL_CONT) {
        g_last_level = level;
    }
    if (g_last_level >= GGML_LOG_LEVEL_ERROR && g_last_error.size() < 4096) {
        g_last_error += text;
    }
    if (g_last_level >= g_log_level.load() && g_log_level.load() != GGML_LOG_LEVEL_NONE) {
        fputs(text, stderr);
    }
}

}  // namespace

// the error lines logged since the last call, joined with "; ", without llama.cpp's generic
// "failed to load model" lines when a more specific one is there
std::string take_last_error() {
    std::string all;
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        all.swap(g_last_error);
    }
    std::vector<std::string> lines, generic;
    size_t                   start = 0;
    while (start < all.size()) {
        size_t      end  = all.find('\n', start);
        std::string line = all.substr(start, end == std::string::npos ? std::string::npos : end - start);
        start            = end == std::string::npos ? all.size() : end + 1;
        while (!line.empty() && line.back() == ' ') {
            line.pop_back();
        }
        if (!line.empty()) {
            (line.find("failed to load model") != std::string::npos ? generic : lines).push_back(line);
        }
    }
    if (lines.empty()) {
        lines = generic;
    }
    std::string out;
    for (const auto & l : lines) {
        out += (out.empty() ? "" : "; ") + l;
    }
    return out;
}



void backend_init() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_set(log_callback, nullptr);
        llama_backend_init();
    });
}

void log_set_level(int level) { g_log_level.store(level); }

std::shared_ptr<model> model_load(const model_params & params) {
    backend_init();
    check_gguf_file(params.path);

    llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = params.n_gpu_layers;

    take_last_error();
    llama_model * raw = llama_model_load_from_file(params.path.c_str(), mparams);
    if (raw == nullptr) {
        std::string why = take_last_error();
        throw std::invalid_argument("failed to load model " + params.path +
                                    (why.empty() ? std::string() : ": " + why));
    }
    auto mdl     = std::make_shared<model>();
    mdl->ptr.reset(raw);
    mdl->path    = params.path;
    mdl->vocab   = llama_model_get_vocab(raw);
    mdl->n_vocab = mdl->vocab ? llama_vocab_n_tokens(mdl->vocab) : 0;
    if (mdl->vocab == nullptr || mdl->n_vocab <= 0) {
        throw std::invalid_argument("model has no vocabulary: " + params.path);
    }
    for (llama_token t = 0; t < mdl->n_vocab; ++t) {
        mdl->max_piece_bytes = std::max<int32_t>(mdl->max_piece_bytes, (int32_t) token_to_piece(*mdl, t, true).size());
    }
    return mdl;
}

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

std::string meta_string(const model & mdl, const char * key) {
    char buf[256];
    const int32_t n = llama_model_meta_val_str(mdl.get(), key, buf, sizeof buf);
    return n < 0 ? std::string() : std::string(buf);
}

}  // namespace

bool kv_interchangeable(const model & target, const model & draft) {
    const llama_model * t = target.get();
    const llama_model * d = draft.get();
    return meta_string(target, "general.architecture") == meta_string(draft, "general.architecture") &&
           llama_model_n_layer(t) == llama_model_n_layer(d) && llama_model_n_embd(t) == llama_model_n_embd(d) &&
           llama_model_n_head(t) == llama_model_n_head(d) && llama_model_n_head_kv(t) == llama_model_n_head_kv(d) &&
           llama_model_n_swa(t) == llama_model_n_swa(d) && llama_model_rope_type(t) == llama_model_rope_type(d) &&
           llama_model_rope_freq_scale_train(t) == llama_model_rope_freq_scale_train(d) &&
           llama_model_n_ctx_train(t) == llama_model_n_ctx_train(d) && target.n_vocab == draft.n_vocab &&
           llama_model_n_params(t) == llama_model_n_params(d);
}

std::string model_describe(const model & mdl) {
    char buf[256];
    llama_model_desc(mdl.get(), buf, sizeof(buf));
    return std::string(buf);
}

std::string model_chat_template(const model & mdl) {
    const char * tmpl = llama_model_chat_template(mdl.get(), nullptr);
    return tmpl ? std::string(tmpl) : std::string();
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
