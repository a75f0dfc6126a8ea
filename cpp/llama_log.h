// llama_log.h: llama.cpp's own error lines, kept to explain a failure it reports only by a code.
#pragma once

#include <string>

namespace specllama {

// the error lines llama.cpp logged since the last call, joined with "; " (the most specific ones)
std::string take_last_error();

}  // namespace specllama
