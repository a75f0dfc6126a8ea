// sampling/vocab_scan.cpp: block scans. Compiled with -fopenmp-simd (see CMakeLists.txt) so that a
// block's maximum is a vectorized reduction, and cloned for AVX2 and AVX-512 where the compiler can
// (the build targets baseline x86-64; the loader picks the widest the CPU has). -inf logits (masked
// tokens) are fine: nothing here assumes finite values.
#include "sampling/vocab_scan.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define SPECLLAMA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SPECLLAMA_CLONES
#endif

namespace specllama {

namespace {

constexpr int32_t k_block = 64;

// the largest of x[0..n)
SPECLLAMA_CLONES float block_max(const float * x, int32_t n) {
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int32_t i = 0; i < n; ++i) {
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

// calls look(i) for every i of a block whose largest logit is above bar() (bar is read again
// before each block: look may raise it)
template <typename Bar, typename Look>
void scan_above(const float * logits, int32_t n_vocab, Bar bar, Look look) {
    for (int32_t b = 0; b < n_vocab; b += k_block) {
        const int32_t n = std::min(k_block, n_vocab - b);
        if (block_max(logits + b, n) > bar()) {
            for (int32_t i = b; i < b + n; ++i) {
                look(i);
            }
        }
    }
}

}  // namespace

llama_token argmax(const float * logits, int32_t n_vocab) {
    int32_t best = 0;
    float   l1   = logits[0];
    scan_above(logits, n_vocab, [&] { return l1; }, [&](int32_t i) {
        if (logits[i] > l1) {  // strictly: an equal logit later in the row has a higher id
            l1   = logits[i];
            best = i;
        }
    });
    return (llama_token) best;
}

llama_token top_two(const float * logits, int32_t n_vocab, float & l1, float & l2) {
    int32_t best = 0;
    l1           = logits[0];
    l2           = -std::numeric_limits<float>::infinity();
    scan_above(logits + 1, n_vocab - 1, [&] { return l2; }, [&](int32_t j) {
        const int32_t i = j + 1;
        const float   l = logits[i];
        if (l > l1) {
            l2   = l1;
            l1   = l;
            best = i;
        } else if (l > l2) {
            l2 = l;
        }
    });
    return (llama_token) best;
}

void top_k(const float * logits, int32_t n_vocab, int32_t k, std::vector<llama_token> & ids) {
    // a heap of the k best so far whose top is the worst of them: the one a better token replaces
    const auto better = [logits](llama_token a, llama_token b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    ids.clear();
    ids.reserve(k);
    for (int32_t i = 0; i < k; ++i) {
        ids.push_back(i);
    }
    std::make_heap(ids.begin(), ids.end(), better);
    scan_above(logits + k, n_vocab - k, [&] { return logits[ids.front()]; }, [&](int32_t j) {
        const int32_t i = j + k;
        if (logits[i] > logits[ids.front()]) {  // strictly: the held token has the lower id
            std::pop_heap(ids.begin(), ids.end(), better);
            ids.back() = i;
            std::push_heap(ids.begin(), ids.end(), better);
        }
    });
    std::sort(ids.begin(), ids.end(), better);
}

}  // namespace specllama
