// speculative/drafting.cpp: autoregressive drafting with the draft model.
#include "speculative/drafting.h"

#include "sampling/device_sampling.h"
#include "sampling/grammar.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace specllama {

bool model_drafter::sync(const std::vector<llama_token> & seq, int32_t n_end,
                         const std::function<void()> & between_chunks, int32_t window, int32_t reuse,
                         int32_t by_token, int32_t * n_single) {
    // keep what the cache shares with seq (never its last token, whose logits are q_1), decode up to n_end
    const int32_t n_last   = (int32_t) seq.size() - 1;
    const bool    restart  = restart_at_window(seq, window);
    const int32_t n_common = reuse > 0 && !restart ? cache_.keep_reusable(seq, n_last, reuse, between_chunks).n_kept
                                                   : cache_.keep_common_prefix(seq, n_last);
    const int32_t n_new      = n_end - n_common;
    const bool    one_by_one = n_new > 1 && n_new <= by_token;
    if (n_single != nullptr) {
        *n_single = n_new == 1 || one_by_one ? n_new : 0;
    }
    if (one_by_one) {
        for (int32_t i = n_common; i < n_end; ++i) {  // (each with its output: the draft decodes' shape)
            cache_.decode(seq.data() + i, 1, false, nullptr, between_chunks);
        }
    } else {
        cache_.decode(seq.data() + n_common, n_new, false, nullptr, between_chunks);
    }
    return restart;
}

bool model_drafter::restart_at_window(const std::vector<llama_token> & seq, int32_t window) {
    const int32_t n_last = (int32_t) seq.size() - 1;
    const bool    behind = window > 0 && n_last - window > cache_.common_prefix(seq, n_last);
    if (behind) {
        cache_.restart_at(seq, n_last - window);
    }
    return behind;
}

int32_t model_drafter::copy_target(const std::vector<llama_token> & seq, const kv_cache * target) {
    const int32_t n_end = (int32_t) seq.size() - 1;
    if (target == nullptr || target->n_past() != n_end ||
        !std::equal(target->tokens().begin(), target->tokens().end(), seq.begin())) {
        return 0;
    }
    // a copy moves everything the target holds; decoding, only what this cache lacks
    const int32_t n_new = n_end - cache_.keep_common_prefix(seq, n_end);
    return copy_pays(n_new, n_end) && cache_.copy_from(*target) ? n_new : 0;
}

model_drafter::catch_up_result model_drafter::catch_up(const std::vector<llama_token> & seq,
                                                       const std::function<void()> & between_chunks,
                                                       const kv_cache * target, int32_t window) {
    catch_up_result r;
    r.n_copied = copy_target(seq, target);
    r.windowed = sync(seq, (int32_t) seq.size(), between_chunks, r.n_copied > 0 ? 0 : window, 0, by_token_, &r.n_single);
    return r;
}

int32_t model_drafter::prefill(const std::vector<llama_token> & seq, const std::function<void()> & between_chunks,
                               const kv_cache * target, int32_t reuse) {
    const int32_t n_shared = copy_target(seq, target) > 0 ? (int32_t) seq.size() - 1 : 0;
    if (n_shared == 0) {
        sync(seq, (int32_t) seq.size() - 1, between_chunks, 0, reuse);
    }
    cache_.keep_checkpoint();  // a state that cannot drop a tail comes back here for the next turn
    return n_shared;
}

namespace {

// the most likely token, and how sure (top_two_margin)
llama_token top_with_margin(const float * logits, int32_t n_vocab, float & conf) {
    float             l1   = 0.0f;
    float             l2   = 0.0f;
    const llama_token best = top_two(logits, n_vocab, l1, l2);
    conf                   = top_two_margin(l1, l2);
    return best;
}

}  // namespace

