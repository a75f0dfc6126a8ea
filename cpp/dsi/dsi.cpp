// dsi/dsi.cpp: the DSI orchestrator. One mutex guards the shared state (the text with its drafts,
// the tasks, the results); the drafter and the servers compute outside it.
#include "dsi/dsi.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace specllama {

namespace {

using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

struct task {
    int32_t                     first = 0, last = 0;  // predictions for indices first..last
    uint64_t                    epoch = 0;            // the restart it was built in
    std::vector<llama_token>    seq;                  // the text and drafts before index last
    int32_t                     n_verified = 0;       // of which verified text
    std::atomic<bool>           cancel{false};
    bool                        ok = false;
    std::vector<dsi_prediction> preds;
    double                      ms = 0;
};

class orchestrator {
  public:
    orchestrator(dsi_drafter & drafter, const std::vector<dsi_server *> & servers, std::vector<llama_token> seq,
                 int32_t last_index, const sampling_params & sampling, uint64_t seed, const dsi_params & params,
                 const dsi_callbacks & cb, int32_t n_vocab, const dsi_prediction * first)
        : drafter_(drafter), servers_(servers), prompt_(seq), spec_(std::move(seq)), last_index_(last_index),
          sampling_(sampling), params_(params), cb_(cb), n_vocab_(n_vocab), rng_(seed),
          seed_draft_(seed ^ 0x9e3779b97f4a7c15ULL) {
        L_          = (int32_t) spec_.size();
        base_       = L_;
        next_first_ = L_;
        max_ahead_  = params.max_ahead > 0 ? params.max_ahead : params.lookahead * ((int32_t) servers.size() + 1);
        const size_t n_idx = (size_t) std::max(0, last_index_ - base_ + 1);
        have_.assign(n_idx, 0);
        preds_.resize(n_idx);
        qs_.resize(spec_.size());
        assigned_.resize(servers.size());
        ready_.resize(servers.size());
        st_.n_server_tasks.assign(servers.size(), 0);
        for (size_t i = 0; i < servers.size(); ++i) {
            ready_[i] = !servers[i]->reads_prompt();
        }
        if (first != nullptr && !have_.empty()) {
            have_[0]    = 1;
            preds_[0]   = *first;
            next_first_ = L_ + 1;
        }
    }

    ~orchestrator() { shutdown(); }

    dsi_stats run() {
        const auto t0 = clock_type::now();
        threads_.emplace_back([this] { drafter_loop(); });
        for (size_t s = 0; s < servers_.size(); ++s) {
            threads_.emplace_back([this, s] { server_loop(s); });
        }
        std::unique_lock<std::mutex> lock(m_);
        while (true) {
            collect();
            const int32_t before = L_;
            commit();
            if (stopped_ || L_ > last_index_) {
                break;
            }
            launch();
            if (cb_.poll || (cb_.on_round && L_ > before)) {
                const int32_t n_emitted = L_ - base_, n_checked = st_.n_checked, n_accepted = st_.n_accepted;
                lock.unlock();
                const bool stop = cb_.on_round && L_ > before && cb_.on_round(n_emitted, n_checked, n_accepted);
                if (cb_.poll) {
                    cb_.poll();
                }
                lock.lock();
                if (stop) {
                    stopped_ = true;
                    break;
                }
            }
            seen_size_  = (int32_t) spec_.size();
            seen_ready_ = n_ready_;
            cv_.wait_for(lock, std::chrono::milliseconds(5), [this] {
                return error_ || !finished_.empty() || (int32_t) spec_.size() != seen_size_ || n_ready_ != seen_ready_;
            });
            if (error_) {
                std::rethrow_exception(error_);  // the destructor stops the threads
            }
        }
        lock.unlock();
        shutdown();
        collect_after_shutdown();
        st_.t_total_ms = ms_between(t0, clock_type::now());
        return st_;
    }

