// engine/thread_tuner.h: how many CPU threads a context's decodes use, chosen by measuring them.
// llama.cpp's CPU backend splits every operation of a decode among its threads and waits for
// the last one at each step. Where another process occupies one of the cores (a busy
// workstation, a small VM), the thread that shares a core is descheduled for whole time slices
// and every step waits for it: on a 2-core CPU with one core kept busy, plain decoding of the
// Qwen2.5-Coder-1.5B target ran 1.9x as fast on one thread as on two (docs/benchmarks.md). On an
// idle machine the full count is fastest. So the tuner runs the decodes at the current count,
// and now and then runs one (a probe) at another: a quarter fewer (at least one fewer), or the
// full count again. A probe that beats the current count's running mean cost for decodes of the
// same size by k_win, twice in a row, moves the count there. Probes come at gaps that double
// from k_min_gap to k_max_gap decodes while they lose (the first after k_first_gap), and come
// again soon where the current count's mean cost for a size moves by k_drift from where the
// last probe left it (the machine got busier or quieter). The count changes no batched decode's
// logits, nor a one-token decode's over up to 256 positions (tests/test_threads.py compares them
// bitwise); past that llama.cpp's flash attention splits a one-token decode's keys among the
// threads, and the count changes its rounding (docs/how-it-works.md#exactness).
// Not here: applying the count (kv_cache.cpp), which tunes a context whose model runs on the CPU
// alone where it was asked to (n_threads -1).
#pragma once

#include <array>
#include <cstdint>

namespace specllama {

class thread_tuner {
  public:
    // decodes of at most this many tokens are measured (verifications and one-token decodes;
    // prompt chunks run at the current count)
    static constexpr int32_t k_max_tokens = 16;
    // measured decodes before the first probe: soon, as a draft model that the adaptive rule leaves
    // out of most steps (where its decodes cost too much at the wrong count) decodes little
    static constexpr int32_t k_first_gap  = 2;
    static constexpr int32_t k_min_gap    = 8;    // after a move, or after the cost drifted
    static constexpr int32_t k_max_gap    = 128;  // the longest gap between probes
    static constexpr double  k_win        = 0.85; // a probe wins at this share of the mean cost or less
    static constexpr double  k_drift      = 1.3;  // a mean this many times higher or lower: probe soon
    static constexpr double  k_alpha      = 0.25; // weight of a new decode in the running mean

    // max_threads >= 1: the count decodes start at, and the most they use
    explicit thread_tuner(int32_t max_threads);

    // the thread count for the next decode, of n_tokens tokens
    int32_t next(int32_t n_tokens);
    // a decode of n_tokens tokens that ran on threads threads took ms
    void record(int32_t n_tokens, int32_t threads, double ms);
    // move the current count to threads (1..max_threads) without measuring it, as another model on the
    // same cores measured; its probes go on from there, the next soon
    void move_to(int32_t threads);

    int32_t threads() const { return cur_; }       // the current count
    int32_t max_threads() const { return max_; }
    int64_t n_probes() const { return n_probes_; }  // decodes run at another count to compare
    int64_t n_moves() const { return n_moves_; }    // changes of the current count

  private:
    // the count a probe tries now: below or above the current one, taking turns where both exist
    int32_t candidate() const;
    void    forget();  // the means of the current count, after a move

    struct size_cost {
        double  mean = 0;  // running mean cost at the current count
        double  ref  = 0;  // the mean when the last probe was judged against it (or when first known)
        int32_t n    = 0;  // decodes measured
    };
    int32_t max_;
    int32_t cur_;
    std::array<size_cost, k_max_tokens + 1> cost_{};
    int32_t gap_       = k_first_gap;
    int32_t since_     = 0;     // measured decodes since the last probe
    bool    down_next_ = true;  // the next probe tries fewer threads (where both directions exist)
    int32_t trying_    = 0;     // the count a probe under way tries (0: none)
    int32_t wins_      = 0;     // consecutive wins of trying_
    int64_t n_probes_  = 0;
    int64_t n_moves_   = 0;
};

}  // namespace specllama
