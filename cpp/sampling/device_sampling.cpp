// sampling/device_sampling.cpp: the chains llama.cpp runs in the decode graph, and the host's reading
// of the rows they return.
#include "sampling/device_sampling.h"

#include <algorithm>

namespace specllama {

device_chain device_chain_for(const sampling_params & params, bool draft) {
    device_chain c;
    if (params.greedy()) {
        c.what  = draft ? device_chain::kind::top_k : device_chain::kind::argmax;
        c.top_k = draft ? 2 : 1;
        return c;
    }
    c.what  = device_chain::kind::top_k;
    c.top_k = params.top_k;
    return c;
}

std::string device_chain_blocker(const sampling_params & params, int32_t n_vocab, bool want_logprobs,
                                 bool cross_vocab) {
    if (params.grammar != nullptr) {
        return "grammar";
    }
    if (params.controls != nullptr) {
        return "logit bias or penalties";
    }
    if (cross_vocab) {
        return "draft of another vocabulary";
    }
    if (params.greedy()) {
        return want_logprobs ? "log-probabilities of greedy decoding" : "";
    }
    const int32_t k_max = std::min(k_max_device_top_k, n_vocab - 1);  // (top_k >= n_vocab: every token)
    if (params.top_k < 1 || params.top_k > k_max) {
        return "top_k " + std::to_string(params.top_k) + " (the device runs 1.." + std::to_string(k_max) + ")";
    }
    return "";
}

llama_sampler * make_device_chain(const device_chain & c) {
    if (c.what == device_chain::kind::none) {
        return nullptr;
    }
    llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    // temperature 0 on the backend: the argmax's id and logit only
    llama_sampler_chain_add(chain, c.what == device_chain::kind::argmax ? llama_sampler_init_temp(0.0f)
                                                                        : llama_sampler_init_top_k(c.top_k));
    return chain;
}

sampled_row read_sampled_row(llama_context * ctx, int32_t j, int64_t & bytes) {
    const uint32_t n       = llama_get_sampled_logits_count_ith(ctx, j);
    const uint32_t n_ids   = llama_get_sampled_candidates_count_ith(ctx, j);
    const uint32_t n_probs = llama_get_sampled_probs_count_ith(ctx, j);
    sampled_row    r;
    r.logits = llama_get_sampled_logits_ith(ctx, j);
    r.ids    = llama_get_sampled_candidates_ith(ctx, j);
    r.n      = r.logits != nullptr && r.ids != nullptr && n == n_ids ? (int32_t) n : 0;
    bytes    = (int64_t) sizeof(float) * (int64_t) (n + n_ids + n_probs);
    return r;
}

void row_distribution(const sampled_row & row, const sampling_params & params, token_dist & out) {
    sparse_distribution(row.logits, row.ids, row.n, params, out);
}

llama_token row_top_with_margin(const sampled_row & row, float & conf) {
    if (row.n < 2) {
        conf = 1.0f;
        return row.ids[0];
    }
    const bool first = row.logits[0] > row.logits[1] || (row.logits[0] == row.logits[1] && row.ids[0] < row.ids[1]);
    conf = first ? top_two_margin(row.logits[0], row.logits[1]) : top_two_margin(row.logits[1], row.logits[0]);
    return first ? row.ids[0] : row.ids[1];
}

llama_token row_argmax(const sampled_row & row) {
    return row.ids[0];
}

}  // namespace specllama
