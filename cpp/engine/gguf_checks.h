// engine/gguf_checks.h: checking a GGUF file before llama.cpp loads it, so that a wrong path, a file that
// is not GGUF, or metadata llama.cpp would abort on gets a clear error instead.
// Not here: loading itself (model.h).
#pragma once

#include <string>

namespace specllama {

// throws file_not_found for a missing path, std::invalid_argument for a file that is not a
// regular GGUF file or whose metadata llama.cpp would abort on
void check_gguf_file(const std::string & path);

}  // namespace specllama
