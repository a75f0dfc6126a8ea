// speculative/draft_length.cpp: online cost and acceptance estimates, and the keep-drafting rule.
#include "speculative/draft_length.h"

#include <algorithm>
#include <cmath>

namespace specllama {

// a decode the OS preempted can take many times its cost; on a shared machine such outliers would
// swing the estimates and with them the draft length, so one observation counts for at most
// k_outlier times the current estimate (a lasting slowdown is still followed, step by step).
// Nothing makes a decode faster than its cost, so a verification measured below 1 / k_outlier of
// its price shows that the prices were measured in conditions that are over (a busy spell, as at a
// new decoder's start): all the rule measured in them starts again (conditions_changed). Not by one
// factor: a spell that ends in the middle of a step leaves its draft decodes slow and its
// verification nearly quiet
constexpr double k_outlier = 2.0;

void draft_length_model::conditions_changed() {
    // every price, both models' (the next steps price plain steps, then a first batch, as a new
    // decoder's do), the long-run rate (which prices each further draft's time: one that low drafts
    // on as if a token were worth that much time), and the drafting steps' evidence against plain
    // steps with a pause's probes, measured anew from the next drafting step on, as a new decoder's
    // are; what the target keeps stays. (A draft price left from the spell, several times its cost
    // against plain steps priced anew, kept the drafts at one token, which decodes no draft token to
    // price it again)
    sw_ = sk_ = skk_ = sy_ = sky_ = 0.0;
    size_ms_.fill(0.0);
    size_w_.fill(0.0);
    n_v1_            = 0;
    v1_ms_           = 0.0;
    leave_ms_        = 0.0;
    has_draft_ms_    = false;
    draft_ms_        = 0.0;
    has_catch_up_    = false;
    catch_up_ms_     = 0.0;
    draft_token_ms_  = 0.0;
    prompt_token_ms_ = 0.0;
    for (outcomes * k : { &o_, &other_ }) {
        k->step_tokens_ = k->step_ms_ = 0.0;
        k->drafted_tokens_ = k->drafted_ms_ = k->drafted_w_ = 0.0;
        k->drafted_steps_  = 0;
        k->n_probes_       = 0;
        k->skipped_        = 0;
        k->probe_gap_      = first_probe_gap();
        k->unpriced_.clear();
    }
}

void draft_length_model::observe_draft_decode(double ms) {
    if (has_draft_ms_) {
        ms = std::min(ms, k_outlier * draft_ms_);
    }
    draft_ms_     = has_draft_ms_ ? k_decay * draft_ms_ + (1.0 - k_decay) * ms : ms;
    has_draft_ms_ = true;
}

void draft_length_model::observe_catch_up(double ms) {
    if (has_catch_up_) {
        ms = std::min(ms, k_outlier * std::max(catch_up_ms_, draft_ms_));
    }
    catch_up_ms_  = has_catch_up_ ? k_decay * catch_up_ms_ + (1.0 - k_decay) * ms : ms;
    has_catch_up_ = true;
}

bool draft_length_model::observe_verify(int32_t n_tokens, double ms) {
    n_tokens = priced_size(n_tokens);
    // (a first batch is taken as measured: nothing measured predicts it yet)
    const double predicted = n_tokens == 1 || sw_ > 0.0 ? verify_ms(n_tokens) : 0.0;
    if (n_tokens > 1 && predicted > 0.0 && ms * k_outlier < predicted && !decodes_again_) {
        // (a batch's: not where a rejection decodes the kept tokens again, as a recurrent target's
        // does: a fully kept step costs only its batch there, a rejected one the batch and those
        // decodes). This batch prices nothing either: the change may have come in its middle
        conditions_changed();
        return true;
    }
    if (predicted > 0.0) {
        ms = std::min(ms, k_outlier * predicted);
    }
    if (n_tokens == 1) {
        // a one-token decode has its own estimate: a GPU replays it as one CUDA graph and runs a
        // batch of several tokens as separate kernel launches (H100, default pair: 1.15 ms against
        // 3-4 ms for 2-11 tokens), which no line through the batches would show. The first
        // estimate is the cheaper of the first two (a GPU may still be recording its graph). It
        // follows fast: while drafting pays no steady plain step is seen, and once paused, the
        // pause is judged against what plain steps cost now (a load that came meanwhile, say).
        v1_ms_ = n_v1_ == 0 ? ms : n_v1_ == 1 ? std::min(v1_ms_, ms) : k_decay_v1 * v1_ms_ + (1.0 - k_decay_v1) * ms;
        n_v1_ += 1;
        return false;
    }
    if (n_tokens <= k_max_sized) {
        size_ms_[n_tokens] = k_decay * size_ms_[n_tokens] + ms;
        size_w_[n_tokens]  = k_decay * size_w_[n_tokens] + 1.0;
    }
    const double k = n_tokens;
    sw_  = k_decay * sw_ + 1.0;
    sk_  = k_decay * sk_ + k;
    skk_ = k_decay * skk_ + k * k;
    sy_  = k_decay * sy_ + ms;
    sky_ = k_decay * sky_ + k * ms;
    return false;
}

double draft_length_model::verify_ms(int32_t n_tokens) const {
    n_tokens = priced_size(n_tokens);
    if (n_tokens <= 1 && n_v1_ > 0) {
        return v1_ms_;
    }
    const double line = line_ms(n_tokens);
    if (n_tokens <= k_max_sized && size_w_[n_tokens] > 0.0) {
        return (size_ms_[n_tokens] + k_size_prior * line) / (size_w_[n_tokens] + k_size_prior);
    }
    return line;
}

double draft_length_model::line_ms(int32_t n_tokens) const {
    if (sw_ == 0.0) {
        return n_v1_ > 0 ? v1_ms_ + prompt_price() * (n_tokens - 1) : 0.0;
    }
    const double mean_k = sk_ / sw_;
    const double mean_y = sy_ / sw_;
    const double var_k  = skk_ / sw_ - mean_k * mean_k;
    // slope from the data once batch sizes vary; while they do not, the line from a plain step to
    // them, or the prompt's price per token where that is less (no slope while there is neither):
    // on a GPU a one-token decode replays a recorded graph and a batch runs its kernels one by one,
    // a step up from one token to two that is no price per token (an H200, Qwen2.5-7B's shape:
    // one token 5.9 ms, two 7.1, sixteen 8.2); a batch never costs less than a smaller one
    double b = 0.0;
    if (var_k > 0.25) {
        b = (sky_ / sw_ - mean_k * mean_y) / var_k;
    } else if (n_v1_ > 0 && mean_k > 1.5) {
        b = (mean_y - v1_ms_) / (mean_k - 1.0);
        const double prompt = prompt_price();
        b                   = prompt > 0.0 ? std::min(b, prompt) : b;
    }
    b = std::max(b, 0.0);
    return std::max(mean_y + b * (n_tokens - mean_k), 0.0);
}

namespace {
int conf_bin(double conf, int n_bins) {
    return std::min(n_bins - 1, std::max(0, (int) (conf * n_bins)));
}
}  // namespace

void draft_length_model::observe_acceptance(double conf, bool accepted) {
    const int b = conf_bin(conf, k_bins);
    o_.acc_bin_[b] = k_decay * o_.acc_bin_[b] + (accepted ? 1.0 : 0.0);
    o_.n_bin_[b]   = k_decay * o_.n_bin_[b] + 1.0;
    o_.acc_all_    = k_decay * o_.acc_all_ + (accepted ? 1.0 : 0.0);
    o_.n_all_      = k_decay * o_.n_all_ + 1.0;
}

double draft_length_model::accept_prob(double conf) const {
    // how often drafts this confident were accepted, shrunk towards the overall rate while the
    // bin has few observations
    const int b = conf_bin(conf, k_bins);
    return (o_.acc_bin_[b] + k_prior_weight * acceptance()) / (o_.n_bin_[b] + k_prior_weight);
}

void draft_length_model::observe_step(int32_t tokens, double ms, bool model_drafted, bool steady, double steady_ms) {
    if (model_drafted) {
        o_.sat_out_tokens_ = 0;
    }
    o_.step_tokens_ = k_decay * o_.step_tokens_ + tokens;
    o_.step_ms_     = k_decay * o_.step_ms_ + ms;
    if (model_drafted && o_.probing_ && n_v1_ > 0) {
        o_.probe_acc_ms_ += ms - tokens * v1_ms_;  // (a probe's cost is all of its steps')
    }
    // a transition counts in the drafting steps' rate at its steady price, once there is one
    const bool   counted = model_drafted && (steady || steady_ms >= 0.0);
    const bool   probe_done = o_.probing_ && o_.probe_left_ == 0;
    if (counted) {
        // a probe is the only fresh news while paused: its steps count as much as all the steps before, and a new
        // text's first probe (text_may_pay) is judged on its own: the steps before were other texts'. A new text's
        // first drafting step outside a pause counts as much as all the steps before it
        const bool fresh      = o_.probing_ && o_.probe_fresh_ && o_.drafted_w_ > 0.0;
        const bool text_first = !o_.probing_ && o_.text_fresh_ && o_.drafted_w_ > 0.0;
        double     d          = fresh ? (o_.probe_new_text_ ? 0.0 : 1.0 / o_.drafted_w_)
                                : text_first ? 1.0 / o_.drafted_w_ : k_decay;
        o_.probe_fresh_ = false;
        o_.text_fresh_  = false;
        if ((fresh && o_.probe_new_text_) || text_first) {
            o_.text_steps_ = 0;
        }
        const auto add   = [&](int32_t n_tokens, double step_ms) {
            o_.drafted_tokens_ = d * o_.drafted_tokens_ + n_tokens;
            o_.drafted_ms_     = d * o_.drafted_ms_ + step_ms;
            o_.drafted_w_      = d * o_.drafted_w_ + 1.0;
            o_.drafted_steps_ += 1;
            o_.text_steps_ += 1;
            d                  = k_decay;
        };
        // (the transitions before it that had no steady price, in their order, at the prices now known)
        for (const auto & t : o_.unpriced_) {
            const double t_ms = steady_step_ms(t[1], t[2]);
            if (t_ms >= 0.0) {
                add(t[0], t_ms);
            }
        }
        o_.unpriced_.clear();
        add(tokens, steady ? ms : steady_ms);
    }
    if (model_drafted && probe_done && n_v1_ > 0) {
        o_.drafted_probe_ms_ = o_.probe_acc_ms_;
        end_probe(o_.probe_acc_ms_);
    }
    // a pause ends with a drafting step (a probe's last) after which drafting pays; not with a
    // plain step whose price a busy spell moved (the draft, resumed without a probe's windowed
    // catch-up, would decode every token it sat out)
    if (counted && (probe_done || !o_.probing_) && o_.paused_ && draft_pays()) {
        o_.paused_        = false;
        o_.read_n_        = 0;  // (a later pause's reads judge its own texts)
        o_.read_foretold_ = 0;
    }
    // a pause's probe gaps and probe costs start over once a drafting step outside a probe pays: a
    // probe that ended the pause and a step after it that did not pay are the same pause, whose gaps
    // go on doubling (where each probe is three steps, on a GPU, resumptions of one step each would
    // bring the probes back at the first gap again and again)
    if (counted && !o_.probing_ && !o_.paused_ && draft_pays()) {
        o_.probe_gap_ = first_probe_gap();
        o_.n_probes_  = 0;
    }
    o_.probing_ = false;
}

int32_t draft_length_model::draft_prompt_after(int32_t n_prompt, int32_t n_gen) const {
    // judged on as much evidence as a pause is; where drafting saves nothing per token, whether it
    // runs at all is the pause's to say (its probes see changed prices): a generation that sat out
    // on that ground would measure nothing new, and neither would any after it
    if (n_prompt <= 0 || draft_token_ms_ == 0.0 || n_v1_ == 0 || o_.drafted_steps_ < k_min_evidence) {
        return 0;
    }
    const double saved_per_token = v1_ms_ - o_.drafted_ms_ / o_.drafted_tokens_;
    const double read_ms         = draft_token_ms_ * n_prompt;
    if (saved_per_token <= 0.0 || good_saving_per_token() * (double) o_.sat_out_tokens_ >= read_ms) {
        return 0;
    }
    if (saved_per_token * n_gen <= read_ms) {
        return n_gen + 1;
    }
    const int32_t typical = typical_length();
    if (typical >= 0 && saved_per_token * typical < read_ms) {
        return std::min(n_gen, (int32_t) std::ceil(read_ms / saved_per_token));
    }
    return 0;
}

void draft_length_model::observe_generation(int32_t n_tokens) {
    gen_lengths_[n_gen_lengths_ % k_lengths] = n_tokens;
    n_gen_lengths_ += 1;
}

int32_t draft_length_model::typical_length() const {
    const int32_t n = std::min(n_gen_lengths_, k_lengths);
    if (n < k_min_lengths) {
        return -1;
    }
    std::array<int32_t, k_lengths> sorted = gen_lengths_;
    std::sort(sorted.begin(), sorted.begin() + n);
    return sorted[n / 2];
}

bool draft_length_model::keep_going(int32_t n, double p_reach, int32_t n_max) const {
    // the next tokens' confidence is not known before they are drafted: price them at the overall rate
    return keep_going_p(n, p_reach, acceptance(), true, n_max);
}

bool draft_length_model::keep_going_p(int32_t n, double p_reach, double p_next, bool draft_cost,
                                      int32_t n_max) const {
    if (sw_ == 0.0 || o_.step_ms_ == 0.0 || (draft_cost && !has_draft_ms_)) {
        // no costs or steps measured yet: draft a short batch once, to price a batch against a
        // plain step. Short, since what a batch costs per token is not known before: a little on
        // a transformer, nearly a whole decode on a recurrent model (Mamba-130M's shape on the
        // 2-core CPU: one token 7 ms, four 21 ms), where a first batch of 10 drafts made the first
        // 128 tokens 1.4 times slower than plain decoding (benchmarks/recurrent_bench.py)
        if (n >= k_first_batch_drafts) {
            return false;
        }
        // and shorter where a batch's further tokens are priced already (by a batch, or by the
        // prompt): drafting on must pay at that price, the draft decodes counted at nothing while
        // none is measured
        // (and where the target decodes kept tokens again after a rejection, the chance that this
        // token is the first rejected one times the restore and that decode: a verified batch
        // prices them from then on)
        if (o_.step_ms_ > 0.0 && n_v1_ > 0 && (sw_ > 0.0 || prompt_price() > 0.0)) {
            const double again =
                decodes_again_ && sw_ == 0.0 ? p_reach * (1.0 - p_next) * (checkpoint_ms_ + verify_ms(n + 1)) : 0.0;
            const double cost_more = (draft_cost && has_draft_ms_ ? draft_ms_ : 0.0) +
                                     (verify_ms(n + 2) - verify_ms(n + 1)) + (n == 0 ? leave_ms() : 0.0) + again;
            return p_reach * p_next > rate() * cost_more;
        }
        return true;
    }
    // drafting m more tokens costs m draft decodes (none for lookup) and m more verified positions
    // (the first one also turns a plain step into a batch, and the next plain step pays for that),
    // and adds the chance that each of them is accepted; worth it while, for some m, that beats
    // the long-run rate
    const double each  = draft_cost ? draft_ms_ : 0.0;
    const double fixed = verify_ms(n + 1) - (n == 0 ? leave_ms() : 0.0);
    const double rate_ = rate();
    const int32_t m_max = std::max(1, std::min(n_max - n, k_max_sized - 1 - n));
    double       gain  = 0.0, p = p_reach;
    for (int32_t m = 1; m <= m_max; ++m) {
        p *= p_next;
        gain += p;
        if (gain > rate_ * (m * each + verify_ms(n + 1 + m) - fixed)) {
            return true;
        }
    }
    return false;
}

bool draft_length_model::clear_loss() const {
    return knows_plain_step() && o_.drafted_steps_ >= k_min_clear_evidence &&
           o_.drafted_tokens_ * v1_ms_ <= k_clear_loss * o_.drafted_ms_;
}

double draft_length_model::priced_excess_ms(double p) const {
    // the draft's decodes as measured; before any is, at its prompt price per token (a one-token
    // decode costs at least that), or at nothing where that is not measured either
    const double each  = has_draft_ms_ ? draft_ms_ : draft_token_ms_;
    const double first = has_catch_up_ ? catch_up_ms_ : each;
    const double more  = each;
    // (once a batch is verified, its measured price holds the checkpoint, restore and decode again
    // as they happened)
    const bool again_priced = decodes_again_ && sw_ == 0.0;
    double     tokens = 1.0, p_reach = 1.0, again = 0.0, best = 0.0;
    for (int32_t n = 1; n <= k_first_batch_drafts; ++n) {
        // the n-th draft rejected: the restore, and the n tokens before it decoded again
        again += p_reach * (1.0 - p) * (checkpoint_ms_ + verify_ms(n));
        p_reach *= p;
        tokens += p_reach;
        const double cost   = first + (n - 1) * more + verify_ms(n + 1) + (again_priced ? checkpoint_ms_ + again : 0.0);
        const double excess = cost - tokens * v1_ms_;
        best                = n == 1 ? excess : std::min(best, excess);
    }
    return best;
}

bool draft_length_model::text_may_pay() const {
    // (a kind judged by reads alone, once one has said its drafts do not pay, as one that drafted and paused)
    const bool judged = o_.drafted_steps_ >= k_min_clear_evidence || (judged_by_reads() && o_.read_n_ > 0);
    return judged && paused() && priced_excess_ms(k_good_acceptance) < 0.0;
}

int32_t draft_length_model::probe_window(int32_t n_behind, int32_t n_left) const {
    if (!o_.probing_ || !o_.probe_new_text_ || n_behind <= k_probe_window || draft_token_ms_ <= 0.0) {
        return k_probe_window;
    }
    // (what drafting at that acceptance saves over the tokens left, against the read beyond the window)
    const int32_t typical = typical_length();
    const int32_t horizon = typical >= 0 ? std::min(n_left, typical) : n_left;
    return good_saving_per_token() * horizon > draft_token_ms_ * (n_behind - k_probe_window) ? 0 : k_probe_window;
}

double draft_length_model::steady_step_ms(int32_t n_decodes, int32_t n_verify) const {
    if (!has_catch_up_ || (!has_draft_ms_ && n_decodes > 0) || sw_ <= 0.0) {
        return -1.0;
    }
    return catch_up_ms_ + n_decodes * draft_ms_ + verify_ms(n_verify);
}

int32_t draft_length_model::padded_length(int32_t n_max) const {
    if (n_max <= 1 || !knows_draft_prices()) {
        return std::min(n_max, k_first_batch_drafts);
    }
    const double verify = verify_ms(padded_ > 0 ? padded_ : n_max + 1);
    const double p      = acceptance();
    double       tokens = 1.0, p_reach = 1.0, best_rate = 0.0;
    int32_t      best   = n_max;
    for (int32_t k = 1; k <= n_max; ++k) {
        p_reach *= p;
        tokens += p_reach;
        const double rate = tokens / (catch_up_ms_ + (k - 1) * draft_ms_ + verify);
        if (rate > best_rate) {
            best_rate = rate;
            best      = k;
        }
    }
    return best;
}

bool draft_length_model::pays_at_prices() const {
    return !knows_plain_step() || priced_excess_ms() < 0.0;
}

bool draft_length_model::draft_pays() const {
    if (!knows_plain_step()) {
        return true;  // too little measured yet to stop drafting
    }
    if (o_.drafted_steps_ == 0) {
        return pays_at_prices();
    }
    if (o_.drafted_steps_ < k_min_clear_evidence) {
        // one drafting step is too little to stop on (a first batch's catch-up and verification
        // are not yet steady), and too little to end a pause the prices predicted: that one
        // lasts until two probes have measured drafting
        return o_.n_probes_ == 0;
    }
    if (o_.drafted_steps_ < k_min_evidence || (o_.text_steps_ < k_min_evidence && !o_.paused_)) {
        // (a new text's drafting steps since its first probe paid are as few as a new decoder's)
        // a clear loss stops drafting sooner: where a drafting step costs several plain steps (a
        // recurrent target on a GPU: a rejected draft's restore and decode again take 4-8 plain
        // steps), each further step of evidence costs more than a needless pause does (a probe
        // takes drafting up again)
        return !clear_loss();
    }
    // the tokens per ms the model's steps made (their draft decodes, adaptive stops and rejections
    // as they happened) against a plain step's one token per steady one-token verification, with
    // a small margin: within 3% of plain steps the loop keeps drafting rather than pause on noise
    // (or because the machine got busier since plain steps were last priced, which only a pause
    // shows); below that it pauses, so that a draft that does not pay costs at most about 3%
    return o_.drafted_tokens_ * v1_ms_ > k_pause_margin * o_.drafted_ms_;
}

int32_t draft_length_model::probe_gap() const {
    // a probe's cost beyond the plain steps that would have made its tokens: the lesser of the
    // pause's last two probes (one probe may be unlucky: a draft rejected at its first token; and
    // the steps before the pause may have been slowed by a busy spell that is over)
    if (v1_ms_ <= 0.0) {
        return o_.probe_gap_;
    }
    double excess = 0.0, most = 1e6;
    if (judged_by_reads()) {
        // (its probes are reads: the last one's cost, once one is measured)
        excess = o_.n_probes_ > 0 ? o_.probe_excess_ms_[(o_.n_probes_ - 1) % 2] : 0.0;
        most   = k_max_probe_gap;
    } else if (o_.n_probes_ >= 2) {
        excess = std::min(o_.probe_excess_ms_[0], o_.probe_excess_ms_[1]);
    } else if (o_.drafted_steps_ < k_min_clear_evidence) {
        // a pause the prices predicted: what they predict a probe costs (its batch, and the
        // draft's catch-up on the tokens it sat out), for a gap no longer than the doubling gaps
        // reach (two probes then measure it)
        excess = priced_excess_ms() + k_probe_window * draft_token_ms_;
        most   = k_max_probe_gap;
    } else if (clear_loss()) {
        // before two probes: the mean of the drafting steps that showed the clear loss, for a gap
        // no longer than the doubling gaps reach (a spell that slowed those steps alone and is over
        // keeps drafting paused for at most that many steps)
        excess = (o_.drafted_ms_ - o_.drafted_tokens_ * v1_ms_) / o_.drafted_w_;
        most   = k_max_probe_gap;
    } else {
        return o_.probe_gap_;
    }
    const double steps = excess / (k_probe_budget * v1_ms_);
    return steps > o_.probe_gap_ ? (int32_t) std::min(std::ceil(steps), most) : o_.probe_gap_;
}

bool draft_length_model::observe_read(int32_t n, double foretold, double ms, int32_t n_left) {
    const bool first = judged_by_reads();
    if (first && n > 0) {  // (what the kind's acceptance rests on until it drafts)
        const double d = std::pow(k_decay, n);
        o_.acc_all_    = d * o_.acc_all_ + std::max(0.0, std::min((double) n, foretold));
        o_.n_all_      = d * o_.n_all_ + n;
    }
    if (o_.probe_new_text_) {
        o_.read_n_        = 0;  // (a new text's reads are judged on their own)
        o_.read_foretold_ = 0;
    }
    // (earlier reads weigh less by k_decay per position read since: the text may have turned)
    const double d    = std::pow(k_decay, std::max(0, n));
    o_.read_n_        = d * o_.read_n_ + std::max(0, n);
    o_.read_foretold_ = d * o_.read_foretold_ + std::max(0.0, std::min((double) n, foretold));
    // (what drafting at that acceptance saves per token, its steps of at most 1 + k_first_batch_drafts tokens,
    // over the tokens left, against what the pause's last drafting probe cost beyond plain steps; before the kind
    // has drafted, at that acceptance less one standard error: its first drafting steps are all transitions, and
    // at 0.6 a read of 11 tokens foretells 8 or more, 0.7 or more with the prior, three times in ten)
    double p = read_acceptance();
    if (first) {
        p -= std::sqrt(p * (1.0 - p) / (o_.read_n_ + k_prior_weight));
    }
    const double saving = -priced_excess_ms(p) / (1.0 + k_first_batch_drafts);
    if (saving > 0.0 && saving * std::max(0, n_left) > o_.drafted_probe_ms_) {
        o_.probe_acc_ms_ += ms;
        return true;
    }
    o_.probing_     = false;
    o_.probe_left_  = 0;
    o_.probe_fresh_ = false;
    end_probe(ms);  // (it made no token: all of it is beyond plain steps)
    return false;
}

void draft_length_model::observe_prompt(int32_t n_tokens, double ms) {
    if (n_tokens >= k_min_prompt_price && ms > 0.0) {
        prompt_token_ms_ = ms / n_tokens;
    }
}

void draft_length_model::observe_draft_prompt(int32_t n_tokens, double ms) {
    if (n_tokens >= k_min_prompt_price && ms > 0.0) {
        draft_token_ms_ = ms / n_tokens;
    }
}

bool draft_length_model::draft_this_step() {
    if (o_.probe_left_ > 0) {  // a probe drafts on until a steady step (set_settle_steps)
        --o_.probe_left_;
        o_.probing_ = true;
        return true;
    }
    o_.probing_ = false;
    // (a pause the prediction made ends where the prices measured since say drafting pays: plain
    // steps priced in a busy spell that has passed, say)
    if (!judged_by_reads() && !pause_holds() && draft_pays()) {
        o_.skipped_     = 0;
        o_.text_probes_ = 0;  // (a later pause in this text is a new pause, not a new text's)
        return true;
    }
    o_.paused_ = true;
    // (a new text's first probes come at the gaps of a new pause, unless the usual gap is shorter)
    if (++o_.skipped_ >= (o_.text_probes_ > 0 ? std::min(probe_gap(), text_gap()) : probe_gap())) {
        o_.probe_new_text_ = o_.text_probes_ == k_text_probes;
        o_.text_probes_    = std::max(0, o_.text_probes_ - 1);
        o_.probe_gap_    = std::min(2 * o_.probe_gap_, k_max_probe_gap);
        o_.skipped_      = 0;
        o_.probing_      = true;
        o_.probe_left_   = settle_;
        o_.probe_fresh_  = true;
        o_.probe_acc_ms_ = 0.0;
        return true;
    }
    return false;
}

void draft_length_model::observe_leave(double excess_ms) {
    leave_ms_ = k_decay * leave_ms_ + (1.0 - k_decay) * excess_ms;
}

void draft_length_model::observe_lookup(bool accepted) {
    constexpr double decay = 0.9;  // quoting comes in bursts: follow them quickly
    o_.acc_lookup_ = decay * o_.acc_lookup_ + (accepted ? 1.0 : 0.0);
    o_.n_lookup_   = decay * o_.n_lookup_ + 1.0;
}

bool draft_length_model::keep_drafting(int32_t n_done, float conf, double & p_reach, int32_t n_max) const {
    p_reach *= accept_prob(conf);
    return keep_going(n_done, p_reach, n_max);
}

void draft_length_model::observe(const step_record & s) {
    // the steps before this one in the run of batches (or of plain steps) it belongs to: the
    // first settle_ of a run are transitions, whose costs price nothing (set_settle_steps)
    const bool batch  = s.n > 0;
    run_              = s.prev_n >= 0 && (s.prev_n > 0) == batch ? run_ + 1 : 0;
    if (s.prev_n < 0) {
        o_.probe_left_ = 0;  // (a generation's first step: a probe the last one cut short does not go on)
        // a new text: the pause's next k_text_probes probes come at a new pause's gaps
        o_.text_probes_ = text_may_pay() ? k_text_probes : 0;
        if (o_.text_probes_ > 0) {
            o_.skipped_ = 0;
        }
        // (and one drafting from its first step is judged on its own steps from the first of them)
        o_.text_fresh_ = o_.drafted_steps_ > 0 && !o_.paused_;
    }
    if (s.n_prompt > 0) {
        return;  // (a plain step whose time is the prompt's: nothing to price, no draft to judge)
    }
    const bool    steady    = run_ >= settle_;
    const int32_t n_decodes = s.n_model == 0 ? 0 : s.n_decodes >= 0 ? s.n_decodes : s.n_model - 1;
    const int32_t n_verify  = s.n_verified > 0 ? s.n_verified : s.n + 1;
    // a transition's steady price: its catch-up, draft decodes and verification at the estimates
    // from steady steps (none before those are measured: it waits in unpriced_ until they are)
    const double step_price = s.n_model > 0 ? steady_step_ms(n_decodes, n_verify) : -1.0;
    const double steady_ms  = steady ? -1.0 : step_price;
    // what a steady drafting step's work costs at the prices measured before it (-1: not known; a
    // transition's or a read of what the draft sat out is not a steady step's): a step the OS
    // preempted counts in the rates for at most k_outlier times that, as each price does. Counted
    // whole, one verification of several seconds early in a generation made the drafting steps look
    // like a clear loss and paused a draft whose every token the target kept (tests/test_adaptive.py)
    const double priced_ms = steady && !s.resumed ? step_price : -1.0;
    if (!steady && s.n_model > 0 && steady_ms < 0.0) {
        if (o_.unpriced_.size() == k_max_unpriced) {
            o_.unpriced_.erase(o_.unpriced_.begin());
        }
        o_.unpriced_.push_back({ s.n_accepted + 1, n_decodes, n_verify });
    }
    // the catch-up decode (one token after a rejection, two after a fully accepted step) is paid
    // once per step whatever the draft length; the other n_model - 1 decodes are one token each,
    // and so are the catch-up's where it decoded token by token. A catch-up on what the draft sat
    // out (up to k_probe_window tokens, or a prompt) is not a step's: taken as the catch-up's price
    // it would price every step after it as that one, and a pause's next probe by it
    if (s.n_model > 0 && steady) {
        if (!s.resumed) {
            observe_catch_up(s.catch_up_ms);
        }
        if (n_decodes > 0) {
            observe_draft_decode((s.draft_ms - s.catch_up_ms) / n_decodes);
        }
        if (s.n_catch_up > 0) {
            observe_draft_decode(s.catch_up_ms / s.n_catch_up);
        }
    }
    // a one-token verification is priced only when steady (after another, or after as many as
    // settle_); right after a batch, what it costs beyond that is the price of having left plain
    // steps
    bool changed = false;
    if (batch) {
        if (steady) {
            changed = observe_verify(n_verify, s.verify_ms);
        }
    } else if (run_ >= std::max(1, settle_)) {
        observe_verify(1, s.verify_ms);
    } else if (run_ == 0 && s.prev_n > 0 && knows_plain_step()) {
        observe_leave(s.verify_ms - verify_ms(1));
    }
    // every draft the target looked at: all accepted ones and the first rejected one
    for (int32_t i = 0; i <= s.n_accepted && i < s.n; ++i) {
        if (i < (int32_t) s.forced.size() && s.forced[i]) {
            continue;  // (a grammar's forced draft says nothing of the model's confidence or of lookup's)
        }
        if (i < s.n_model) {
            observe_acceptance(s.conf[i], i < s.n_accepted);
        } else {
            observe_lookup(i < s.n_accepted);
        }
    }
    if (s.probe >= 0 && s.n_accepted == s.n) {
        observe_lookup(s.probe == 1);
    }
    // (the step that showed the change was measured partly before it, and a step the request's prediction
    // drafted in is the request's: neither counts in a rate)
    if (changed || s.given) {
        return;
    }
    // a step that resumed after a pause counts in the drafting steps' rate with a step's catch-up in place of
    // its read of what the draft sat out (the price of coming back, paid once, not of drafting on: on the
    // Qwen2.5-Coder pair on 2 EPYC cores a probe's read of 32 tokens took 120-200 ms, 2-3 plain steps, and a
    // probe of a code reply, where drafting made 1.4-2x plain steps, kept all three drafts and made 0.8x with
    // it); the long-run rate and what the probe cost keep all of it
    const bool resumed = s.resumed && steady && s.n_model > 0 && has_catch_up_;
    const double ms    = s.draft_ms + s.verify_ms;
    observe_step(s.n_accepted + 1, priced_ms > 0.0 ? std::min(ms, k_outlier * priced_ms) : ms,
                 s.n_model > 0, steady && !resumed,
                 resumed ? s.draft_ms - s.catch_up_ms + catch_up_ms_ + s.verify_ms : steady_ms);
}

}  // namespace specllama