  private:
    // --- drafter thread -------------------------------------------------------------------------
    bool can_draft() const {
        const int32_t n = (int32_t) spec_.size();
        if (n >= last_index_ || n - L_ >= max_ahead_) {
            return false;
        }
        if (n > L_ && cb_.is_end && cb_.is_end(spec_.back())) {
            return false;  // nothing follows a drafted end token until it is judged
        }
        if (!params_.overlap) {
            return busy_ == 0 && n - L_ < params_.lookahead;
        }
        return true;
    }

    void drafter_loop() {
        rng_t                    rng(seed_draft_);
        std::vector<llama_token> snapshot;
        token_dist               q;
        const auto               t0     = clock_type::now();
        const int32_t            n_read = read_in_thread([&] { return drafter_.read_prompt(prompt_, stop_read_); });
        if (n_read < 0) {
            return;
        }
        std::unique_lock<std::mutex> lock(m_);
        st_.n_draft_prompt    = n_read;
        st_.t_draft_prompt_ms = n_read > 0 ? ms_between(t0, clock_type::now()) : 0.0;
        while (true) {
            if (!stop_threads_ && !can_draft()) {
                const auto t = clock_type::now();
                cv_.wait(lock, [this] { return stop_threads_ || can_draft(); });
                st_.t_draft_idle_ms += ms_between(t, clock_type::now());
            }
            if (stop_threads_) {
                return;
            }
            snapshot         = spec_;
            const int32_t  v = L_;
            const uint64_t e = epoch_;
            draft_cancel_    = false;
            lock.unlock();
            const auto  t   = clock_type::now();
            llama_token tok = -1;
            bool        ok  = false;
            try {
                ok = drafter_.propose(snapshot, v, sampling_, rng, draft_cancel_, tok, q);
            } catch (...) {
                lock.lock();
                error_ = std::current_exception();
                cv_.notify_all();
                return;
            }
            const double ms = ms_between(t, clock_type::now());
            lock.lock();
            st_.t_draft_ms += ms;
            st_.n_drafted += 1;
            if (ok && e == epoch_ && spec_.size() == snapshot.size()) {
                spec_.push_back(tok);
                qs_.resize(spec_.size());
                std::swap(qs_.back(), q);
                cv_.notify_all();
            }
        }
    }

    // a drafter's or a server's read of the prompt in its thread (read_prompt): the tokens it read,
    // or -1 where it threw (the calling thread then rethrows)
    template <class Read> int32_t read_in_thread(Read && read) {
        try {
            return read();
        } catch (...) {
            std::lock_guard<std::mutex> lock(m_);
            error_ = std::current_exception();
            cv_.notify_all();
            return -1;
        }
    }

    // --- server threads -------------------------------------------------------------------------
    void server_loop(size_t s) {
        if (!ready_[s]) {  // (set before the threads started; only this thread changes it)
            const int32_t n_read = read_in_thread([&] { return servers_[s]->read_prompt(prompt_, stop_read_); });
            if (n_read < 0) {
                return;
            }
            std::lock_guard<std::mutex> lock(m_);
            st_.n_server_prompt += n_read;
            ready_[s] = 1;
            n_ready_ += 1;
            cv_.notify_all();
        }
        std::unique_lock<std::mutex> lock(m_);
        while (true) {
            cv_.wait(lock, [&] { return stop_threads_ || assigned_[s] != nullptr; });
            if (assigned_[s] == nullptr) {
                return;
            }
            std::shared_ptr<task> t = assigned_[s];
            lock.unlock();
            const auto t0 = clock_type::now();
            try {
                t->ok = servers_[s]->verify(t->seq, t->first, t->n_verified, sampling_, t->cancel, t->preds);
            } catch (...) {
                lock.lock();
                error_       = std::current_exception();
                assigned_[s] = nullptr;
                cv_.notify_all();
                return;
            }
            t->ms = ms_between(t0, clock_type::now());
            lock.lock();
            finished_.push_back(t);
            assigned_[s] = nullptr;
            cv_.notify_all();
        }
    }

