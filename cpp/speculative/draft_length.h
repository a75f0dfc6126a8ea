// speculative/draft_length.h: adaptive draft length. Drafting one more token costs a draft decode plus a
// larger verification batch; it pays only if the chance that the target keeps it is high enough.
// The model keeps running estimates of those costs (a draft decode; the draft's catch-up decode,
// paid once per step; a steady one-token verification; a batch of k tokens as a + b k, fitted
// online, and each size's own mean where it has been measured), of how well the draft's own
// confidence predicts acceptance, and of the loop's long-run rate (tokens per millisecond over
// recent steps). Drafting continues while the next tokens' expected yield per millisecond beats
// that long-run rate: a step is a renewal cycle, and the long-run rate is maximized by extending
// a step while its marginal tokens per ms exceed the rate itself (Dinkelbach's rule for ratio
// objectives; Leviathan et al. sec. 3.5 choose one length per run). Where a batch's cost rises
// in steps rather than by a constant per token (a CPU's matrix kernels), the yield of the next
// few tokens together is weighed against the cost up to each of them (keep_going_p).
// The draft's confidence (drafting.h: greedy, 1 - p2/p1 of its top two tokens; sampling, its
// probability of the token it drew) is mapped to an acceptance chance through a calibration
// curve learned from this pair's own verifications; it prices the tokens already drafted. The
// next token, not yet drafted, is priced at the overall acceptance rate: on 12 prompts x 256
// tokens of the default pair, the token after one of the draft's near-ties (acceptance 0.79) is
// accepted as often as any (0.97 against 0.98).
// Before a step, the model decides whether to draft at all: not while the steps it drafted in
// made fewer tokens per ms than plain steps (draft_this_step), as where both models are bound by
// kernel launches on a GPU. Before a generation, whether the draft takes its prompt in at all:
// not where the generation is too short to win that pass back (draft_prompt_pays), and not yet where
// the generations before it stopped short of that (draft_prompt_after).
// Before any drafting step is measured, that decision is a prediction from the prices measured so
// far (pays_at_prices), so that a pair whose prices cannot pay (a recurrent target on a CPU) starts
// paused instead of learning it from drafting steps that each cost several plain steps; such a
// pause ends where the prediction, asked again at each step, says drafting pays at the prices
// measured since (plain steps priced in a busy spell that has passed), or else after two probes
// have measured drafting. A pause after drafting steps ends only with a drafting step (a probe)
// after which drafting pays, not because a plain step's price moved.
// While paused, the model probes at gaps that double from k_first_probe_gap steps (times the steps
// a probe takes: set_settle_steps), and that after the pause's second probe are never shorter than
// what keeps the probes' cost within k_probe_budget of the plain steps between them (before it,
// where the pause was predicted or a clear loss, that cost is estimated: probe_gap). A probe that
// ends the pause, followed by a drafting step that does not pay, leaves the same pause, its gaps
// and its probes' costs; drafting steps that pay start them over. A probe costs
// what it took beyond the plain steps that would have made its tokens: on a recurrent target on a
// CPU, where a verified batch costs nearly a decode per token and a rejection a decode again, 20-40
// ms against a 6.5 ms plain step (benchmarks/recurrent_bench.py), so that gaps of at most 128 steps
// would spend about 4% of the time on probes.
// Not here: drafting itself (drafting.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace specllama {

// what one finished step tells the model (the decoding loop and the replay both report steps so)
struct step_record {
    int32_t            n_model    = 0;   // tokens the draft model drafted
    int32_t            n          = 0;   // tokens drafted in all (the model's, then prompt lookup's)
    int32_t            n_accepted = 0;   // of which the target kept
    std::vector<float> conf;             // the model's confidence in each drafted token (n_model of them)
    int32_t            probe      = -1;  // 1/0: a lookup proposal the rule dropped would have been kept; -1: none
    double             catch_up_ms = 0;  // the draft's catch-up decode (once per step it drafts)
    double             draft_ms    = 0;  // all of the step's drafting, the catch-up included
    double             verify_ms   = 0;  // the verification of n + 1 tokens
    int32_t            prev_n      = -1; // tokens drafted in the step before (-1: it was prefill)
    // forced[i]: draft i was forced by a grammar or given by the request's prediction (q = 1: neither the
    // model's choice nor lookup's); empty: none
    std::vector<uint8_t> forced;
    // the request's prediction drafted in it (generate_params::prediction): its verification is priced, but its
    // drafts and its speed are the request's, not the pair's, and count in no rate
    bool               given      = false;
    int32_t            n_decodes  = -1;  // the draft's decodes after its catch-up (-1: n_model - 1)
    int32_t            n_catch_up = 0;   // the catch-up's decodes where each took one token (0: a batch)
    int32_t            n_verified = 0;   // tokens the verification decoded (0: n + 1; more where padded)
    // prompt tokens its decode took in before them (a generation's first step: decoder::prefill);
    // verify_ms is then the prompt's pass, which prices no step
    int32_t            n_prompt   = 0;
    // the draft's catch-up read what it sat out (more tokens than one step brings: a probe's, or the
    // first drafting step after a pause): its time counts in the step's, and prices no catch-up
    bool               resumed    = false;
};

