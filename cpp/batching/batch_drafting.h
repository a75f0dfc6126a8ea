// batching/batch_drafting.h: how many tokens slots that share their decodes (slot_batcher.h) may draft
// with the model while several of them generate. With one slot generating, its own adaptive rule
// decides (draft_length.h). With N, a round is k merged draft decodes of N tokens and one merged
// verification of N (k + 1) tokens, and a slot's own timings cannot tell what its drafts cost the
// others: it waits as long for a merged decode whether its share is large or small. So the group
// prices rounds from the merged decodes' measured costs, by their token counts, for the target and
// the draft, and from the slots' acceptance rate a:
//     plain:       N / (T(N) + g_T) tokens per ms
//     k drafts:    N (1 - a^(k+1)) / (1 - a) / (k N/m (D(m) + g_D) + T(N (k + 1)) + g_T)
// where g_T and g_D are the measured gaps before a merged decode of the target and of the draft
// (the slots' own work between decodes), and m the measured share of the generating slots that
// a draft decode merges, times N: the slots stop drafting at different lengths, so a round has
// more draft decodes, of fewer slots, than k
// and caps every slot's draft length at the best k, drafting only where it beats plain steps by
// a margin (0: no model drafts). Where small batches are already compute-bound (a CPU), N plain
// steps in one decode can beat N slots drafting: then the slots stop drafting.
// Prompt lookup's drafts cost no draft decode, but each adds a token to the merged verification,
// which every slot waits for. A slot that adds k of them to a round of N plain steps makes
//     N - 1 + (1 - b^(k+1)) / (1 - b)  tokens in  T(N + k) + g_T  ms
// with b lookup's own acceptance rate; its extra tokens (all but the step's one) count at 1 / margin
// in the choice. On a compute-bound CPU with 8 slots, lookup's drafts (a third kept) cost more
// than they gave.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace specllama {

// measured cost of a decode by its token count: an average per count, and at a count n the
// weighted least-squares line through the counts seen in [n/2, 2n] where there are three or more
// (a count seen rarely is noisy: on the 2-core test machine one decode varies by 10-15%, enough
// to make one draft length look better than its neighbours); otherwise, between or beyond the
// counts seen, the straight line through the nearest two
class decode_costs {
  public:
    void add(int32_t n_tokens, double ms);
    // estimated ms of a decode of n_tokens; negative while fewer than two counts were seen
    double at(int32_t n_tokens) const;

  private:
    static constexpr double k_alpha = 0.2;  // weight of a new measurement
    static constexpr double k_max_weight = 1.0 / k_alpha;  // an average's weight in the fit, by its observations
    double               interpolated(int32_t n) const;
    std::vector<double>  ms_;
    std::vector<double>  weight_;  // observations of each count, at most k_max_weight (0: not seen)
    int32_t              n_seen_ = 0;
};

