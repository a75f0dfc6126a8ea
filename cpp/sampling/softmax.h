// sampling/softmax.h: the one vocabulary-wide sum the per-token loop needs, sum_i exp(logits[i] - shift).
// It runs for every drafted token and every sampled distribution (49,152 terms for SmolLM2), so it
// is compiled apart with -ffast-math, which lets GCC call glibc's vector expf.
#pragma once

#include <cstdint>

namespace specllama {

float sum_exp(const float * logits, int32_t n, float shift);

}  // namespace specllama