    // --- orchestration (calling thread, under the lock) -------------------------------------------
    void launch() {
        while (next_first_ <= last_index_) {
            size_t s = 0;
            while (s < assigned_.size() && (assigned_[s] != nullptr || !ready_[s])) {
                ++s;
            }
            if (s == assigned_.size()) {
                return;  // every server is busy
            }
            const int32_t a = next_first_;
            const int32_t n = (int32_t) spec_.size();
            int32_t       b;
            if (!params_.overlap) {
                if (busy_ > 0) {
                    return;
                }
                b = std::min(a + params_.lookahead, last_index_);
            } else {
                // the first task after a restart is the target on the verified text alone
                b = fresh_ ? a : std::min(a + params_.lookahead - 1, last_index_);
            }
            const bool drafter_done = n >= last_index_ || (n > L_ && cb_.is_end && cb_.is_end(spec_.back()));
            if (drafter_done) {
                b = std::min(b, n);  // no more drafts are coming: verify what there is
            }
            if (n < b || b < a) {
                return;  // the drafts it needs are not there yet
            }
            auto t   = std::make_shared<task>();
            t->first = a;
            t->last  = b;
            t->epoch = epoch_;
            t->seq.assign(spec_.begin(), spec_.begin() + b);
            t->n_verified = std::min(L_, b);
            assigned_[s] = t;
            in_flight_.push_back(t);
            busy_ += 1;
            st_.n_tasks += 1;
            st_.n_server_tasks[s] += 1;
            next_first_ = b + 1;
            fresh_      = false;
            cv_.notify_all();
        }
    }

    void collect() {
        for (auto & t : finished_) {
            busy_ -= 1;
            st_.t_verify_ms += t->ms;
            in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), t));
            if (t->ok && t->epoch == epoch_) {
                for (int32_t j = t->first; j <= t->last; ++j) {
                    have_[j - base_]  = 1;
                    preds_[j - base_] = std::move(t->preds[j - t->first]);
                }
            } else {
                st_.n_tasks_cancelled += 1;
                st_.t_verify_wasted_ms += t->ms;
            }
        }
        finished_.clear();
    }

    void collect_after_shutdown() {
        std::lock_guard<std::mutex> lock(m_);
        for (auto & t : finished_) {
            st_.t_verify_ms += t->ms;
            st_.t_verify_wasted_ms += t->ms;
            st_.n_tasks_cancelled += 1;
        }
        finished_.clear();
    }

    void commit() {
        while (!stopped_ && L_ <= last_index_ && have_[L_ - base_]) {
            dsi_prediction & pr = preds_[L_ - base_];
            llama_token      tok;
            if ((int32_t) spec_.size() > L_) {
                const llama_token d  = spec_[L_];
                bool              ok = false;
                st_.n_checked += 1;
                if (sampling_.greedy()) {
                    ok  = d == pr.argmax;
                    tok = pr.argmax;
                } else {
                    ok = accept_one_sampled(d, qs_[L_], pr.p, n_vocab_, rng_, scratch_, tok);
                    if (ok) {
                        tok = d;
                    }
                }
                if (ok) {
                    st_.n_accepted += 1;
                } else {
                    restart(tok);
                }
            } else if (params_.wait_for_drafts && L_ < last_index_) {
                break;  // the drafter's proposal for L_ is coming: judge it rather than race it
            } else {
                // the target got here before the drafter: its own token
                tok = sampling_.greedy() ? pr.argmax : sample(pr.p, rng_);
                spec_.push_back(tok);
                qs_.resize(spec_.size());
                draft_cancel_ = true;  // whatever the drafter is proposing for this index is moot
                fresh_        = true;  // the target goes on from here at once, as after a restart
                st_.n_target_only += 1;
            }
            L_ += 1;
            if (!cb_.emit(tok)) {
                stopped_ = true;
            }
        }
        cv_.notify_all();
    }

    // the draft at L_ was rejected: tok replaces it, and everything built on it goes
    void restart(llama_token tok) {
        spec_.resize(L_);
        spec_.push_back(tok);
        qs_.resize(spec_.size());
        epoch_ += 1;
        for (auto & t : in_flight_) {
            t->cancel = true;
        }
        draft_cancel_ = true;
        for (int32_t j = L_ + 1; j <= last_index_; ++j) {
            have_[j - base_] = 0;
        }
        next_first_ = L_ + 1;
        fresh_      = true;
    }

    void shutdown() {
        {
            std::lock_guard<std::mutex> lock(m_);
            stop_threads_ = true;
            stop_read_    = true;
            draft_cancel_ = true;
            for (auto & t : in_flight_) {
                t->cancel = true;
            }
            cv_.notify_all();
        }
        for (auto & th : threads_) {
            if (th.joinable()) {
                th.join();
            }
        }
        threads_.clear();
    }

    dsi_drafter &                      drafter_;
    const std::vector<dsi_server *> &  servers_;
    const std::vector<llama_token>     prompt_;  // (read by the threads without the lock)
    std::vector<llama_token>           spec_;  // the verified text (first L_ tokens), then drafts
    std::vector<token_dist>            qs_;    // qs_[j]: the q draft j was drawn from (sampling)
    int32_t                            last_index_;
    sampling_params                    sampling_;
    dsi_params                         params_;
    const dsi_callbacks &              cb_;
    int32_t                            n_vocab_;
    rng_t                              rng_;         // acceptance and target-only draws
    uint64_t                           seed_draft_;  // the drafter's own generator
    acceptance_scratch                 scratch_;

    std::mutex                         m_;
    std::condition_variable            cv_;
    int32_t                            L_ = 0, base_ = 0, next_first_ = 0, max_ahead_ = 0, seen_size_ = -1;
    uint64_t                           epoch_ = 0;
    int32_t                            busy_  = 0;
    bool                               stopped_ = false, stop_threads_ = false;
    bool                               fresh_ = true;  // at the start and after a restart: next task is [L_, L_]
    std::atomic<bool>                  draft_cancel_{false};
    std::atomic<bool>                  stop_read_{false};  // the drafter's read_prompt: the run is over
    std::vector<char>                  have_;   // have_[j - base_]: a prediction for index j is in
    std::vector<dsi_prediction>        preds_;
    std::vector<std::shared_ptr<task>> assigned_;  // per server: its task, or none
    std::vector<char>                  ready_;     // per server: it has read the prompt (or reads none)
    int32_t                            n_ready_ = 0, seen_ready_ = 0;  // servers that became ready
    std::vector<std::shared_ptr<task>> in_flight_;
    std::vector<std::shared_ptr<task>> finished_;
    std::exception_ptr                 error_;
    std::vector<std::thread>           threads_;
    dsi_stats                          st_;
};

}  // namespace

