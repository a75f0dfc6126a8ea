// speculative/text.cpp: stop strings and UTF-8 hold-back for streamed text.
#include "speculative/text.h"

#include <algorithm>

namespace specllama {

bool text_stream::push(const std::string & piece) {
    if (stopped_) {
        return true;
    }
    const size_t old_size = text_.size();
    text_ += piece;
    for (const auto & s : stop_) {
        if (s.empty()) {
            continue;
        }
        // a new match must end in the new piece
        const size_t from = old_size >= s.size() ? old_size - s.size() + 1 : 0;
        const size_t pos  = text_.find(s, from);
        if (pos != std::string::npos) {
            text_.resize(std::max(pos, n_taken_));
            stopped_ = true;
        }
    }
    return stopped_;
}

std::string text_stream::take_ready() {
    size_t end = text_.size();
    if (!stopped_) {
        // hold back a tail that is a prefix of some stop string
        size_t hold = 0;
        for (const auto & s : stop_) {
            for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), text_.size()); k > hold; --k) {
                if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
                    hold = k;
                    break;
                }
            }
        }
        end -= hold;
        // and an incomplete UTF-8 character at the end
        size_t i = end;
        size_t n_cont = 0;
        while (i > n_taken_ && n_cont < 4 && ((unsigned char) text_[i - 1] & 0xC0) == 0x80) {
            --i;
            ++n_cont;
        }
        if (i > n_taken_) {
            const unsigned char lead = (unsigned char) text_[i - 1];
            size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
            if (need > n_cont) {
                end = i - 1;
            }
        }
    }
    if (end <= n_taken_) {
        return std::string();
    }
    std::string out = text_.substr(n_taken_, end - n_taken_);
    n_taken_        = end;
    return out;
}

std::string text_stream::take_all() {
    std::string out = text_.substr(std::min(n_taken_, text_.size()));
    n_taken_        = text_.size();
    return out;
}

}  // namespace specllama
