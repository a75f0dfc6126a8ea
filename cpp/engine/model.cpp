// engine/model.cpp: loading a GGUF model and the facts of it the loop reads.
#include "engine/model.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "engine/cpu.h"
#include "engine/gguf_checks.h"
#include "engine/llama_log.h"
#include "engine/vocab.h"

namespace specllama {

bool offloads(const model_params & params) { return offloads(params.place, params.n_gpu_layers); }

namespace {

// the weights' buffers from llama.cpp's load log: "load_tensors:   CPU_REPACK model buffer size =  612.00 MiB"
// (read with sscanf, not std::regex, whose compiler has crashed in this process on a GPU machine)
std::vector<std::pair<std::string, double>> weight_buffers_logged(const std::string & log) {
    std::vector<std::pair<std::string, double>> out;
    for (const char * at = std::strstr(log.c_str(), "load_tensors:"); at != nullptr;
         at = std::strstr(at + 1, "load_tensors:")) {
        char   name[128];
        double mib = 0.0;
        int    end = -1;
        if (std::sscanf(at, "load_tensors: %127s model buffer size = %lf MiB%n", name, &mib, &end) == 2 && end > 0) {
            out.emplace_back(name, mib);
        }
    }
    return out;
}

}  // namespace

std::shared_ptr<model> model_load(const model_params & params) {
    backend_init();
    check_gguf_file(params.path);

    llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = params.n_gpu_layers;
    // llama.cpp's AMX kernels (an extra CPU buffer type that repacks quantized weights) crash this
    // llama.cpp in its matrix multiplication on CPUs that have AMX (ggml-org/llama.cpp#20824): load
    // without extra buffer types there
    mparams.use_extra_bufts = !cpu_backend_has("AMX_INT8");
    const resolved_placement where = placement_resolve(params.place);
    where.apply(mparams);

    take_last_error();
    llama_model * raw = nullptr;
    std::vector<std::pair<std::string, double>> buffers;
    {
        log_capture log;
        raw     = llama_model_load_from_file(params.path.c_str(), mparams);
        buffers = weight_buffers_logged(log.text());
    }
    if (raw == nullptr) {
        std::string why = take_last_error();
        const bool offload = where.n_devices() > 0 || (where.devices.empty() && params.n_gpu_layers != 0);
        throw std::invalid_argument("failed to load model " + params.path +
                                    (why.empty() ? std::string() : ": " + why) +
                                    (offload && why.find("alloc") != std::string::npos
                                         ? " (it does not fit on its devices: offload fewer layers, or name more "
                                           "devices)"
                                         : ""));
    }
    auto mdl     = std::make_shared<model>();
    mdl->ptr.reset(raw);
    mdl->path    = params.path;
    mdl->offloaded = offloads(params);
    mdl->local_gpu = where.local_gpu(params.n_gpu_layers);
    mdl->weight_buffers = std::move(buffers);
    mdl->vocab   = llama_model_get_vocab(raw);
    mdl->n_vocab = mdl->vocab ? llama_vocab_n_tokens(mdl->vocab) : 0;
    if (mdl->vocab == nullptr || mdl->n_vocab <= 0) {
        throw std::invalid_argument("model has no vocabulary: " + params.path);
    }
    for (llama_token t = 0; t < mdl->n_vocab; ++t) {
        mdl->max_piece_bytes = std::max<int32_t>(mdl->max_piece_bytes, (int32_t) token_to_piece(*mdl, t, true).size());
        if (llama_vocab_is_eog(mdl->vocab, t)) {
            mdl->eog_ids.push_back(t);
        }
    }
    return mdl;
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

std::string model_chat_template(const model & mdl, const std::string & name) {
    const char * tmpl = llama_model_chat_template(mdl.get(), name.empty() ? nullptr : name.c_str());
    return tmpl ? std::string(tmpl) : std::string();
}

}  // namespace specllama
