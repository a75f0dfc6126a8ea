// speculative/drafting.h: the draft model proposes the next tokens, one llama_decode each, keeping each
// position's distribution q for the acceptance rule.
// Not here: verification and acceptance (speculative/decoder.h, acceptance.h).
#pragma once

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "engine/kv_cache.h"
#include "sampling/controls.h"
#include "sampling/sampling.h"
#include "speculative/vocab_map.h"

namespace specllama {

struct draft_result {
    std::vector<llama_token> tokens;  // proposed tokens, at most n_draft
    std::vector<token_dist>  dists;   // dists[i] is the q tokens[i] was drawn from (sampling only)
    // the draft's confidence in tokens[i]: greedy, 1 - p2/p1 (how far its top token is from a tie
    // with the runner-up; a quantized copy of the target disagrees with it almost only near ties);
    // sampling, the probability it gave the token it drew
    std::vector<float>       conf;
    double                   catch_up_ms = 0.0;  // of the drafting time, the catch-up decode
    double                   vocab_ms    = 0.0;  // of the drafting time, masking and converting tokens (vocab_map)
    double                   sample_ms   = 0.0;  // of the drafting time, choosing the tokens from the logits
    int32_t                  n_copied    = 0;    // tokens the catch-up lacked and took from the target's cache
    // forced[i]: tokens[i] is text the grammar forces (grammar_forcing), proposed with q = 1
    std::vector<uint8_t>     forced;
    int32_t                  n_decodes   = 0;    // draft decodes after the catch-up (a forced run's is one)
    int32_t                  n_catch_up  = 0;    // the catch-up's decodes where each took one token (0: a batch)
    bool                     windowed    = false;  // the catch-up decoded the last `window` tokens alone
    bool                     resumed     = false;  // the catch-up read more tokens than one step brings (decoder)

    // empty, for a new step (dists keep their memory)
    void clear() {
        tokens.clear();
        conf.clear();
        forced.clear();
        n_decodes = n_copied = n_catch_up = 0;
        catch_up_ms = vocab_ms = sample_ms = 0.0;
        windowed = resumed = false;
    }
    int32_t n_forced() const { return (int32_t) std::count(forced.begin(), forced.end(), 1); }
    // tokens [first, end) appended without a q: a deterministic proposal (prompt lookup's, a prediction's),
    // q one-hot, with no confidence (kept out of the calibration)
    void set_deterministic(int32_t first) {
        const int32_t n = (int32_t) tokens.size();
        if ((int32_t) dists.size() < n) {
            dists.resize(n);
        }
        for (int32_t i = first; i < n; ++i) {
            conf.push_back(-1.0f);
            dists[i].ids.assign(1, tokens[i]);
            dists[i].probs.assign(1, 1.0f);
        }
    }
    // move from's drafts [first, first + n) to the end of these, each with its q and confidence
    void take(draft_result & from, int32_t first, int32_t n) {
        const int32_t at = (int32_t) tokens.size();
        if ((int32_t) dists.size() < at + n) {
            dists.resize(at + n);
        }
        for (int32_t i = first; i < first + n; ++i) {
            tokens.push_back(from.tokens[i]);
            conf.push_back(from.conf[i]);
            forced.push_back(from.forced[i]);
            std::swap(dists[at + i - first], from.dists[i]);
        }
    }
};

// what a draft_continue is asked
enum class draft_ask {
    after_model,    // the model drafted its n-th token with confidence conf: draft another?
    before_forced,  // n drafted so far: propose the next token the grammar forces?
    after_forced,   // n drafted so far, the last ones forced: go on drafting with the model?
};
// asked as drafting goes: draft more? (n drafted so far, confidence in the latest)
using draft_continue = std::function<bool(int32_t n, float conf, draft_ask ask)>;

// append to out the tokens the grammar forces after its latest state (at most n_max), each with q = 1,
// while keep(drafts so far) says so and the grammar takes it (grammar_forcing); returns how many
int32_t add_forced_drafts(grammar_track & grammar, int32_t n_max, draft_result & out,
                          const std::function<bool(int32_t)> & keep, std::vector<llama_token> & scratch);

class model_drafter {
  public:
    // map: where the draft's vocabulary is not the target's, the pairing its drafts go through
    // (vocab_map.h): then draft() takes the draft's view of the sequence (draft_view) and the target's
    // tokens, and proposes only shared tokens, returned as target tokens with q over target tokens.
    // The draft's logits move to their partners' ids before the chain, so that the target's
    // grammar and logit controls (which name its tokens) apply to them as to the target's, keyed
    // draws share the target's randomness at each position, and the text the grammar forces reaches
    // the draft as its own tokens
    explicit model_drafter(kv_cache & cache, const vocab_map * map = nullptr) : cache_(cache), map_(map) {}