class draft_length_model {
  public:
    // --- the loop's use of the model, step by step ---
    // whether a step of an adaptive loop is a pricing step: plain, to price plain steps first
    bool pricing(bool adaptive) const { return adaptive && !knows_plain_step(); }
    // the start of a step that may draft with the model: whether the model drafts in it (always
    // when not adaptive; when adaptive, as draft_this_step says)
    bool model_drafts(bool adaptive) { return !adaptive || draft_this_step(); }
    // after the model drafted its n_done-th token with confidence conf: draft another, in a step
    // that drafts at most n_max? p_reach carries the estimated chance that every token so far is
    // accepted (start it at 1)
    bool keep_drafting(int32_t n_done, float conf, double & p_reach, int32_t n_max) const;
    // a finished step: its costs and outcomes update every estimate
    void observe(const step_record & step);

    // keep drafting? n drafted so far, at most n_max in the step (0: look one token ahead only);
    // p_reach = estimated chance that all n are accepted
    bool keep_going(int32_t n, double p_reach, int32_t n_max = 0) const;

    // draft with the model at all this step? Yes while the steps it drafted in made more tokens
    // per ms than plain steps do (one per steady one-token verification); else the step is a plain
    // one (or prompt lookup's alone). That happens where a draft decode costs about as much as a
    // target decode: a small pair offloaded to a GPU (H100, default pair: plain 1.15 ms per token,
    // drafting steps 0.35 tokens per ms). Measured rates, not Leviathan's formula: the formula's
    // independent acceptance misses what stopping at the draft's near-ties gains. Even while
    // paused the model drafts now and then, at gaps that double from k_first_probe_gap to
    // k_max_probe_gap steps, so that changed prices or acceptance are seen.
    bool draft_this_step();
    // whether drafting pays at the current estimates (no state change)
    bool draft_pays() const;
    // when, in a generation of at most n_gen tokens, the draft reads its n_prompt new prompt tokens:
    // after this many generated tokens; 0, before the first step it drafts in; more than n_gen, never
    // (it sits the generation out). Never where the generation is too short to win that read back:
    // what a drafting step saves per token against plain steps, times n_gen, against what the draft's
    // prompt tokens cost. Short answers to long new prompts (an editor's completion after an edit:
    // hundreds of new prompt tokens, tens of generated ones) do not win it. 0 while either side is not
    // measured yet (fewer than k_min_evidence drafting steps), and where drafting saves nothing: that
    // is the pause's to judge, with probes (a generation that sits out measures nothing, and a
    // decoder's first drafting steps on a GPU may cost far more than later ones: Qwen2.5-0.5B's shape
    // on an H200 took 5.7 ms per draft decode in them, where later steps of ten draft decodes and
    // their verification took 25 ms).
    // That judgement rests on the texts the draft last drafted in, and a generation that sits out
    // measures nothing to revise it: a conversation that turned from a chat, where drafting saved a
    // little, to code pasted in would sit out every later turn, its unread part growing. So it is
    // revisited as one rents before buying: once the generations sat out since the model last
    // drafted have made as many tokens as drafts kept at k_good_acceptance would have saved the read
    // in (good_saving_per_token), the draft reads. Where the read was needless, it cost what the
    // sitting out would have lost had the text been a good one, and no more than that.
    // Where the generation may stop long before n_gen (a request that sets no limit gets the room
    // left in the context: a question about a long document, answered in a sentence) and the
    // generations before it stopped short of winning the read back (the median of the last
    // k_lengths, k_min_lengths or more), the draft sits out for now, as one rents: it reads once the
    // generation has made as many tokens as the read costs at what drafting saved per token. A reply
    // that stops before then saved the whole read; one that goes on lost at most the read's worth of
    // drafting
    int32_t draft_prompt_after(int32_t n_prompt, int32_t n_gen) const;
    // whether the draft reads them before the first step it drafts in
    bool draft_prompt_pays(int32_t n_prompt, int32_t n_gen) const { return draft_prompt_after(n_prompt, n_gen) == 0; }
    // a generation of n_tokens that the draft sat out to its end (draft_prompt_after); a step the model
    // drafts in starts the count again
    void observe_sat_out(int32_t n_tokens) { o_.sat_out_tokens_ += n_tokens; }
    // a finished generation of n_tokens that the draft model could draft in (its length prices the next ones' reads)
    void observe_generation(int32_t n_tokens);
    // the median of the last k_lengths such generations' lengths (-1: fewer than k_min_lengths)
    int32_t typical_length() const;
    // before any drafting step is measured, whether drafting pays is predicted: does some length
    // of a first batch (1 to k_first_batch_drafts drafts) make more tokens per ms than plain steps,
    // at the acceptance judged so far (shrunk towards k_prior_acceptance) and the prices measured
    // so far (a plain step; a batch's further tokens, priced by the prompt pass until a batch is
    // verified, where that cost less per token than a plain step (prompt_price); the draft's
    // decodes, at its prompt price per token until one is measured (free where neither is); for a
    // target that decodes kept tokens again after a rejection, its checkpoint, restore and that
    // decode)? Asked again at each step while no drafting step is measured (draft_this_step). On a
    // transformer pair a batch's tokens cost little and it does; on a recurrent target on a CPU a
    // batch costs nearly a decode per token, and a rejection a decode again (Mamba-130M's shape on
    // the 2-core CPU: a plain step 6.5 ms, a prompt token 4.7 ms), and it does not: the loop starts
    // paused
    bool pays_at_prices() const;
    // what a first batch is predicted to cost beyond the plain steps that would make its expected
    // tokens, at its best length (what pays_at_prices judges: negative where it pays)
    double priced_excess_ms() const { return priced_excess_ms(acceptance()); }
    // the same at a per-draft acceptance of p
    double priced_excess_ms(double p) const;
    // a target whose rollback restores a checkpoint and decodes the kept tokens again (recurrent
    // or hybrid memory): a rejected draft then costs that decode as well, priced before any batch
    void set_decodes_again(bool yes) { decodes_again_ = yes; }
    // verification batches padded to n_tokens (0: none): every batch of 2 to n_tokens tokens
    // costs what one of n_tokens does, so a further draft adds no verification cost up to there.
    // Another length in the middle of a run of drafting steps is a new shape: the run's next steps
    // are its transitions again (set_settle_steps)
    void set_padded(int32_t n_tokens) {
        const int32_t padded = n_tokens > 1 ? n_tokens : 0;
        if (padded != padded_) {
            run_ = -1;
        }
        padded_ = padded;
    }
    int32_t padded() const { return padded_; }
    // the most drafts worth padding a verification for, at most n_max: the fixed draft length
    // whose steps make the most tokens per ms at the acceptance and prices so far, every
    // verification priced as the padded one now is (n_max + 1 tokens where none is). A padded
    // verification costs its size whatever the drafts, so the longest steps the rule may take set
    // every step's price: on simulated H200 prices (benchmarks/gpu/graph_sim.py, acceptance 0.8,
    // a draft decode of 1.1-1.7 ms) padding to this length rather than to n_draft + 1 made 3-5%
    // more tokens per ms. Until the prices are measured and at least 16 drafts' weight judged
    // (knows_draft_prices): the first batch's length (k_first_batch_drafts, at most n_max). A
    // padded length holds for a generation, and one set before these would hold for all of one:
    // on an H100 at acceptance 0.6, a new decoder's first generation, padded to n_draft + 1,
    // drafted 6-9 tokens a step where two paid
    int32_t padded_length(int32_t n_max) const;
    // whether padded_length judges on measured prices (a plain step, a draft decode, a catch-up and
    // a verified batch) and on k_padded_weight judged drafts: until then it is the first batch's
    // length, and a generation that began so pads again, once, when they are (decoder::plan_step)
    bool knows_draft_prices() const { return knows_step_prices() && o_.n_all_ >= k_padded_weight; }
    // whether a plain step, a draft decode, a catch-up and a verified batch are priced
    bool knows_step_prices() const { return knows_plain_step() && has_draft_ms_ && has_catch_up_ && sw_ > 0.0; }
    // the first n steps of a run of drafting steps, and of a run of plain steps, are transitions
    // whose costs are not what the run's later steps cost (0: none). On a GPU whose backend replays
    // a recorded graph (CUDA graphs), a decode shaped unlike the last one runs without the graph
    // and the next alike records it; only then is it replayed (llama.cpp: 2 steps). Their tokens
    // and acceptance count; their costs price neither drafting nor plain steps, and a probe of a
    // paused model drafts for n + 1 steps in a row, so that it is judged by a steady step (the
    // first gap between probes is n + 1 times as long, so that probing costs as large a share)
    void set_settle_steps(int32_t n) {
        settle_           = n > 0 ? n : 0;
        o_.probe_gap_     = first_probe_gap();
        other_.probe_gap_ = first_probe_gap();
    }
    int32_t settle_steps() const { return settle_; }
    // the kind of the generations from here on: sampled or greedy. Each kind has its own acceptance,
    // calibration curve, rates and pause, learned from its own steps; the prices (decodes,
    // verifications, prompts) are the machine's and shared. A probe the other kind left unfinished
    // does not go on when it comes back
    void set_sampled(bool yes) {
        if (yes != sampled_) {
            std::swap(o_, other_);
            other_.probe_left_ = 0;
            other_.probing_    = false;
            sampled_           = yes;
        }
    }
    bool sampled() const { return sampled_; }
    // the draft's prompt pass: n_tokens in ms, the price of a probe's catch-up until a probe is
    // measured, and of a draft decode in the prediction until one is
    void observe_draft_prompt(int32_t n_tokens, double ms);
    // a probe of a paused draft catches up on at most this many of the tokens it sat out (the
    // decoder's windowed catch-up, where it cannot copy the target's keys and values)
    static constexpr int32_t k_probe_window = 32;
    // such a target saved its state in ms (where a prompt ends): the price of a step's checkpoint,
    // and of its restore, until a verified batch prices them (on an H100, Mamba-130M's shape: a
    // host-memory save 0.93 ms, a restore 0.94; a plain step 0.85)
    void observe_checkpoint(double ms) { checkpoint_ms_ = ms; }
    // whether the model is left out of steps now, but for probes: drafting did not pay when a step
    // last asked, and no drafting step since has shown that it does (or it does not pay now; before
    // any drafting step is measured, whether the prediction says it does not)
    bool paused() const { return pause_holds() || !draft_pays(); }
    // whether the step draft_this_step last began is a probe of a paused model
    bool probing() const { return o_.probing_; }
    // the tokens a probe's catch-up reads of the n_behind its draft sat out, n_left tokens before the generation
    // ends: the last k_probe_window alone (0: all of them). A new text's first probe reads all where drafts kept
    // at k_good_acceptance would win the rest of that read back within n_left tokens: the window leaves out the
    // prompt a reply may depend on (on the Qwen2.5-Coder pair a code edit's reply after a paused chat kept 0 and 1
    // drafts in its two probes and stayed paused, where drafting with the whole prompt made 1.4-1.8x plain steps).
    // n_left is at most the generations' typical length (typical_length), as for the draft's first read
    int32_t probe_window(int32_t n_behind, int32_t n_left) const;
    // steps without the model since drafting last paid or was probed (0 while it pays)
    int32_t skipped_steps() const { return o_.skipped_; }

