// model.cpp: GGUF loading, vocabulary checks, chat templates, tokenization and quantization.
#include "model.h"

#include "gguf.h"

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

// the integer value of key k (any integer type)
std::optional<int64_t> gguf_int_at(const gguf_context * ctx, int64_t k) {
    switch (gguf_get_kv_type(ctx, k)) {
        case GGUF_TYPE_UINT8: return gguf_get_val_u8(ctx, k);
        case GGUF_TYPE_INT8: return gguf_get_val_i8(ctx, k);
        case GGUF_TYPE_UINT16: return gguf_get_val_u16(ctx, k);
        case GGUF_TYPE_INT16: return gguf_get_val_i16(ctx, k);
        case GGUF_TYPE_UINT32: return gguf_get_val_u32(ctx, k);
        case GGUF_TYPE_INT32: return gguf_get_val_i32(ctx, k);
        case GGUF_TYPE_UINT64: return (int64_t) std::min<uint64_t>(gguf_get_val_u64(ctx, k), INT64_MAX);
        case GGUF_TYPE_INT64: return gguf_get_val_i64(ctx, k);
        default: return std::nullopt;  // another type: llama.cpp reports the mismatch itself
    }
}

// an integer key of any integer type, if present
std::optional<int64_t> gguf_int(const gguf_context * ctx, const std::string & name) {
    const int64_t k = gguf_find_key(ctx, name.c_str());
    return k < 0 ? std::nullopt : gguf_int_at(ctx, k);
}

// an integer key, or each element of an integer array key (llama.cpp allows per-layer values)
std::vector<int64_t> gguf_ints(const gguf_context * ctx, const std::string & name) {
    const int64_t k = gguf_find_key(ctx, name.c_str());
    if (k < 0) {
        return {};
    }
    if (gguf_get_kv_type(ctx, k) != GGUF_TYPE_ARRAY) {
        const auto v = gguf_int_at(ctx, k);
        return v ? std::vector<int64_t>{*v} : std::vector<int64_t>{};
    }
    std::vector<int64_t> out;
    const size_t         n    = gguf_get_arr_n(ctx, k);
    const auto           type = gguf_get_arr_type(ctx, k);
    if (type != GGUF_TYPE_INT32 && type != GGUF_TYPE_UINT32) {
        return out;  // llama.cpp reads only these for per-layer values and reports other types itself
    }
    const auto * data = static_cast<const uint8_t *>(gguf_get_arr_data(ctx, k));
    for (size_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, data + 4 * i, 4);
        out.push_back(type == GGUF_TYPE_INT32 ? (int64_t) v : (int64_t) (uint32_t) v);
    }
    return out;
}