    // propose up to n_draft tokens to follow seq (catching up first); stops early at an
    // end-of-generation token, where no token is left to propose, or when keep_going says so.
    // between_chunks: see kv_cache::decode; target and window: see catch_up. target_seq: with a map,
    // the target's tokens, of which seq is the draft's view (the history the controls read and the
    // positions of keyed draws); without one, seq itself
    void draft(const std::vector<llama_token> & seq, int32_t n_draft, const sampling_params & params, rng_t & rng,
               draft_result & out, const draft_continue & keep_going = nullptr,
               const std::function<void()> & between_chunks = nullptr, const kv_cache * target = nullptr,
               int32_t window = 0, const std::vector<llama_token> * target_seq = nullptr);

    // before the first draft() on seq: cache all of seq but its last token, which that draft()
    // decodes (its catch-up always decodes the last token, whose logits are q_1).
    // target: the target's cache, holding exactly that much of seq, when its keys and values can
    // stand in for the draft's (kv_interchangeable): then the draft copies them instead of decoding
    // where that is cheaper. Returns how many of the tokens it cached were copied (0: decoded).
    // reuse >= 1: where the cache holds runs of at least that many of seq's tokens after an edit,
    // they move to their new positions instead of being decoded again (kv_cache::keep_reusable)
    int32_t prefill(const std::vector<llama_token> & seq, const std::function<void()> & between_chunks = nullptr,
                    const kv_cache * target = nullptr, int32_t reuse = 0);

    // decode whatever part of seq the cache lacks (after a fully accepted step: the last draft, which
    // it never decoded, and the target's bonus token), so that its last logits follow seq.
    // target: as prefill's. After steps without the model (a pause), the cache lacks every token
    // since: where copying the target's keys and values for all of seq but its last token is
    // cheaper than decoding those, it copies them (on the 2-core test machine with the default
    // pair, a token's keys and values copy in about 21 us; five slots' merged catch-up of 489
    // tokens took the draft 1.8 s to decode)
    // window > 0: where no copy is taken and the cache lacks more than window tokens before seq's
    // last, it forgets what it holds and decodes the last window tokens and seq's last alone
    // (kv_cache::restart_at; 0: it decodes all it lacks).
    struct catch_up_result {
        int32_t n_copied = 0;      // tokens it lacked that came from a copy (0: it decoded them)
        bool    windowed = false;  // it decoded the last window tokens alone
        int32_t n_single = 0;      // its decodes where each took one token (0: it decoded a batch, or nothing)
    };
    catch_up_result catch_up(const std::vector<llama_token> & seq, const std::function<void()> & between_chunks = nullptr,
                             const kv_cache * target = nullptr, int32_t window = 0);