class batch_drafting {
  public:
    // a merged decode of n_tokens from n_slots slots on the target (draft false: on the draft)
    // took ms; n_generating slots were generating
    void observe_decode(bool draft, int32_t n_tokens, double ms, int32_t n_slots = 1, int32_t n_generating = 1);
    // the time between the end of one merged decode and the start of the next (a draft decode,
    // or the target's) while several slots generate: the slots' own work before it (drafting,
    // or acceptance; waking up), which a round pays once per decode
    void observe_gap(bool draft, double ms);
    // a slot's finished step: the model's drafts the target judged and those it kept, and prompt
    // lookup's. A draft is judged when every draft before it was kept: the ones after the first
    // rejection were never weighed, and counting them would price a round of k drafts as if each
    // were kept at the rate of the whole step's (four drafts kept at 0.8 each would read as 0.59)
    void observe_step(int32_t n_judged, int32_t n_accepted, int32_t n_lookup_judged = 0,
                      int32_t n_lookup_accepted = 0);
    // the same from a verified step: n_drafted drafts, the model's first n_model of them, prompt
    // lookup's from n_before_lookup (grammar-forced drafts between), n_accepted of them kept
    void observe_verified(int32_t n_model, int32_t n_before_lookup, int32_t n_drafted, int32_t n_accepted);
    // the acceptance rate of the model's judged drafts, and of lookup's; negative while none was judged
    double acceptance(bool lookup = false) const;
    // the most tokens a slot drafts with the model in a step while n_generating slots generate
    // (n_max when fewer than two do). Until the rounds are priced, one slot at a time (slot: its
    // sequence; -1: any may) drafts one token a step and the others none: its drafts price them,
    // and each slot that drafts first runs its prompt through the draft, which for a new group of
    // four on 2 CPU cores cost every slot the 1.2 s of a merged pass over their prompts
    int32_t cap(int32_t n_generating, int32_t n_max, int32_t slot = -1);
    // a slot's generation ended: another slot drafts to price the rounds, where they are not yet
    void leave(int32_t slot);
    // whether a slot whose draft has n_unread tokens to read before it drafts (a prompt, or what it
    // missed while the slots did not draft) wins that back in its n_remaining tokens at k drafts a
    // step: the read holds every slot, and pays where the draft decode of n_unread tokens costs less
    // than n_remaining tokens save, each (1 / rate(0) - 1 / rate(k)) ms of the group's time. On 2
    // CPU cores, slots that began drafting late in a generation read 150 tokens for one draft each.
    // True while the rounds are not priced (the exploring slot reads its prompt)
    bool catch_up_pays(int32_t n_generating, int32_t k, int32_t n_unread, int32_t n_remaining) const;
    // the expected tokens per ms of a round with k drafts per slot (k = 0: plain); negative while unknown
    double rate(int32_t n_generating, int32_t k) const;
    // the most prompt-lookup drafts a slot adds to a step without model drafts while n_generating
    // slots generate (n_max when fewer than two do; 1 while costs are not known yet)
    int32_t lookup_cap(int32_t n_generating, int32_t n_max);
    // the expected tokens per ms of a round of n_generating plain steps where one slot adds k lookup
    // drafts; negative while unknown
    double lookup_rate(int32_t n_generating, int32_t k) const;

    // drafting is chosen only where its rate beats plain steps' by this factor (prompt lookup's:
    // where its extra tokens, counted at 1 / this factor, make a better round): the formula's
    // independent acceptance and aligned rounds overstate drafting. With 4 and 8 streaming
    // clients on the 2-core machine, rounds the formula priced above plain made 4% and 10% fewer
    // tokens per second than plain steps (benchmarks/serve_bench.py at commit d3f43ee)
    static constexpr double k_draft_margin = 1.1;

  private:
    double rate_locked(int32_t n, int32_t k) const;
    // extra_weight: what a lookup draft's extra token counts for (1: the expected rate)
    double lookup_rate_locked(int32_t n, int32_t k, double extra_weight = 1.0) const;
    // the k in 0..n_max of the highest priced(k), which runs under the lock; n_max while fewer than
    // two slots generate; while any priced(k) is negative (not priced yet), k_explore_drafts for
    // the exploring slot (any, where slot is -1) and 0 for the others
    static constexpr int32_t k_explore_drafts = 1;
    template <class Priced> int32_t best_k(int32_t n_generating, int32_t n_max, Priced priced, int32_t slot);
    // drafts judged before a rate prices drafting: a first rejected draft, alone, would price
    // drafting at nothing, and a group priced out of drafting judges no more drafts
    static constexpr int64_t k_min_judged = 8;

    mutable std::mutex mutex_;
    decode_costs       target_, draft_;
    double             judged_ = 0, accepted_ = 0;  // decayed counts: the model's judged drafts, kept
    double             lookup_judged_ = 0, lookup_accepted_ = 0;  // prompt lookup's
    double             draft_share_ = 1.0;    // slots per draft decode / slots generating, averaged
    double             gap_ms_[2] = {0, 0};  // [target, draft]
    bool               has_gap_[2] = {false, false};
    int64_t            n_judged_ = 0, n_lookup_judged_ = 0;  // drafts judged in all
    int32_t            explorer_ = -1;  // the slot that drafts while the rounds are not priced (-1: none yet)
};

}  // namespace specllama
