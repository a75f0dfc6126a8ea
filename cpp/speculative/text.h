// speculative/text.h: generated tokens to text, piece by piece: stop strings are found across token
// boundaries, and streamed text is held back while it could still be the start of a stop string
// or the first bytes of a multi-byte UTF-8 character.
#pragma once

#include <string>
#include <vector>

namespace specllama {

class text_stream {
  public:
    explicit text_stream(std::vector<std::string> stop) : stop_(std::move(stop)) {}

    // append one token's bytes; returns true when a stop string is now complete (text is cut before it)
    bool push(const std::string & piece);

    // the bytes that are safe to show now and were not taken before
    std::string take_ready();

    // the rest, at the end of generation
    std::string take_all();

    const std::string & text() const { return text_; }
    bool stopped() const { return stopped_; }

  private:
    std::vector<std::string> stop_;
    std::string              text_;
    size_t                   n_taken_ = 0;
    bool                     stopped_ = false;
};

}  // namespace specllama