    // a read in place of a probe's first drafting step (draft_length_model::observe_read): decode what the cache lacks
    // of seq before its last token (the last window tokens of it at most, as catch_up's window), with an output at
    // each of the last k_max_read (n_batch where that is fewer), and sum at each the chance that the target would have
    // kept the draft's token there. Greedy: 1 where the draft's top token (its choice) is the token that came next,
    // else 0. Sampled, under the rejection rule (a draft y drawn from q kept with min(1, p(y) / q(y))): min(1, q(x) /
    // p(x)) for the token x that came, drawn from p, whose mean over p is sum_x min(p, q), that chance; q is the
    // draft's chain's distribution as params make it, p(x) comes from p_of(index of x in seq), and a position whose
    // p_of is not above 0 (not known) is not judged. Never with a vocabulary map (the draft's view of a text is not
    // the target's tokens). The draft then lacks seq's last token alone, as after any step: the probe's drafting step,
    // if the read lets it draft, catches up on that
    struct read_result {
        int32_t n        = 0;  // positions judged
        double  foretold = 0;  // the sum of their chances
        bool    windowed = false;  // it decoded the last window tokens alone (as catch_up's)
    };
    static constexpr int32_t k_max_read = 64;
    read_result read(const std::vector<llama_token> & seq, int32_t window, const sampling_params & params,
                     const std::function<float(int32_t)> & p_of);

    kv_cache & cache() { return cache_; }

    // a catch-up of at most n tokens decodes them one at a time (0: as one batch). On a GPU whose
    // backend replays a recorded graph for a decode shaped like the last one (CUDA graphs), a
    // batch between the draft's one-token decodes makes it run the next decodes without the graph
    // (llama.cpp records again only after two alike), and a small draft's decode is bound by its
    // kernel launches there; one-token catch-ups keep every decode of a step on the graph
    void set_catch_up_by_token(int32_t n) { by_token_ = n; }
    int32_t catch_up_by_token() const { return by_token_; }

  private:
    // cache all of seq but its last token by copying target's keys and values, where target holds
    // exactly those and the copy is cheaper than decoding what the cache lacks; returns how many
    // tokens the cache lacked and took from the copy (0: no copy)
    int32_t copy_target(const std::vector<llama_token> & seq, const kv_cache * target);
    // keep the cache's common prefix with seq and decode seq[..n_end); window as catch_up's.
    // Returns whether it restarted at the window; n_single (where given): its decodes where each took one token
    bool sync(const std::vector<llama_token> & seq, int32_t n_end, const std::function<void()> & between_chunks,
              int32_t window = 0, int32_t reuse = 0, int32_t by_token = 0, int32_t * n_single = nullptr);
    // where window > 0 and the cache lacks more than window tokens before seq's last: forget what it holds
    // and start at the last window of them (kv_cache::restart_at); whether it did
    bool restart_at_window(const std::vector<llama_token> & seq, int32_t window);
    // the next draft, after out's, from the draft's last output: the device chain's row, or the
    // host's chain over its logits (with a map: moved to the target's ids, the shared tokens only;
    // controls, the grammar); its distribution into out.dists where sampling, and its confidence
    // (drafting.h's draft_continue). With a map, a target token. -1 where the chain leaves no token
    // (a grammar or a control that allows only tokens the draft lacks). tseq: the target's tokens
    llama_token choose(const std::vector<llama_token> & tseq, const sampling_params & params, rng_t & rng,
                       draft_result & out, float & conf);
    // the draft's tokens for out's tokens [first, first + n) (with a map, their spelling; else themselves)
    const llama_token * as_draft_tokens(const draft_result & out, int32_t first, int32_t n, int32_t & n_out);

    kv_cache &         cache_;
    const vocab_map *  map_ = nullptr;
    std::vector<float> in_target_;  // with a map: the draft's logits at the target's ids (-inf outside the shared set)
    std::vector<llama_token> spelled_;  // with a map: target tokens as the draft's
    logit_editor       editor_;  // sampling_params::controls on the draft's logits
    std::vector<float> grammar_row_;  // the draft's logits under sampling_params::grammar
    std::vector<llama_token> forced_;  // the tokens the grammar forces at a position
    token_dist         read_q_;  // the draft's distribution at a read's position
    int32_t            by_token_ = 0;  // set_catch_up_by_token
};

}  // namespace specllama
