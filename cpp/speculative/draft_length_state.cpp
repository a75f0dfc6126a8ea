// speculative/draft_length_state.cpp: what the adaptive draft length learned, as a list of numbers
// that a later process gives back (specllama/adaptive_memory.py keeps it in a file per pair,
// machine and settings), so that a new decoder starts from the prices, acceptance and pauses its
// predecessor ended with instead of learning them again in its first generation.
#include "speculative/decoder.h"
#include "speculative/draft_length.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace specllama {

// each field in turn, written to out or read from in (where it refuses what no model of this
// format could have written)
struct draft_length_model::state_io {
    std::vector<double> *       out = nullptr;
    const std::vector<double> * in  = nullptr;
    std::size_t                 at  = 1;  // (after the format)

    double next() {
        if (at >= in->size()) {
            throw std::invalid_argument("the adaptive state ends after " + std::to_string(in->size()) + " numbers");
        }
        const double x = (*in)[at++];
        if (!std::isfinite(x)) {
            throw std::invalid_argument("the adaptive state's number " + std::to_string(at - 1) + " is not finite");
        }
        return x;
    }

    void field(double & x) {
        if (out) {
            out->push_back(x);
        } else {
            x = next();
        }
    }

    // a count or flag: a whole number in [lo, hi] (counts far below what overflows when they grow)
    template <typename T> void count(T & x, double lo = 0.0, double hi = (double) (1 << 30)) {
        if (out) {
            out->push_back((double) x);
            return;
        }
        const double v = next();
        if (v != std::floor(v) || v < lo || v > hi) {
            throw std::invalid_argument("the adaptive state's number " + std::to_string(at - 1) + " (" +
                                        std::to_string(v) + ") is not a whole number in its range");
        }
        x = (T) v;
    }

    void flag(bool & b) {
        int32_t x = b ? 1 : 0;
        count(x, 0.0, 1.0);
        b = x != 0;
    }

    template <std::size_t N> void fields(std::array<double, N> & a) {
        for (double & x : a) {
            field(x);
        }
    }

    template <std::size_t N> void counts(std::array<int32_t, N> & a) {
        for (int32_t & x : a) {
            count(x);
        }
    }
};

void draft_length_model::state_fields(state_io & io) {
    for (double * x : { &checkpoint_ms_, &draft_token_ms_, &draft_ms_, &catch_up_ms_, &v1_ms_, &leave_ms_, &sw_, &sk_,
                        &skk_, &sy_, &sky_, &prompt_token_ms_ }) {
        io.field(*x);
    }
    io.fields(size_ms_);
    io.fields(size_w_);
    io.counts(gen_lengths_);
    io.count(n_gen_lengths_);
    io.count(n_v1_);
    io.count(run_, -1.0);  // (-1 after set_padded; a generation's first step starts it again)
    io.flag(has_draft_ms_);
    io.flag(has_catch_up_);
    // greedy generations' outcomes, then sampled ones' (o_ is the current kind's)
    for (outcomes * k : { sampled_ ? &other_ : &o_, sampled_ ? &o_ : &other_ }) {
        outcomes & o = *k;
        io.fields(o.acc_bin_);
        io.fields(o.n_bin_);
        for (double * x : { &o.acc_all_, &o.n_all_, &o.acc_lookup_, &o.n_lookup_, &o.step_tokens_, &o.step_ms_,
                            &o.drafted_tokens_, &o.drafted_ms_, &o.drafted_w_, &o.probe_acc_ms_,
                            &o.probe_excess_ms_[0], &o.probe_excess_ms_[1] }) {
            io.field(*x);
        }
        io.count(o.drafted_steps_);
        io.count(o.text_steps_);
        io.count(o.sat_out_tokens_);
        for (int32_t * n : { &o.n_probes_, &o.skipped_, &o.probe_gap_, &o.probe_left_, &o.text_probes_ }) {
            io.count(*n);
        }
        for (bool * b : { &o.probing_, &o.paused_, &o.probe_fresh_, &o.probe_new_text_, &o.text_fresh_ }) {
            io.flag(*b);
        }
        std::size_t n = o.unpriced_.size();
        io.count(n, 0.0, (double) k_max_unpriced);
        o.unpriced_.resize(n);
        for (auto & u : o.unpriced_) {
            io.counts(u);
        }
    }
}

std::vector<double> draft_length_model::state() const {
    std::vector<double> out{ (double) k_state_format };
    state_io            io{ &out, nullptr };
    const_cast<draft_length_model *>(this)->state_fields(io);  // (writing changes nothing)
    return out;
}

void draft_length_model::set_state(const std::vector<double> & state) {
    if (state.empty() || state[0] != k_state_format) {
        const std::string got = state.empty() ? std::string(" (empty)") : " (format " + std::to_string(state[0]) + ")";
        throw std::invalid_argument("not an adaptive state of format " + std::to_string(k_state_format) + got);
    }
    draft_length_model m = *this;  // (read into a copy: a bad state leaves this model as it was)
    state_io           io{ nullptr, &state };
    m.state_fields(io);
    if (io.at != state.size()) {
        throw std::invalid_argument("the adaptive state has " + std::to_string(state.size()) + " numbers where " +
                                    std::to_string(io.at) + " were expected");
    }
    *this = std::move(m);
}

std::vector<double> decoder::adaptive_state() const {
    not_from_own_generation("adaptive_state()");
    std::lock_guard<std::mutex> lock(mutex_);
    return lengths_.state();
}

void decoder::set_adaptive_state(const std::vector<double> & state) {
    not_from_own_generation("set_adaptive_state()");
    std::lock_guard<std::mutex> lock(mutex_);
    lengths_.set_state(state);
}

}  // namespace specllama