model_drafter::read_result model_drafter::read(const std::vector<llama_token> & seq, int32_t window,
                                               const sampling_params & params,
                                               const std::function<float(int32_t)> & p_of) {
    read_result r;
    if (map_ != nullptr || seq.empty()) {
        return r;
    }
    const int32_t n_last = (int32_t) seq.size() - 1;
    r.windowed             = restart_at_window(seq, window);
    const int32_t n_common = cache_.keep_common_prefix(seq, n_last);
    const int32_t n_new    = n_last - n_common;
    if (n_new <= 0) {
        return r;
    }
    const int32_t n_out = std::min({n_new, k_max_read, cache_.n_batch()});  // (the outputs fit one batch)
    cache_.decode_outputs(seq.data() + n_common, n_new, n_out);
    const bool device = cache_.chain().what != device_chain::kind::none;
    for (int32_t i = 0; i < n_out; ++i) {
        // (output i follows seq[n_last - n_out + i]: the token after it is known, up to seq's last)
        const int32_t     at   = n_last - n_out + i + 1;
        const llama_token next = seq[at];
        if (params.greedy()) {
            float             conf = 0.0f;
            const llama_token top  = device ? row_top_with_margin(cache_.sampled(i), conf)
                                            : top_with_margin(cache_.logits(i), cache_.n_vocab(), conf);
            r.foretold += top == next ? 1.0 : 0.0;
            r.n += 1;
            continue;
        }
        const float p = p_of(at);
        if (!(p > 0.0f)) {
            continue;
        }
        if (device) {
            row_distribution(cache_.sampled(i), params, read_q_);
        } else {
            sampling_distribution(cache_.logits(i), cache_.n_vocab(), params, read_q_);
        }
        r.foretold += std::min(1.0, (double) read_q_.prob_of(next) / p);
        r.n += 1;
    }
    return r;
}

int32_t add_forced_drafts(grammar_track & grammar, int32_t n_max, draft_result & out,
                          const std::function<bool(int32_t)> & keep, std::vector<llama_token> & scratch) {
    grammar.forced(n_max, scratch);
    int32_t k = 0;
    for (; k < (int32_t) scratch.size(); ++k) {
        const llama_token t = scratch[k];
        const size_t      i = out.tokens.size();
        if (!keep((int32_t) i) || !grammar.push(t)) {
            break;
        }
        if (out.dists.size() <= i) {
            out.dists.resize(i + 1);
        }
        out.dists[i].ids.assign(1, t);
        out.dists[i].probs.assign(1, 1.0f);
        out.tokens.push_back(t);
        out.conf.push_back(1.0f);
        out.forced.push_back(1);
    }
    return k;
}

namespace {

// a draft's draw for the token at index pos of the sequence: keyed where the chain is, so that it
// shares its randomness with the target's draw there
llama_token draw(const token_dist & dist, const sampling_params & params, rng_t & rng, int64_t pos) {
    return params.keyed ? sample_keyed(dist, *params.keyed, pos) : sample(dist, rng);
}

}  // namespace

llama_token model_drafter::choose(const std::vector<llama_token> & tseq, const sampling_params & params, rng_t & rng,
                                  draft_result & out, float & conf) {
    const int32_t i        = (int32_t) out.tokens.size();
    const int64_t pos      = (int64_t) tseq.size() + i;  // (the target's index of the token chosen)
    const auto    t_sample = std::chrono::steady_clock::now();
    llama_token   tok;
    if (cache_.chain().what != device_chain::kind::none) {  // the device sampled: a few candidates came back
        const sampled_row row = cache_.sampled(0);
        if (params.greedy()) {
            tok = row_top_with_margin(row, conf);
        } else {
            row_distribution(row, params, out.dists[i]);
            tok  = draw(out.dists[i], params, rng, pos);
            conf = out.dists[i].prob_of(tok);
        }
        out.sample_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_sample).count();
        return tok;
    }
    int32_t       n_vocab = cache_.n_vocab();
    const float * logits  = cache_.logits(0);
    if (map_ != nullptr) {  // q' of token-level intersection: the shared tokens' logits at the target's ids
        const auto t_move = std::chrono::steady_clock::now();
        if ((int32_t) in_target_.size() != map_->n_target_vocab()) {  // (the tokens outside it stay at -inf)
            in_target_.assign(map_->n_target_vocab(), -INFINITY);
        }
        for (const vocab_map::id_run & run : map_->shared_runs()) {
            std::copy(logits + run.draft, logits + run.draft + run.n, in_target_.begin() + run.target);
        }
        logits  = in_target_.data();
        n_vocab = map_->n_target_vocab();
        out.vocab_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_move).count();
    }
    if (params.controls != nullptr) {  // with this position's history: the target's tokens, then the drafts before it
        logits = editor_.apply(*params.controls, logits, n_vocab, tseq.data(), (int32_t) tseq.size(),
                               out.tokens.data(), (int32_t) out.tokens.size());
    }
    if (params.grammar != nullptr) {  // in the grammar's state after the drafts before it
        logits = params.grammar->at(i).mask(logits, n_vocab, params, grammar_row_);
    }
    const auto t_choose = std::chrono::steady_clock::now();
    if (params.greedy()) {
        tok = top_with_margin(logits, n_vocab, conf);
        tok = logits[tok] > -INFINITY ? tok : -1;
    } else {
        sampling_distribution(logits, n_vocab, params, out.dists[i]);
        tok  = draw(out.dists[i], params, rng, pos);
        conf = out.dists[i].prob_of(tok);
        tok  = conf > 0.0f ? tok : -1;  // (no finite logit: the chain's probabilities are not numbers)
    }
    out.sample_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_choose).count();
    return tok;
}

