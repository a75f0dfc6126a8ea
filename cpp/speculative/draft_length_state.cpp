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

namespace {
struct state_writer {
    std::vector<double> v;

    void put(double x) { v.push_back(x); }

    template <typename T, std::size_t N> void put(const std::array<T, N> & a) {
        for (const T & x : a) {
            v.push_back((double) x);
        }
    }
};

// reads what state_writer wrote, refusing what no model of this format could have written
struct state_reader {
    const std::vector<double> & v;
    std::size_t                 at = 0;

    double next() {
        if (at >= v.size()) {
            throw std::invalid_argument("the adaptive state ends after " + std::to_string(v.size()) + " numbers");
        }
        const double x = v[at++];
        if (!std::isfinite(x)) {
            throw std::invalid_argument("the adaptive state's number " + std::to_string(at - 1) + " is not finite");
        }
        return x;
    }

    double get(double & out) { return out = next(); }

    // a count or flag: a whole number in [lo, hi] (counts far below what overflows when they grow)
    template <typename T> void get(T & out, double lo = 0.0, double hi = (double) (1 << 30)) {
        const double x = next();
        if (x != std::floor(x) || x < lo || x > hi) {
            throw std::invalid_argument("the adaptive state's number " + std::to_string(at - 1) + " (" +
                                        std::to_string(x) + ") is not a whole number in its range");
        }
        out = (T) x;
    }

    template <std::size_t N> void get(std::array<double, N> & a) {
        for (double & x : a) {
            get(x);
        }
    }

    template <std::size_t N> void get(std::array<int32_t, N> & a) {
        for (int32_t & x : a) {
            get(x);
        }
    }
};

// one kind's outcomes, in one order for writing and reading (W: state_writer or state_reader)
template <typename W, typename O> void each_outcome(W & w, O & o) {
    w.put_or_get(o.acc_bin_);
    w.put_or_get(o.n_bin_);
    for (auto * x : { &o.acc_all_, &o.n_all_, &o.acc_lookup_, &o.n_lookup_, &o.step_tokens_, &o.step_ms_,
                      &o.drafted_tokens_, &o.drafted_ms_, &o.drafted_w_, &o.probe_acc_ms_,
                      &o.probe_excess_ms_[0], &o.probe_excess_ms_[1] }) {
        w.put_or_get(*x);
    }
    w.put_or_get_count(o.drafted_steps_);
    w.put_or_get_count(o.text_steps_);
    w.put_or_get_count(o.sat_out_tokens_);
    for (auto * n : { &o.n_probes_, &o.skipped_, &o.probe_gap_, &o.probe_left_, &o.text_probes_ }) {
        w.put_or_get_count(*n);
    }
    for (auto * b : { &o.probing_, &o.paused_, &o.probe_fresh_, &o.probe_new_text_, &o.text_fresh_ }) {
        w.put_or_get_flag(*b);
    }
}
}  // namespace

// the two directions of each_outcome and of the model's own fields
struct draft_length_model::state_io {
    state_writer * out = nullptr;
    state_reader * in  = nullptr;

    template <typename T> void put_or_get(T & x) {
        if (out) {
            out->put(x);
        } else {
            in->get(x);
        }
    }

    template <typename T> void put_or_get_count(T & x, double lo = 0.0) {
        if (out) {
            out->put((double) x);
        } else {
            in->get(x, lo);
        }
    }

    void put_or_get_flag(bool & b) {
        if (out) {
            out->put(b ? 1.0 : 0.0);
        } else {
            int32_t x = 0;
            in->get(x, 0.0, 1.0);
            b = x != 0;
        }
    }
};

void draft_length_model::state_fields(state_io & io) {
    for (auto * x : { &checkpoint_ms_, &draft_token_ms_, &draft_ms_, &catch_up_ms_, &v1_ms_, &leave_ms_, &sw_, &sk_,
                      &skk_, &sy_, &sky_, &prompt_token_ms_ }) {
        io.put_or_get(*x);
    }
    io.put_or_get(size_ms_);
    io.put_or_get(size_w_);
    io.put_or_get(gen_lengths_);
    io.put_or_get_count(n_gen_lengths_);
    io.put_or_get_count(n_v1_);
    io.put_or_get_count(run_, -1.0);  // (-1 after set_padded; a generation's first step starts it again)
    io.put_or_get_flag(has_draft_ms_);
    io.put_or_get_flag(has_catch_up_);
    // greedy generations' outcomes, then sampled ones' (o_ is the current kind's)
    for (outcomes * k : { sampled_ ? &other_ : &o_, sampled_ ? &o_ : &other_ }) {
        each_outcome(io, *k);
        std::size_t n = k->unpriced_.size();
        io.put_or_get_count(n);
        if (n > k_max_unpriced) {
            throw std::invalid_argument("the adaptive state holds more unpriced steps than a model keeps");
        }
        k->unpriced_.resize(n);
        for (auto & u : k->unpriced_) {
            for (int32_t & x : u) {
                io.put_or_get_count(x);
            }
        }
    }
}

std::vector<double> draft_length_model::state() const {
    state_writer w;
    w.put(k_state_format);
    state_io io{ &w, nullptr };
    const_cast<draft_length_model *>(this)->state_fields(io);  // (writing changes nothing)
    return w.v;
}

void draft_length_model::set_state(const std::vector<double> & state) {
    if (state.empty() || state[0] != k_state_format) {
        const std::string got = state.empty() ? std::string(" (empty)") : " (format " + std::to_string(state[0]) + ")";
        throw std::invalid_argument("not an adaptive state of format " + std::to_string(k_state_format) + got);
    }
    state_reader       r{ state, 1 };
    draft_length_model m = *this;  // (read into a copy: a bad state leaves this model as it was)
    state_io           io{ nullptr, &r };
    m.state_fields(io);
    if (r.at != state.size()) {
        throw std::invalid_argument("the adaptive state has " + std::to_string(state.size()) + " numbers where " +
                                    std::to_string(r.at) + " were expected");
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
