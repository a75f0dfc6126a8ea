// speculative/lookup.cpp: n-gram matching against the context.
#include "speculative/lookup.h"

#include <algorithm>

namespace specllama {

int32_t lookup_draft(const std::vector<llama_token> & seq, int32_t n_max, const lookup_params & params,
                     std::vector<llama_token> & out) {
    const int32_t len = (int32_t) seq.size();
    if (n_max <= 0) {
        return 0;
    }
    for (int32_t ng = std::min(params.ngram_max, len - 1); ng >= std::max(params.ngram_min, 1); --ng) {
        const llama_token * pattern = seq.data() + len - ng;
        // latest occurrence first: recent text predicts best
        for (int32_t j = len - ng - 1; j >= 0; --j) {
            if (std::equal(pattern, pattern + ng, seq.data() + j)) {
                const int32_t from = j + ng;
                const int32_t n    = std::min(n_max, len - from);
                out.insert(out.end(), seq.begin() + from, seq.begin() + from + n);
                return n;
            }
        }
    }
    return 0;
}

}  // namespace specllama
