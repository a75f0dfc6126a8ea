// bindings/signals.cpp: Ctrl-C, and the other signals Python handles, during a native call that
// runs without the GIL (signal_watch).
#include <pybind11/pybind11.h>

#include <atomic>
#include <csignal>

#include "bindings.h"

namespace py = pybind11;

namespace specllama_py {

namespace {

std::atomic<bool> g_raised{false};  // a watched signal came since the last check
PyOS_sighandler_t g_python = nullptr;  // Python's own C handler, which the wrapper chains to
int               g_depth  = 0;        // watches alive (the main thread's only)

extern "C" void raise_flag(int sig) {
    g_raised.store(true, std::memory_order_relaxed);
    g_python(sig);
}

bool on_main_thread() {
    py::module_ threading = py::module_::import("threading");
    const py::object main = threading.attr("main_thread")().attr("ident");
    return main.equal(threading.attr("get_ident")());
}

}  // namespace

signal_watch::signal_watch() {
    if (!on_main_thread()) {
        how_ = how::none;  // (Python runs signal handlers in the main thread only)
        return;
    }
    if (g_depth > 0) {  // (a generation inside a handler of another's: the outer one's wrappers serve)
        how_ = how::flag;
        ++g_depth;
        return;
    }
    // Python's handler is SIGINT's unless Python was told to leave it (SIG_DFL, SIG_IGN)
    struct sigaction sa {};
    if (sigaction(SIGINT, nullptr, &sa) != 0 || (sa.sa_flags & SA_SIGINFO) != 0 || sa.sa_handler == SIG_DFL ||
        sa.sa_handler == SIG_IGN) {
        return;  // (how_ every: the GIL at every check, as Python's own loop would)
    }
    g_python = sa.sa_handler;
    for (int sig = 1; sig < NSIG; ++sig) {
        struct sigaction old {};
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, nullptr, &old) != 0 ||
            (old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != g_python) {
            continue;
        }
        struct sigaction wrapped = old;
        wrapped.sa_handler       = raise_flag;
        if (sigaction(sig, &wrapped, nullptr) == 0) {
            saved_.push_back({sig, old});
        }
    }
    g_raised.store(false, std::memory_order_relaxed);
    how_ = how::flag;
    ++g_depth;
}

signal_watch::~signal_watch() {
    if (how_ != how::flag) {
        return;
    }
    --g_depth;
    for (const auto & [sig, old] : saved_) {
        struct sigaction cur {};
        // (a handler Python installed meanwhile, signal.signal() inside a handler, stays)
        if (sigaction(sig, nullptr, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) == 0 && cur.sa_handler == raise_flag) {
            sigaction(sig, &old, nullptr);
        }
    }
}

void signal_watch::check() const {
    if (how_ == how::every || (how_ == how::flag && g_raised.exchange(false, std::memory_order_relaxed))) {
        check_signals();
    }
}

}  // namespace specllama_py