    // the steps a paused model sits out before its next probe: the doubling gap, or more where a
    // probe costs more than k_probe_budget of that many plain steps. A probe's cost is the lesser of
    // the pause's last two probes'. Before two, it is estimated, for a gap of at most
    // k_max_probe_gap: where the prices predicted the pause, at what they predict (the batch, and the
    // draft's catch-up on k_probe_window tokens at its prompt price); where the pause came from a
    // clear loss, at what its drafting steps cost on average beyond plain steps. Other pauses keep
    // the doubling gaps: a busy spell may have caused them. (A clear loss is a step that costs
    // several plain steps, a recurrent target's on a GPU, where each early probe costs as much.)
    int32_t probe_gap() const;

    // probes that read first (set_read_probes): where a probe's drafting steps are transitions (settle_steps
    // > 0: a GPU's CUDA graphs), each of its steps costs far more than a steady drafting step (on an H200, the
    // 7B-shaped target and its 0.5B-shaped draft: 13 ms against a 5 ms plain step, about 28 ms a three-step
    // probe beyond the plain steps), and at an acceptance where drafting does not pay every probe is that loss.
    // A read costs the draft alone: it decodes the tokens it sat out (its probe window's) with an output at
    // each, and judges at each the chance that the target would have kept its draft there (model_drafter::read:
    // greedy, whether its top token, its choice, was the token that came; sampled, an unbiased estimate from
    // the token that came and the target's probability of it); the target's decodes keep their shape. Their
    // mean is the acceptance a probe would have seen, over every position read instead of the few a probe
    // verifies. The probe drafts only where drafting at that acceptance (the pause's reads together, each
    // position's weight decayed by k_decay per position read after it; a new text's from its first read;
    // shrunk towards k_prior_acceptance) saves more over the tokens left in the generation, at the prices
    // measured, than the pause's last drafting probe cost beyond plain steps: an acceptance at which drafting
    // barely pays does not win back the transitions of going there. Else the read was the probe: the step is
    // plain, and the read's cost prices the gaps (probe_gap)
    void set_read_probes(bool yes) { reads_ = yes; }
    bool read_probes() const { return reads_; }
    // whether the step draft_this_step just began is a probe that reads first: its first step, in a pause
    // that drafting steps measured and a probe of its own has (the prices that judge a read are a drafting
    // step's, and the steps that began a pause may have been a new decoder's first, far dearer than later
    // ones: a read judged by them called every probe off at acceptance 0.9 in graph_sim.py), with every such
    // price known (knows_step_prices); or any probe of a kind judged by reads (judged_by_reads)
    bool read_due() const {
        return reads_ && o_.probing_ && o_.probe_left_ == settle_ && knows_step_prices() &&
               ((pause_holds() && o_.n_probes_ > 0) || judged_by_reads());
    }
    // a kind of generation (greedy, sampled) that has not drafted yet while the other kind's draft is paused, where
    // probes read and every price is known: it drafts only where a read says so. On a GPU a new kind's first
    // drafting steps are transitions, each dearer than a plain step whatever the acceptance (the 7B-shaped pair on
    // an H200: about 13 ms against 5), so that learning by drafting what the other kind's pause already suggests
    // cost a kind's first generation 4-8% in graph_sim.py at acceptances 0.5 to 0.6. Its steps are plain until the
    // first gap's probe, whose read foretells the acceptance from the text the target made, and the probe drafts
    // where drafting pays at that acceptance less one standard error (observe_read); until a probe drafts, each
    // read's positions count in the kind's acceptance. Where the other kind drafts (or has not), it drafts at once:
    // waiting a gap to read costs a pair that pays about a dozen of its fastest steps
    bool judged_by_reads() const {
        return reads_ && o_.drafted_steps_ == 0 && knows_step_prices() && other_.paused_ &&
               (other_.drafted_steps_ > 0 || other_.read_n_ > 0);
    }
    // what the read found: n positions, and the sum of the chances that the target would have kept the draft's
    // token at each (greedy: where the draft's top token came next); ms, what it cost; n_left, the tokens the
    // generation may still make. True: the probe drafts (the read's cost is part of the probe's); false: called
    // off
    bool observe_read(int32_t n, double foretold, double ms, int32_t n_left);
    // the acceptance the pause's reads say (k_prior_acceptance before any)
    double read_acceptance() const {
        return (o_.read_foretold_ + k_prior_weight * k_prior_acceptance) / (o_.read_n_ + k_prior_weight);
    }

