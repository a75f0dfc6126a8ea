// engine/model_identity.h: what a GGUF file is (its family, size in parameters, vocabulary), read
// from its metadata and tensor table with ggml's own parser, so that many files can be compared
// without loading any (specllama/local_drafts.py finds a draft for a target this way).
// Not here: sizes in a device's memory (footprint.h), loading (model.h).
#pragma once

#include <cstdint>
#include <string>

namespace specllama {

struct model_identity {
    std::string architecture;  // general.architecture ("" where absent)
    std::string type;          // general.type: "model", "adapter", "mmproj", ... ("" where absent)
    std::string name;          // general.name
    std::string basename;      // general.basename: the family and variant ("Qwen2.5-Coder")
    std::string finetune;      // general.finetune ("Instruct")
    std::string size_label;    // general.size_label ("0.5B")
    int64_t     n_params     = 0;  // elements of the tensors in this file
    int64_t     n_block      = 0;  // tensors named blk.*: 0 for a file that holds no model layers
    int64_t     n_vocab      = 0;
    std::string vocab_hash;    // 16 hex digits over the tokenizer's model and every token's text; "" without tokens
    int64_t     split_no     = 0;  // split.no: which part of a model split across files (0: the first or only)
    int64_t     split_count  = 1;
};

// throws file_not_found (model.h) for a missing path (check_regular_file), std::invalid_argument for what is not a
// regular file or what ggml's GGUF parser cannot read
model_identity read_identity(const std::string & path);

}  // namespace specllama
