// engine/llama_log.h: setting up llama.cpp once per process, and its log: messages shown at a chosen
// level, error lines kept to explain a failure it reports only by a code.
#pragma once

#include <string>

namespace specllama {

// set up llama.cpp once per process and route its log through our filter
void backend_init();

// llama.cpp messages at or above this level go to stderr (GGML_LOG_LEVEL_*; default NONE: load
// errors reach the caller in the exception's message instead)
void log_set_level(int level);

// the error lines llama.cpp logged since the last call, joined with "; " (the most specific ones)
std::string take_last_error();

// while it lives, keeps what llama.cpp logs from the thread that made it (at every level), as a
// model load's report of where its weights went
class log_capture {
  public:
    log_capture();
    ~log_capture();
    log_capture(const log_capture &)             = delete;
    log_capture & operator=(const log_capture &) = delete;
    const std::string & text() const { return text_; }

  private:
    std::string   text_;
    std::string * outer_;
};

}  // namespace specllama