const llama_token * model_drafter::as_draft_tokens(const draft_result & out, int32_t first, int32_t n,
                                                   int32_t & n_out) {
    if (map_ == nullptr) {
        n_out = n;
        return out.tokens.data() + first;
    }
    spelled_.clear();
    for (int32_t j = first; j < first + n; ++j) {
        map_->append_draft_tokens(out.tokens[j], spelled_);
    }
    n_out = (int32_t) spelled_.size();
    return spelled_.data();
}

void model_drafter::draft(const std::vector<llama_token> & seq, int32_t n_draft, const sampling_params & params,
                          rng_t & rng, draft_result & out, const draft_continue & keep_going,
                          const std::function<void()> & between_chunks, const kv_cache * target, int32_t window,
                          const std::vector<llama_token> * target_seq) {
    out.clear();
    if (n_draft <= 0 || seq.empty()) {
        return;
    }
    const auto            t0 = std::chrono::steady_clock::now();
    const catch_up_result c  = catch_up(seq, between_chunks, target, window);
    out.n_copied             = c.n_copied;
    out.windowed             = c.windowed;
    out.n_catch_up           = c.n_single;
    out.catch_up_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    if (n_draft > 1) {
        cache_.checkpoint();  // a recurrent draft comes back here if its drafts are not all kept
    }
    const std::vector<llama_token> & tseq  = target_seq != nullptr ? *target_seq : seq;
    const auto is_end = [this](llama_token t) {  // (out's vocabulary)
        return map_ != nullptr ? llama_vocab_is_eog(map_->target_vocab(), t) : cache_.mdl().is_eog(t);
    };
    if ((int32_t) out.dists.size() < n_draft) {
        out.dists.resize(n_draft);
    }
    const auto keep_forced = [&](int32_t n_done) {
        return !keep_going || keep_going(n_done, 1.0f, draft_ask::before_forced);
    };
    int32_t n_run = 0;  // the draft's tokens for the drafts to decode next
    while ((int32_t) out.tokens.size() < n_draft) {
        const int32_t i = (int32_t) out.tokens.size();
        if (params.grammar != nullptr) {  // text the grammar forces: drafts with q = 1, no decode to choose them
            const int32_t k = add_forced_drafts(*params.grammar, n_draft - i, out, keep_forced, forced_);
            if (k > 0) {
                // the draft reads the forced run in one decode, for its logits after it
                const llama_token * run = as_draft_tokens(out, i, k, n_run);
                if (i + k == n_draft || is_end(out.tokens.back()) || n_run == 0 ||
                    cache_.n_past() + n_run > cache_.n_ctx() ||
                    (keep_going && !keep_going(i + k, 1.0f, draft_ask::after_forced))) {
                    break;
                }
                cache_.decode(run, n_run, false);
                out.n_decodes += 1;
                continue;
            }
        }
        float             conf;
        const llama_token tok = choose(tseq, params, rng, out, conf);
        if (tok < 0 || (params.grammar != nullptr && !params.grammar->push(tok))) {  // (drawn from the masked logits)
            break;
        }
        out.tokens.push_back(tok);
        out.conf.push_back(conf);
        out.forced.push_back(0);
        // the last draft is not decoded here: the target verifies it, and the next step feeds it
        // to the draft together with the target's token if it is kept
        const llama_token * next = as_draft_tokens(out, i, 1, n_run);
        if (i + 1 == n_draft || is_end(tok) || n_run == 0 ||
            cache_.n_past() + n_run > cache_.n_ctx()) {
            break;
        }
        if (keep_going && !keep_going(i + 1, conf, draft_ask::after_model)) {
            break;
        }
        cache_.decode(next, n_run, false);
        out.n_decodes += 1;
    }
}

}  // namespace specllama