    // the target's prompt pass: n_tokens in ms. Until a verified batch is seen, it prices a batch's
    // further tokens (a recurrent target's prompt costs nearly a decode per token, a transformer's
    // far less), so that a first batch stops where that price says drafting cannot pay
    void observe_prompt(int32_t n_tokens, double ms);

    // the same decision given the next tokens' acceptance chance directly; draft_cost false for
    // proposals that cost no draft decode (prompt lookup). Drafting goes on while some number m of
    // further tokens (up to n_max in all) is worth its price: their expected kept tokens beat the
    // long-run rate times their draft decodes and the growth of the verification from n + 1 to
    // n + 1 + m tokens. One token ahead is enough where a batch's cost grows by a constant per
    // token; on a CPU it grows in steps (Qwen2.5-Coder-1.5B Q8_0 on 2 Xeon cores: 4 tokens
    // 161 ms, 5 tokens 239, 8 tokens 234, 9 tokens 317), and a step that pays only past one of
    // them is seen by looking further
    bool keep_going_p(int32_t n, double p_reach, double p_next, bool draft_cost, int32_t n_max = 0) const;

    // prompt lookup's proposals: how often the target keeps one (tracks bursts of quoting)
    void   observe_lookup(bool accepted);
    double lookup_accept_prob() const { return o_.n_lookup_ > 0.5 ? o_.acc_lookup_ / o_.n_lookup_ : 0.5; }

