// engine/gguf_checks.h: checking a GGUF file before llama.cpp loads it, so that a wrong path, a file that
// is not GGUF, or metadata llama.cpp would abort on gets a clear error instead; and the readers of its
// integer keys that those checks and footprint.h share.
// Not here: loading itself (model.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

struct gguf_context;

namespace specllama {

// the integer value of key k (any integer type), or nullopt for another type
std::optional<int64_t> gguf_int_at(const gguf_context * ctx, int64_t k);
// an integer key of any integer type, if present
std::optional<int64_t> gguf_int(const gguf_context * ctx, const std::string & name);
// an integer key, or each element of an integer array key (llama.cpp allows per-layer values)
std::vector<int64_t> gguf_ints(const gguf_context * ctx, const std::string & name);

// throws file_not_found for a missing path, std::invalid_argument for what is not a regular file
// (a directory, a FIFO: nothing is opened)
void check_regular_file(const std::string & path);

// throws file_not_found for a missing path, std::invalid_argument for a file that is not a
// regular GGUF file or whose metadata llama.cpp would abort on
void check_gguf_file(const std::string & path);

}  // namespace specllama
