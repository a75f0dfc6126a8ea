// sampling/softmax.cpp: compiled with -ffast-math (see CMakeLists.txt); inputs are finite logits.
#include "sampling/softmax.h"

#include <cmath>

namespace specllama {

float sum_exp(const float * logits, int32_t n, float shift) {
    float z = 0.0f;
#pragma omp simd reduction(+ : z)
    for (int32_t i = 0; i < n; ++i) {
        z += std::exp(logits[i] - shift);
    }
    return z;
}

}  // namespace specllama
