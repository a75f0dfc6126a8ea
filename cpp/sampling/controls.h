// sampling/controls.h: the controls llama.cpp's samplers apply to the logits before the chain
// (sampling.h), in llama-server's order: logit bias (llama_sampler_init_logit_bias), then the
// repetition penalties over the last n tokens, the prompt's included (llama_sampler_init_penalties);
// and a thinking budget, which forces the end of a reasoning model's thinking.
// A penalty depends on the tokens before the position it is applied at, drafted ones included, so
// the loop applies the controls at every drafted and verified position with that position's own
// history, to the draft's logits and the target's alike: the rejection rule then emits exactly the
// controlled target's distribution.
// Not here: the chain after them (sampling.h), where they are applied (speculative/).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "llama.h"

namespace specllama {

// a reasoning model's thinking budget (llama-server's --reasoning-budget): once `tokens` tokens of
// the reply are thinking (after the start sequence, or from the reply's start where the prompt
// opened the thinking) and no end sequence has closed it, `forced` (a message and the closing tag)
// follows, token by token; a start sequence after that opens a new budget. A function of each
// position's history like the penalties, applied to the draft's logits and the target's alike, so
// the output is exactly the target's with that text forced.
struct thinking_budget {
    int32_t                               tokens = -1;  // < 0: no budget
    bool                                  opened = false;
    std::vector<llama_token>              start;
    std::vector<std::vector<llama_token>> ends;
    std::vector<llama_token>              forced;
    // where the reply starts in a position's history (the decoder sets it: the prompt's length)
    int32_t reply_start = 0;
    // the vocabulary the tokens are of (the decoder sets it): where it is known, a budget spent in the
    // middle of a character of several tokens waits for the character to end (3 tokens at most)
    const llama_vocab * vocab = nullptr;

    bool active() const { return tokens >= 0 && !forced.empty(); }
};

struct logit_controls {
    // added to a token's logit (-inf: the token is never drawn), as OpenAI's and llama-server's logit_bias
    std::vector<std::pair<llama_token, float>> bias;
    int32_t last_n    = 64;    // the penalties count the last n tokens before a position (0: none; -1: all)
    float   repeat    = 1.0f;  // a counted token's logit divided by this where positive, multiplied where not
    float   frequency = 0.0f;  // then minus this times the token's count
    float   presence  = 0.0f;  // and minus this once for a token counted at all

    thinking_budget budget;

    bool penalizes() const { return last_n != 0 && (repeat != 1.0f || frequency != 0.0f || presence != 0.0f); }
    bool active() const { return !bias.empty() || penalizes() || budget.active(); }
};

// the token the budget forces after before[0..n_before) and then after[0..n_after), or -1
llama_token thinking_budget_forces(const thinking_budget & b, const llama_token * before, int32_t n_before,
                                   const llama_token * after, int32_t n_after);

// throws std::invalid_argument naming the bad field (token ids checked against n_vocab)
void logit_controls_validate(const logit_controls & controls, int32_t n_vocab);

// applies a logit_controls to rows of logits, keeping the buffers it needs between calls
class logit_editor {
  public:
    // the row after the controls, for the position that follows the tokens before[0..n_before) and
    // then after[0..n_after) (a prompt and generated text, then drafted tokens): logits itself where
    // the controls change nothing, else a copy held here until the next call. Throws
    // std::invalid_argument where they leave no token that can be drawn.
    const float * apply(const logit_controls & controls, const float * logits, int32_t n_vocab,
                        const llama_token * before, int32_t n_before, const llama_token * after, int32_t n_after);

  private:
    std::vector<float>       row_;
    std::vector<int32_t>     count_;    // per token id, zero outside the window being applied
    std::vector<llama_token> counted_;  // the ids with a count, to clear them after
};

}  // namespace specllama
