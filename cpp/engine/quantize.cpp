// engine/quantize.cpp: writing a copy of a model in another number format through llama.cpp's quantizer.
#include "engine/quantize.h"

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf_checks.h"
#include "engine/llama_log.h"
#include "engine/model.h"

namespace specllama {

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
