// speculative/generate_params.cpp: what one generation asks for: its options' names (drafter,
// acceptance rule, mode) and their checks.
#include "speculative/decoder.h"

#include <climits>
#include <string>

namespace specllama {

namespace {

template <typename E, size_t N>
E enum_from_string(const std::string & name, const std::pair<const char *, E> (&names)[N], const char * what) {
    std::string all;
    for (const auto & n : names) {
        if (name == n.first) {
            return n.second;
        }
        all += std::string(all.empty() ? "" : ", ") + "'" + n.first + "'";
    }
    throw std::invalid_argument(std::string(what) + " must be one of " + all + ", got '" + name + "'");
}

template <typename E, size_t N>
std::string enum_to_string(E value, const std::pair<const char *, E> (&names)[N]) {
    for (const auto & n : names) {
        if (value == n.second) {
            return n.first;
        }
    }
    return "?";
}

const std::pair<const char *, drafter_kind> k_drafters[] = {
    {"auto", drafter_kind::automatic}, {"model", drafter_kind::model},
    {"lookup", drafter_kind::lookup},  {"model+lookup", drafter_kind::model_lookup}};
const std::pair<const char *, accept_rule> k_rules[] = {{"rejection", accept_rule::rejection},
                                                         {"match", accept_rule::match},
                                                         {"keyed", accept_rule::keyed}};
const std::pair<const char *, decode_mode> k_modes[] = {{"si", decode_mode::si}, {"dsi", decode_mode::dsi}};

}  // namespace

drafter_kind drafter_from_string(const std::string & name) { return enum_from_string(name, k_drafters, "drafter"); }
std::string  drafter_to_string(drafter_kind kind) { return enum_to_string(kind, k_drafters); }
accept_rule  accept_rule_from_string(const std::string & name) { return enum_from_string(name, k_rules, "acceptance"); }
std::string  accept_rule_to_string(accept_rule rule) { return enum_to_string(rule, k_rules); }

accept_rule effective_rule(const generate_params & p) {
    if (p.rule) {
        return *p.rule;
    }
    return p.seed && !p.sampling.greedy() && p.mode == decode_mode::si ? accept_rule::keyed : accept_rule::rejection;
}
std::string acceptance_name(const generate_params & p) {
    return p.sampling.greedy() ? "greedy" : accept_rule_to_string(effective_rule(p));
}
decode_mode  decode_mode_from_string(const std::string & name) { return enum_from_string(name, k_modes, "mode"); }
std::string  decode_mode_to_string(decode_mode mode) { return enum_to_string(mode, k_modes); }

void generate_params_validate(const generate_params & p) {
    const auto in_range = [](const char * name, int64_t v, int64_t lo, int64_t hi) {
        if (v < lo || v > hi) {
            throw std::invalid_argument(std::string(name) + " must be in [" + std::to_string(lo) + ", " +
                                        std::to_string(hi) + "], got " + std::to_string(v));
        }
    };
    if (p.max_tokens < 1) {
        throw std::invalid_argument("max_tokens must be >= 1, got " + std::to_string(p.max_tokens));
    }
    if (p.n_draft) {
        in_range("n_draft", *p.n_draft, 1, k_max_draft);
    }
    sampling_params_validate(p.sampling);
    if (p.infill && !p.sampling.greedy() && (p.sampling.top_k < 1 || p.sampling.top_k > k_max_infill_candidates)) {
        // its merge compares every pair of candidates
        throw std::invalid_argument("the infill sampler needs top_k in [1, " + std::to_string(k_max_infill_candidates) +
                                    "], got " + std::to_string(p.sampling.top_k));
    }
    in_range("cache_reuse", p.cache_reuse, 0, INT32_MAX);
    in_range("draft_ahead", p.draft_ahead, 0, k_max_draft);
    logit_controls_validate(p.controls, INT32_MAX);  // token ids against the target's vocabulary: decoder::plan_run
    if (p.prices) {
        const step_prices & c = *p.prices;
        if (!(c.draft_ms >= 0) || !(c.verify_ms > 0) || !(c.verify_token_ms >= 0)) {
            throw std::invalid_argument("prices must be draft_ms >= 0, verify_ms > 0, verify_token_ms >= 0");
        }
    }
    if (p.mode == decode_mode::dsi) {
        in_range("sp", p.dsi.sp, 1, k_max_servers);
        in_range("lookahead", p.dsi.lookahead, 1, k_max_draft);
        if (p.dsi.n_threads_draft < 0) {
            throw std::invalid_argument("threads_draft must be >= 0 (0 = from the thread budget), got " +
                                        std::to_string(p.dsi.n_threads_draft));
        }
        if (p.dsi.n_threads_server < 0) {
            throw std::invalid_argument("threads_server must be >= 0 (0 = from the thread budget), got " +
                                        std::to_string(p.dsi.n_threads_server));
        }
        if (!p.speculative) {
            throw std::invalid_argument("mode 'dsi' is speculative; use mode 'si' with speculative off to decode "
                                        "plainly");
        }
        if (p.drafter != drafter_kind::automatic && p.drafter != drafter_kind::model) {
            throw std::invalid_argument("mode 'dsi' drafts with the draft model only (drafter 'auto' or 'model'), "
                                        "got '" + drafter_to_string(p.drafter) + "'");
        }
        if (!p.prediction.empty()) {
            throw std::invalid_argument("a prediction drafts in mode 'si' only");
        }
        if (p.rule && *p.rule != accept_rule::rejection) {
            throw std::invalid_argument("mode 'dsi' verifies with the rejection rule only");
        }

        if (p.n_draft || p.adaptive || p.prices) {
            throw std::invalid_argument("n_draft, adaptive and prices apply to mode 'si'; DSI drafts lookahead "
                                        "tokens per verification task");
        }
    }
}

}  // namespace specllama