    // estimated chance the target accepts a token the draft gave confidence conf
    double accept_prob(double conf) const;

    // observations from a finished step: a one-token draft decode, the step's catch-up decode
    void observe_draft_decode(double ms);
    void observe_catch_up(double ms);
    // a verification of n_tokens; one token only for a steady plain step (one that follows a plain
    // step: on a GPU the first one-token decode after batches re-records its CUDA graph and costs
    // 2-4x a steady one, and that is not what a paused loop pays). True where a batch far below
    // its price showed that the prices were measured in conditions that are over: it prices nothing
    // then, and every price starts again (conditions_changed)
    bool observe_verify(int32_t n_tokens, double ms);
    // a plain step right after a verified batch cost excess_ms more than a steady one (on a GPU:
    // it records its CUDA graph again: 1.5-3.6 ms for the default pair on an H100, docs/gpu.md;
    // on a CPU: nothing)
    void observe_leave(double excess_ms);
    // what leaving plain steps for one batch costs beyond the batch itself (at least 0)
    double leave_ms() const { return leave_ms_ > 0.0 ? leave_ms_ : 0.0; }
    // whether steady plain steps have been priced (two): until then the loop steps plainly (the
    // first three steps of a decoder's life)
    bool knows_plain_step() const { return n_v1_ >= 2; }
    // a draft with confidence conf was verified (it was reached: all before it were accepted)
    void observe_acceptance(double conf, bool accepted);
    // a finished step: tokens it produced (accepted + the target's own), ms it took (drafting
    // and verification), whether the draft model drafted in it
    // (steady false: a drafting step that is one of its run's transitions, set_settle_steps; it
    // counts in the drafting steps' rate at steady_ms, its price at the steady steps' prices, and
    // not here where steady_ms < 0: none is known yet; observe() then keeps it to count at those
    // prices once a steady step has measured them)
    void observe_step(int32_t tokens, double ms, bool model_drafted, bool steady = true, double steady_ms = -1.0);

