// step_runner.h: decoders that share one machine run their steps one at a time, in arrival
// order, on one thread. llama.cpp's CPU backend runs each decode on an OpenMP team that belongs to
// the calling thread; teams of several threads on the same cores wake up cold and spin against
// each other, which made four slots' steps 35% slower than the same steps run one after another
// on a single thread. So a server's slots hand their steps to one runner.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace specllama {

class step_runner {
  public:
    step_runner() : worker_([this] { loop(); }) {}

    ~step_runner() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        cv_.notify_all();
        worker_.join();
    }

    step_runner(const step_runner &)             = delete;
    step_runner & operator=(const step_runner &) = delete;

    // run fn on the runner's thread after the steps queued before it, and wait for it; an
    // exception fn throws is rethrown here
    void run(const std::function<void()> & fn) {
        if (std::this_thread::get_id() == worker_.get_id()) {
            fn();
            return;
        }
        task t{ &fn, nullptr, false };
        std::unique_lock<std::mutex> lock(mutex_);
        queue_.push_back(&t);
        cv_.notify_all();
        done_cv_.wait(lock, [&] { return t.done; });
        if (t.error) {
            std::rethrow_exception(t.error);
        }
    }

  private:
    struct task {
        const std::function<void()> * fn;
        std::exception_ptr            error;
        bool                          done;
    };

    void loop() {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) {
                return;  // stopping, nothing left
            }
            task * t = queue_.front();
            queue_.pop_front();
            lock.unlock();
            try {
                (*t->fn)();
            } catch (...) {
                t->error = std::current_exception();
            }
            lock.lock();
            t->done = true;
            done_cv_.notify_all();
        }
    }

    std::mutex              mutex_;
    std::condition_variable cv_, done_cv_;
    std::deque<task *>      queue_;
    bool                    stopping_ = false;
    std::thread             worker_;  // last: started once the rest is ready
};

// run fn on runner's thread, or here when there is no runner
inline void run_step(step_runner * runner, const std::function<void()> & fn) {
    if (runner) {
        runner->run(fn);
    } else {
        fn();
    }
}

}  // namespace specllama