void dsi_params_validate(const dsi_params & p, int32_t n_servers) {
    if (n_servers < 1) {
        throw std::invalid_argument("DSI needs at least one target server (sp >= 1), got " + std::to_string(n_servers));
    }
    if (p.lookahead < 0 || (p.overlap && p.lookahead < 1)) {
        throw std::invalid_argument("lookahead must be >= 1, got " + std::to_string(p.lookahead));
    }
    if (p.max_ahead < 0) {
        throw std::invalid_argument("max_ahead must be >= 0, got " + std::to_string(p.max_ahead));
    }
    if (p.max_ahead > 0 && p.max_ahead < p.lookahead) {
        throw std::invalid_argument("max_ahead must be >= lookahead (" + std::to_string(p.lookahead) + "), got " +
                                    std::to_string(p.max_ahead));
    }
}

dsi_stats run_dsi(dsi_drafter & drafter, const std::vector<dsi_server *> & servers, std::vector<llama_token> seq,
                  int32_t last_index, const sampling_params & sampling, uint64_t seed, const dsi_params & params,
                  const dsi_callbacks & cb, int32_t n_vocab, const dsi_prediction * first) {
    dsi_params_validate(params, (int32_t) servers.size());
    if (seq.empty()) {
        throw std::invalid_argument("DSI needs a non-empty prompt");
    }
    if (last_index < (int32_t) seq.size()) {
        return dsi_stats{};
    }
    orchestrator o(drafter, servers, std::move(seq), last_index, sampling, seed, params, cb, n_vocab, first);
    return o.run();
}

}  // namespace specllama