    double draft_ms() const { return draft_ms_; }
    double draft_token_ms() const { return draft_token_ms_; }
    double checkpoint_ms() const { return checkpoint_ms_; }
    double catch_up_ms() const { return catch_up_ms_; }
    // acceptance rate of all reached drafts (the prior of each confidence bin), shrunk towards
    // k_prior_acceptance while few are judged: four drafts kept in four are not a certainty
    double acceptance() const {
        return (o_.acc_all_ + k_prior_weight * k_prior_acceptance) / (o_.n_all_ + k_prior_weight);
    }
    double verify_ms(int32_t n_tokens) const;
    // long-run tokens per ms over recent steps (0 before any)
    double rate() const { return o_.step_ms_ > 0.0 ? o_.step_tokens_ / o_.step_ms_ : 0.0; }

    // --- what the model learned, kept across processes (draft_length_state.cpp) ---
    // everything it measured and judged (prices, acceptance and calibration, rates, pauses and
    // probes, generation lengths; greedy and sampled apart) as numbers, k_state_format first. Not
    // its settings (set_decodes_again, set_padded, set_settle_steps, set_sampled): the decoder's
    std::vector<double> state() const;
    // that state given back; std::invalid_argument where it is not one of this format (the model
    // is then unchanged)
    void set_state(const std::vector<double> & state);
    // the layout of state(): a field added to the model changes it, and this with it
    static constexpr int32_t k_state_format = 1;