// What llama.cpp asserts (aborting the process) instead of reporting, checked first with ggml's
// own GGUF parser, which fails cleanly. Found by scripts/fuzz_gguf.py; each check names the
// assertion it stands in for.
void check_gguf_metadata(const std::string & path) {
    gguf_init_params gp{};
    gp.no_alloc = true;
    gp.ctx      = nullptr;
    std::unique_ptr<gguf_context, decltype(&gguf_free)> ctx(gguf_init_from_file(path.c_str(), gp), gguf_free);
    if (!ctx) {
        return;  // llama.cpp's loader runs the same parser and reports the failure itself
    }
    auto bad = [&](const std::string & what) {
        throw std::invalid_argument("broken model metadata: " + what + ": " + path);
    };
    const int64_t arch_key = gguf_find_key(ctx.get(), "general.architecture");
    if (arch_key >= 0 && gguf_get_kv_type(ctx.get(), arch_key) == GGUF_TYPE_STRING) {
        const std::string arch = gguf_get_val_str(ctx.get(), arch_key);
        auto          get      = [&](const char * k) { return gguf_int(ctx.get(), arch + "." + k); };
        // llama-model.cpp load_hparams
        const auto n_layer = get("block_count");
        if (n_layer && (*n_layer <= 0 || *n_layer > 512)) {
            bad(arch + ".block_count " + std::to_string(*n_layer) + " outside [1, 512]");
        }
        const auto n_nextn = get("nextn_predict_layers");
        if (n_nextn && n_layer && (*n_nextn < 0 || *n_nextn > *n_layer)) {
            bad(arch + ".nextn_predict_layers " + std::to_string(*n_nextn) + " exceeds block_count");
        }
        const int64_t n_expert      = get("expert_count").value_or(0);
        const auto    n_expert_used = get("expert_used_count");
        if (n_expert < 0 || n_expert > 1024) {
            bad(arch + ".expert_count " + std::to_string(n_expert) + " outside [0, 1024]");
        }
        if (n_expert_used && (*n_expert_used < 0 || *n_expert_used > n_expert || (n_expert > 0 && *n_expert_used == 0))) {
            bad(arch + ".expert_used_count " + std::to_string(*n_expert_used) + " does not fit expert_count " +
                std::to_string(n_expert));
        }
        // llama-graph.cpp build_qkv: ggml_reshape_3d(Kcur, n_embd_head_k, n_head_kv, n_tokens) asserts
        // GGML_ASSERT(ggml_nelements(a) == ne0*ne1*ne2) when llama.cpp's 32-bit product of head size and
        // head count wrapped around (the K/V tensor shapes were checked against the wrapped value)
        const auto n_embd = get("embedding_length");
        const auto heads  = gguf_ints(ctx.get(), arch + ".attention.head_count");
        auto       all    = heads;
        for (int64_t h : gguf_ints(ctx.get(), arch + ".attention.head_count_kv")) {
            all.push_back(h);
        }
        for (int64_t h : all) {
            if (h < 0 || (n_embd && h > *n_embd)) {
                bad(arch + ".attention head count " + std::to_string(h) + " outside [0, embedding_length]");
            }
        }
        const int64_t head_default = n_embd && !heads.empty() && heads[0] > 0 ? *n_embd / heads[0] : 0;
        for (const char * k : {"attention.key_length", "attention.value_length"}) {
            const int64_t head = get(k).value_or(head_default);
            for (int64_t h : all) {
                if (head < 0 || (h > 0 && head > (int64_t) UINT32_MAX / h)) {
                    bad(arch + "." + k + " " + std::to_string(head) + " times head count " + std::to_string(h) +
                        " overflows 32 bits");
                }
            }
        }
        // ggml-cpu ops.cpp (norm, rms_norm): GGML_ASSERT(eps >= 0.0f)
        for (const char * k : {"attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon"}) {
            const int64_t id = gguf_find_key(ctx.get(), (arch + "." + k).c_str());
            if (id >= 0 && gguf_get_kv_type(ctx.get(), id) == GGUF_TYPE_FLOAT32) {
                const float eps = gguf_get_val_f32(ctx.get(), id);
                if (!(eps >= 0.0f) || !std::isfinite(eps)) {
                    bad(arch + "." + k + " " + std::to_string(eps) + " is not a finite number >= 0");
                }
            }
        }
        const int64_t rs = gguf_find_key(ctx.get(), (arch + ".rope.scaling.type").c_str());
        if (rs >= 0 && gguf_get_kv_type(ctx.get(), rs) == GGUF_TYPE_STRING) {
            const std::string t = gguf_get_val_str(ctx.get(), rs);
            if (t != "none" && t != "linear" && t != "yarn" && t != "longrope") {
                bad(arch + ".rope.scaling.type '" + t + "' is not none, linear, yarn or longrope");
            }
        }
    }
    const int64_t key = gguf_find_key(ctx.get(), "tokenizer.ggml.tokens");
    if (key >= 0 && gguf_get_kv_type(ctx.get(), key) == GGUF_TYPE_ARRAY &&
        gguf_get_arr_type(ctx.get(), key) == GGUF_TYPE_STRING) {
        // llama-vocab.cpp: GGML_ASSERT(id_to_token.size() == token_to_id.size())
        const size_t                                 n = gguf_get_arr_n(ctx.get(), key);
        std::unordered_map<std::string_view, size_t> seen;
        seen.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            const char * text = gguf_get_arr_str(ctx.get(), key, i);
            auto [it, fresh]  = seen.emplace(std::string_view(text ? text : ""), i);
            if (!fresh) {
                throw std::invalid_argument("broken vocabulary: tokens " + std::to_string(it->second) + " and " +
                                            std::to_string(i) + " have the same text: " + path);
            }
        }
    }
}

// check the path before llama.cpp sees it, so a wrong path or a non-GGUF file gets a clear message
void check_gguf_file(const std::string & path) {
    struct stat st{};
    if (stat(path.c_str(), &st) != 0) {
        throw file_not_found("model file not found: " + path);
    }
    if (!S_ISREG(st.st_mode)) {
        throw std::invalid_argument("not a regular file: " + path);
    }
    std::ifstream f(path, std::ios::binary);
    char magic[4] = {0, 0, 0, 0};
    if (!f || !f.read(magic, 4)) {
        throw std::invalid_argument("not a GGUF file (shorter than its 4-byte magic): " + path);
    }
    if (std::memcmp(magic, "GGUF", 4) != 0) {
        throw std::invalid_argument("not a GGUF file (no GGUF magic at its start): " + path);
    }
    check_gguf_metadata(path);
}

}  // namespace

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
    return mdl;
}

