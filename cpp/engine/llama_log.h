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

}  // namespace specllama