  private:
    struct state_io;
    void state_fields(state_io & io);  // each learned field, in state()'s order
    // exponentially weighted estimates; decay keeps them current as the machine's load changes
    static constexpr double k_decay = 0.97;
    // the acceptance assumed before any draft is judged, and its weight in drafts where few are
    static constexpr double k_prior_acceptance = 0.8;
    static constexpr double k_prior_weight     = 2.0;
    static constexpr double k_padded_weight    = 16.0;  // judged drafts' weight the padded length needs
    bool    decodes_again_ = false;
    int32_t padded_        = 0;
    int32_t settle_        = 0;
    int32_t run_           = 0;  // steps before this one in the current run of drafting (or of plain) steps
    // the size a batch of n_tokens is priced as (its padded size where verification is padded)
    int32_t first_probe_gap() const { return k_first_probe_gap * (1 + settle_); }
    int32_t priced_size(int32_t n_tokens) const {
        return padded_ > 0 && n_tokens >= 2 && n_tokens < padded_ ? padded_ : n_tokens;
    }
    double checkpoint_ms_ = 0.0;
    double draft_token_ms_ = 0.0;  // a draft prompt token (observe_draft_prompt; 0: none)
    // the drafting steps' evidence shows a clear loss (k_clear_loss, after k_min_clear_evidence steps)
    bool clear_loss() const;
    // whether a pause may be the last texts' and not the prices': it follows drafting steps, and drafts kept at
    // k_good_acceptance would pay at the prices measured (priced_excess_ms). What the target keeps
    // differs with the text: on the Qwen2.5-Coder pair (1.5B F16, 0.5B Q4_K_M) on 2 EPYC cores, drafting
    // made 0.8-1.0x plain steps on a chat prompt and 1.3-1.9x on code, and a pause learned on the chat, its probe
    // gaps grown to about 100 steps, would leave the draft out of a code reply after it. Such a pause is
    // probed as a new pause is in each new generation, k_text_probes times (after the first gap, then twice
    // that), the gaps after them as they were; the first of them is judged on its own steps, and where it pays
    // the text's drafting steps are as few as a new decoder's: only a clear loss pauses them before
    // k_min_evidence (observe, draft_this_step, observe_step, draft_pays). One probe is not enough: at the code
    // reply's acceptance (0.9) one probe of three drafts in five keeps fewer than two, which does not pay there.
    // A new text the model drafts in from its first step is judged the same way: its first drafting step weighs
    // as much as all before it (a probe's weight), and only a clear loss pauses before k_min_evidence of them.
    // At the decay's 33 steps' weight, a chat reply at T=0.8 after a code reply drafted at 0.8x plain steps for
    // 40 steps before the code reply's evidence let it pause
    bool text_may_pay() const;
    static constexpr double  k_good_acceptance = 0.9;
    static constexpr int32_t k_lengths         = 8;
    static constexpr int32_t k_min_lengths     = 3;
    std::array<int32_t, k_lengths> gen_lengths_{};
    int32_t                        n_gen_lengths_ = 0;  // generations recorded (the last k_lengths kept)
    // what drafting at k_good_acceptance saves per token, its steps of at most 1 + k_first_batch_drafts
    // tokens (what a new text's first probe and a sit-out's revision weigh a read against)
    double good_saving_per_token() const { return -priced_excess_ms(k_good_acceptance) / (1.0 + k_first_batch_drafts); }
    static constexpr int32_t k_text_probes     = 2;
    // the gap before a new text's next probe: the first gap, doubled for each of them already made
    int32_t text_gap() const { return first_probe_gap() << (k_text_probes - o_.text_probes_); }
    // a probe is over, having cost excess_ms beyond plain steps: the pause's probe costs and count
    void end_probe(double excess_ms) {
        o_.probe_excess_ms_[o_.n_probes_ % 2] = excess_ms;
        o_.n_probes_ += 1;
        o_.probe_acc_ms_ = 0.0;
    }
    // a pause holds until a drafting step ends it; before any drafting step is measured, the pause is
    // only the prediction (draft_pays), asked again at each step
    bool pause_holds() const { return o_.paused_ && o_.drafted_steps_ > 0; }
    double draft_ms_  = 0.0;
    bool   has_draft_ms_ = false;
    double catch_up_ms_  = 0.0;
    bool   has_catch_up_ = false;
    // a steady one-token verification (a plain step), how many were seen, and what a plain step
    // right after a batch costs beyond it
    static constexpr double k_decay_v1 = 0.8;
    double  v1_ms_    = 0.0;
    int32_t n_v1_     = 0;
    double  leave_ms_ = 0.0;
    // weighted least squares of verify ms on batch size (2 tokens and more)
    double sw_ = 0, sk_ = 0, skk_ = 0, sy_ = 0, sky_ = 0;
    // the same sizes' own decayed means (sums and weights), up to k_max_sized tokens: a CPU's
    // matrix kernels change with the batch's size, and a batch's cost with them. A size's mean is
    // shrunk towards the line by k_size_prior observations' weight: a size seen a few times stays
    // near the line (single decodes scatter by 5-10% on a shared machine), one measured steadily
    // (at most 1 / (1 - k_decay) = 33 observations' weight) counts for two thirds
    static constexpr int32_t k_max_sized  = 64;
    static constexpr double  k_size_prior = 16.0;
    std::array<double, k_max_sized + 1> size_ms_{};
    std::array<double, k_max_sized + 1> size_w_{};
    double line_ms(int32_t n_tokens) const;
    // a verification far below its price: what was measured in the conditions that are over
    // starts again (draft_length.cpp)
    void conditions_changed();
    // a drafting step's price at the steady steps' estimates: its catch-up, n_decodes draft decodes
    // and a verification of n_verify tokens (-1 before steady steps have measured them)
    double steady_step_ms(int32_t n_decodes, int32_t n_verify) const;
    // a prompt token's ms (observe_prompt; 0: none), standing in for the line's slope until a batch is seen
    double prompt_token_ms_ = 0;
    // that price where it can stand in for a batch's further tokens (0: it cannot). A prompt of k_min_prompt_price
    // tokens or more costs less per token than the same model's one-token decodes (Qwen2.5-Coder-1.5B Q8_0 on 2
    // EPYC cores: one token 46 ms, eight 162 ms, though two cost 116); one that cost a plain step or more per
    // token ran under other conditions than the plain steps after it (weights read from disk at their first use,
    // a busy spell: the same target in F16 took a 40-token prompt in 4-9 s beside four busy loops, 1 s without),
    // and priced by it a draft that pays would start paused until a probe, up to k_max_probe_gap steps
    double prompt_price() const { return n_v1_ > 0 && prompt_token_ms_ >= v1_ms_ ? 0.0 : prompt_token_ms_; }
    // pausing: the first and the longest gap between probes, and the evidence a pause needs
    static constexpr int32_t k_first_probe_gap = 4;
    static constexpr int32_t k_max_probe_gap   = 128;
    static constexpr int64_t k_min_evidence    = 4;     // drafting steps measured before a pause
    static constexpr int64_t k_min_clear_evidence = 2;  // the same where they made less than
    static constexpr double  k_clear_loss      = 0.5;   // this share of the plain rate
    static constexpr int32_t k_first_batch_drafts = 3;  // drafts in the first batch, before any is priced
    static constexpr double  k_pause_margin    = 0.97;  // pause below 97% of the plain rate
    static constexpr double  k_probe_budget    = 0.01;  // probes cost 1% of the plain steps between them
    static constexpr int32_t k_min_prompt_price = 8;    // prompt tokens that price a batch (fewer: too noisy)
    // what drafting has won so far and the pause it decides, kept apart for greedy and for sampled
    // generations (set_sampled): a draft's confidence means another thing in each (drafting.h), and
    // what the target keeps differs (greedy keeps a draft only where it is the target's argmax, the
    // rejection rule with probability min(1, p/q)), so that one's evidence would misprice the other
    static constexpr int k_bins = 10;
    struct outcomes {
        // calibration curve: acceptance of reached drafts by the draft's confidence, in bins
        std::array<double, k_bins> acc_bin_{};
        std::array<double, k_bins> n_bin_{};
        double acc_all_ = 0, n_all_ = 0;
        double acc_lookup_ = 0, n_lookup_ = 0;
        // tokens and ms over recent steps (the long-run rate)
        double step_tokens_ = 0, step_ms_ = 0;
        // the same over the steps the model drafted in (a probe weighs as much as all before it),
        // their decayed weight, and how many
        double  drafted_tokens_ = 0, drafted_ms_ = 0, drafted_w_ = 0;
        int64_t drafted_steps_  = 0;
        // pausing: plain steps since drafting last paid or was probed, the gap before the next probe
        bool    probing_       = false;
        bool    paused_        = false;  // a step found drafting not paying; a drafting step that pays ends it
        int32_t n_probes_      = 0;      // probes in this pause
        double  probe_excess_ms_[2] = {0, 0};  // the last two probes' cost beyond plain steps
        int32_t skipped_       = 0;
        int32_t probe_gap_     = k_first_probe_gap;
        int32_t probe_left_    = 0;      // steps a probe drafts on for (set_settle_steps)
        bool    probe_fresh_   = false;  // no step of the current probe has counted in the drafting rate yet
        int32_t text_probes_   = 0;      // a new text's probes left at a new pause's gaps (text_may_pay)
        bool    probe_new_text_ = false; // the current probe is a new text's first
        int64_t text_steps_    = k_min_evidence;  // drafting steps measured since such a probe or text_fresh_
        bool    text_fresh_    = false;  // a new text's first drafting step, not paused, is still to count
        double  probe_acc_ms_  = 0;      // a probe's cost beyond plain steps so far, over its steps
        double  drafted_probe_ms_ = 0;   // what the last probe that drafted cost beyond plain steps
        double  read_n_        = 0;      // positions the pause's reads judged (observe_read), and
        double  read_foretold_ = 0;      // the sum of their chances of being kept (both decayed)
        int64_t sat_out_tokens_ = 0;     // tokens of generations sat out since the model last drafted
        // drafting transitions seen before any steady step priced them (tokens, draft decodes after
        // the catch-up, tokens verified): they count in the drafting rate once one has, so that a
        // new decoder on a GPU, whose first two drafting steps are transitions, is not judged by
        // its third and fourth alone (two first drafts rejected there would pause a draft kept at 0.8)
        std::vector<std::array<int32_t, 3>> unpriced_;
    };
    static constexpr std::size_t k_max_unpriced = 8;
    outcomes o_;      // the current generations' kind
    outcomes other_;  // the other kind's
    bool     sampled_ = false;
    bool     reads_   = false;  // set_read_probes
};

}  // namespace specllama
