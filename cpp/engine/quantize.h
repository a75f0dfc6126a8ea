// engine/quantize.h: a copy of a model file in another number format, through llama.cpp's quantizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specllama {

// the names accepted by model_quantize ("f32", "f16", "q8_0", "q4_0", ...)
std::vector<std::string> quantize_types();

// write `out` as a copy of `in` with its weights converted to `type` (llama_model_quantize;
// quantized inputs are allowed, so "f32" expands a quantized model); throws on failure
void model_quantize(const std::string & in, const std::string & out, const std::string & type, int32_t n_threads);

}  // namespace specllama
