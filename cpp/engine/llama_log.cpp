// engine/llama_log.cpp: llama.cpp's log callback, its level filter and the error lines it keeps.
#include "engine/llama_log.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

#include "llama.h"

namespace specllama {

namespace {

std::atomic<int> g_log_level{GGML_LOG_LEVEL_NONE};  // errors reach the user in exceptions
std::mutex       g_log_mutex;
std::string      g_last_error;  // error lines llama.cpp logged since the last take, to explain a failure
int              g_last_level = GGML_LOG_LEVEL_NONE;
thread_local std::string * t_capture = nullptr;  // this thread's log_capture, if any

void log_callback(ggml_log_level level, const char * text, void * /*user_data*/) {
    if (t_capture != nullptr && t_capture->size() < (1 << 20)) {
        *t_capture += text;
    }
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (level != GGML_LOG_LEVEL_CONT) {
        g_last_level = level;
    }
    if (g_last_level >= GGML_LOG_LEVEL_ERROR && g_last_error.size() < 4096) {
        g_last_error += text;
    }
    if (g_last_level >= g_log_level.load() && g_log_level.load() != GGML_LOG_LEVEL_NONE) {
        fputs(text, stderr);
    }
}

}  // namespace

// the error lines logged since the last call, joined with "; ", without llama.cpp's generic
// "failed to load model" lines when a more specific one is there
std::string take_last_error() {
    std::string all;
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        all.swap(g_last_error);
    }
    std::vector<std::string> lines, generic;
    size_t                   start = 0;
    while (start < all.size()) {
        size_t      end  = all.find('\n', start);
        std::string line = all.substr(start, end == std::string::npos ? std::string::npos : end - start);
        start            = end == std::string::npos ? all.size() : end + 1;
        while (!line.empty() && line.back() == ' ') {
            line.pop_back();
        }
        if (!line.empty()) {
            (line.find("failed to load model") != std::string::npos ? generic : lines).push_back(line);
        }
    }
    if (lines.empty()) {
        lines = generic;
    }
    std::string out;
    for (const auto & l : lines) {
        out += (out.empty() ? "" : "; ") + l;
    }
    return out;
}

void backend_init() {
    static std::once_flag once;
    std::call_once(once, [] { llama_backend_init(); });
    // every time: another user of libllama in this process (llama-cpp-python sets its own logger
    // when imported) may have taken the log since, and the messages that explain a failed load
    // would go to its logger instead of into the error
    llama_log_set(log_callback, nullptr);
}

void log_set_level(int level) { g_log_level.store(level); }

log_capture::log_capture() : outer_(t_capture) { t_capture = &text_; }

log_capture::~log_capture() { t_capture = outer_; }

}  // namespace specllama