void vocab_check_compatible(const model & target, const model & draft) {
    const llama_vocab * vt = target.vocab;
    const llama_vocab * vd = draft.vocab;
    const std::string   suffix = " (draft " + draft.path + ", target " + target.path +
                               "); the draft must share the target's tokenizer";
    if (llama_vocab_type(vt) != llama_vocab_type(vd)) {
        throw std::invalid_argument("draft vocab type " + std::to_string(llama_vocab_type(vd)) +
                                    " differs from target vocab type " +
                                    std::to_string(llama_vocab_type(vt)) + suffix);
    }
    if (target.n_vocab != draft.n_vocab) {
        throw std::invalid_argument("draft vocab has " + std::to_string(draft.n_vocab) + " tokens, target " +
                                    std::to_string(target.n_vocab) + suffix);
    }
    const std::pair<const char *, std::pair<llama_token, llama_token>> specials[] = {
        {"BOS", {llama_vocab_bos(vt), llama_vocab_bos(vd)}},
        {"EOS", {llama_vocab_eos(vt), llama_vocab_eos(vd)}},
        {"EOT", {llama_vocab_eot(vt), llama_vocab_eot(vd)}},
    };
    for (const auto & s : specials) {
        if (s.second.first != s.second.second) {
            throw std::invalid_argument(std::string("draft ") + s.first + " token is " +
                                        std::to_string(s.second.second) + ", target's is " +
                                        std::to_string(s.second.first) + suffix);
        }
    }
    if (llama_vocab_get_add_bos(vt) != llama_vocab_get_add_bos(vd)) {
        throw std::invalid_argument(std::string("draft ") + (llama_vocab_get_add_bos(vd) ? "adds" : "does not add") +
                                    " a BOS token and the target " +
                                    (llama_vocab_get_add_bos(vt) ? "does" : "does not") + suffix);
    }
    for (llama_token id = 0; id < target.n_vocab; ++id) {
        const char * a = llama_vocab_get_text(vt, id);
        const char * b = llama_vocab_get_text(vd, id);
        if (std::strcmp(a ? a : "", b ? b : "") != 0) {
            throw std::invalid_argument("draft token " + std::to_string(id) + " is '" + (b ? b : "") +
                                        "', target's is '" + (a ? a : "") + "'" + suffix);
        }
    }
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

std::string chat_apply_template(const std::string & tmpl,
                                const std::vector<std::pair<std::string, std::string>> & messages,
                                bool add_assistant) {
    std::vector<llama_chat_message> chat;
    chat.reserve(messages.size());
    size_t n_chars = 0;
    for (const auto & m : messages) {
        chat.push_back({m.first.c_str(), m.second.c_str()});
        n_chars += m.first.size() + m.second.size();
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
    return std::string(buf.data(), n);
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

namespace {
const std::pair<const char *, llama_ftype> k_ftypes[] = {
    {"f32", LLAMA_FTYPE_ALL_F32},         {"f16", LLAMA_FTYPE_MOSTLY_F16},
    {"bf16", LLAMA_FTYPE_MOSTLY_BF16},    {"q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
    {"q6_k", LLAMA_FTYPE_MOSTLY_Q6_K},    {"q5_k_m", LLAMA_FTYPE_MOSTLY_Q5_K_M},
    {"q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},    {"q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},
    {"q4_k_m", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
    {"q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},    {"iq4_nl", LLAMA_FTYPE_MOSTLY_IQ4_NL},
    {"q3_k_m", LLAMA_FTYPE_MOSTLY_Q3_K_M}, {"q2_k", LLAMA_FTYPE_MOSTLY_Q2_K},
};
}  // namespace

std::vector<std::string> quantize_types() {
    std::vector<std::string> names;
    for (const auto & t : k_ftypes) {
        names.emplace_back(t.first);
    }
    return names;
}

void model_quantize(const std::string & in, const std::string & out, const std::string & type, int32_t n_threads) {
    backend_init();
    const llama_ftype * ftype = nullptr;
    for (const auto & t : k_ftypes) {
        if (type == t.first) {
            ftype = &t.second;
        }
    }
    if (ftype == nullptr) {
        std::string all;
        for (const auto & t : k_ftypes) {
            all += (all.empty() ? "" : ", ") + std::string(t.first);
        }
        throw std::invalid_argument("unknown quantization type '" + type + "'; choose one of: " + all);
    }
    check_gguf_file(in);
    llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.nthread          = n_threads;
    qp.ftype            = *ftype;
    qp.allow_requantize = true;
    take_last_error();
    if (llama_model_quantize(in.c_str(), out.c_str(), &qp) != 0) {
        std::string why = take_last_error();
        std::remove(out.c_str());
        throw std::runtime_error("quantizing " + in + " to " + type + " failed" + (why.empty() ? "" : ": " + why));
    }
}

}  // namespace specllama
