// bind_decoder.cpp: the native decoding loop as one Python call. Arguments become C++ values
// before the GIL is released; the per-step callback takes the GIL back only to report a step
// and to check for Ctrl-C.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "draft_length.h"
#include "speculative.h"

namespace py = pybind11;
using namespace specllama;

namespace specllama_py {

py::dict stats_to_dict(const generate_stats & s) {
    py::dict d;
    d["n_prompt"]          = s.n_prompt;
    d["n_prompt_cached"]   = s.n_prompt_cached;
    d["n_prompt_shared"]   = s.n_prompt_shared;
    d["n_generated"]       = s.n_generated;
    d["n_steps"]           = s.n_steps;
    d["n_drafted"]         = s.n_drafted;
    d["n_accepted"]        = s.n_accepted;
    d["n_lookup_drafted"]  = s.n_lookup_drafted;
    d["n_lookup_accepted"] = s.n_lookup_accepted;
    d["n_paused_steps"]    = s.n_paused_steps;
    d["accepted_hist"]     = s.accepted_hist;
    d["acceptance_rate"]   = s.acceptance_rate();
    d["t_prefill_ms"]      = s.t_prefill_ms;
    d["t_draft_ms"]        = s.t_draft_ms;
    d["t_verify_ms"]       = s.t_verify_ms;
    d["t_accept_ms"]       = s.t_accept_ms;
    d["t_total_ms"]        = s.t_total_ms;
    d["tokens_per_second"] = s.tokens_per_second();
    return d;
}

generate_params common_params(int32_t max_tokens, float temperature, int32_t top_k, float top_p, float min_p,
                              std::optional<uint64_t> seed, const std::vector<std::string> & stop, bool ignore_eos) {
    generate_params p;
    p.max_tokens           = max_tokens;
    p.sampling.temperature = temperature;
    p.sampling.top_k       = top_k;
    p.sampling.top_p       = top_p;
    p.sampling.min_p       = min_p;
    p.seed                 = seed;
    p.stop                 = stop;
    p.ignore_eos           = ignore_eos;
    return p;
}

py::dict result_to_dict(const generate_result & res) {
    py::dict out;
    out["tokens"]        = res.tokens;
    out["text"]          = to_str(res.text);
    out["finish_reason"] = res.finish_reason;
    out["context_full"]  = res.context_full;
    out["stats"]         = stats_to_dict(res.stats);
    return out;
}

step_callback make_step_callback(const std::optional<py::function> & on_step) {
    return [on_step](const step_event & ev) -> bool {
        py::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() != 0) {
            throw py::error_already_set();
        }
        if (!on_step) {
            return false;
        }
        py::object r = (*on_step)(ev.tokens, to_str(ev.text), ev.n_drafted, ev.n_accepted);
        return r.cast<bool>();
    };
}

void register_decoder(py::module_ & m) {
    m.attr("MAX_DRAFT") = k_max_draft;

    // the adaptive draft length's rule on its own, so that recorded traces can be replayed through
    // the exact policy the loop uses (benchmarks/replay_draft_length.py)
    py::class_<draft_length_model>(m, "DraftLengthModel",
                                   "The adaptive draft length's cost and acceptance estimates and its "
                                   "keep-drafting rule (what the decoding loop consults per drafted token).")
        .def(py::init<>())
        .def("keep_going", &draft_length_model::keep_going, py::arg("n"), py::arg("p_reach"))
        .def("keep_going_p", &draft_length_model::keep_going_p, py::arg("n"), py::arg("p_reach"), py::arg("p_next"),
             py::arg("draft_cost"))
        .def("draft_pays", &draft_length_model::draft_pays)
        .def("draft_this_step", &draft_length_model::draft_this_step)
        .def_property_readonly("skipped_steps", &draft_length_model::skipped_steps)
        .def_property_readonly("knows_plain_step", &draft_length_model::knows_plain_step)
        .def("observe_leave", &draft_length_model::observe_leave, py::arg("excess_ms"))
        .def_property_readonly("leave_ms", &draft_length_model::leave_ms)
        .def("observe_step", &draft_length_model::observe_step, py::arg("tokens"), py::arg("ms"),
             py::arg("model_drafted") = true)
        .def_property_readonly("rate", &draft_length_model::rate)
        .def("accept_prob", &draft_length_model::accept_prob, py::arg("conf"))
        .def("observe_draft_decode", &draft_length_model::observe_draft_decode, py::arg("ms"))
        .def("observe_catch_up", &draft_length_model::observe_catch_up, py::arg("ms"))
        .def("observe_verify", &draft_length_model::observe_verify, py::arg("n_tokens"), py::arg("ms"))
        .def("observe_acceptance", &draft_length_model::observe_acceptance, py::arg("conf"), py::arg("accepted"))
        .def("verify_ms", &draft_length_model::verify_ms, py::arg("n_tokens"))
        .def_property_readonly("draft_ms", &draft_length_model::draft_ms)
        .def_property_readonly("catch_up_ms", &draft_length_model::catch_up_ms)
        .def_property_readonly("acceptance", &draft_length_model::acceptance);

    py::class_<decoder>(m, "Decoder", "A target model, an optional draft model, and their KV caches.")
        .def(py::init([](const std::string & target, std::optional<std::string> draft, int32_t n_ctx,
                         int32_t n_batch, int32_t n_threads, int32_t n_threads_draft, int32_t n_gpu_layers,
                         int32_t n_gpu_layers_draft, bool share_prefill) {
                 decoder_params p;
                 p.target.path         = target;
                 p.target.n_gpu_layers = n_gpu_layers;
                 if (draft) {
                     model_params d;
                     d.path         = *draft;
                     d.n_gpu_layers = n_gpu_layers_draft;
                     p.draft        = d;
                 }
                 p.ctx.n_ctx       = n_ctx;
                 p.ctx.n_batch     = n_batch;
                 p.ctx.n_threads   = n_threads;
                 p.n_threads_draft = n_threads_draft;
                 p.share_prefill   = share_prefill;
                 py::gil_scoped_release nogil;
                 return std::make_unique<decoder>(p);
             }),
             py::arg("target"), py::arg("draft") = py::none(), py::arg("n_ctx") = 4096, py::arg("n_batch") = 512,
             py::arg("n_threads") = 0, py::arg("n_threads_draft") = 0, py::arg("n_gpu_layers") = 0,
             py::arg("n_gpu_layers_draft") = 0, py::arg("share_prefill") = true)
        .def_property_readonly("n_ctx", &decoder::n_ctx)
        .def_property_readonly("shares_prefill", &decoder::shares_prefill)
        .def_property_readonly("has_draft", [](const decoder & d) { return d.draft() != nullptr; })
        .def_property_readonly("target_model", &decoder::target_shared)
        .def_property_readonly("draft_model", &decoder::draft_shared)
        .def("cached_tokens", [](const decoder & d) {
            py::gil_scoped_release nogil;
            return d.cached_tokens();
        })
        .def("cost_model",
             [](const decoder & d) {
                 draft_length_model m = d.cost_model();
                 py::dict out;
                 out["draft_ms"]    = m.draft_ms();
                 out["catch_up_ms"] = m.catch_up_ms();
                 out["acceptance"] = m.acceptance();
                 out["tokens_per_ms"] = m.rate();
                 out["skipped_steps"] = m.skipped_steps();  // plain steps since drafting last paid
                 out["leave_ms"] = m.leave_ms();  // a plain step after a batch, beyond a steady one
                 std::vector<double> curve;
                 for (int i = 0; i < 10; ++i) {
                     curve.push_back(m.accept_prob((i + 0.5) / 10));
                 }
                 out["accept_prob_by_confidence"] = curve;  // at confidence 0.05, 0.15, ..., 0.95
                 std::vector<double> v;
                 for (int32_t k = 1; k <= k_max_draft + 1; ++k) {
                     v.push_back(m.verify_ms(k));
                 }
                 out["verify_ms"] = v;  // verify_ms[k - 1]: a batch of k tokens
                 return out;
             },
             "The adaptive draft length's estimates: ms per draft token, ms per catch-up, ms per "
             "verification batch, the long-run tokens per ms, and the chance of acceptance by draft "
             "confidence.")
        .def("reset", [](decoder & d) {
            py::gil_scoped_release nogil;
            d.reset();
        })
        .def(
            "generate",
            [](decoder & d, const std::vector<llama_token> & prompt, int32_t max_tokens, int32_t n_draft,
               float temperature, int32_t top_k, float top_p, float min_p, std::optional<uint64_t> seed,
               const std::vector<std::string> & stop, bool ignore_eos, bool speculative, bool adaptive,
               const std::string & drafter, const std::string & acceptance, std::optional<py::function> on_step) {
                generate_params p = common_params(max_tokens, temperature, top_k, top_p, min_p, seed, stop, ignore_eos);
                p.n_draft              = n_draft;
                p.speculative          = speculative;
                p.adaptive             = adaptive;
                if (drafter == "model") {
                    p.drafter = drafter_kind::model;
                } else if (drafter == "lookup") {
                    p.drafter = drafter_kind::lookup;
                } else if (drafter == "model+lookup") {
                    p.drafter = drafter_kind::model_lookup;
                } else {
                    throw std::invalid_argument("drafter must be 'model', 'lookup' or 'model+lookup', got '" +
                                                drafter + "'");
                }
                if (acceptance == "rejection") {
                    p.rule = accept_rule::rejection;
                } else if (acceptance == "match") {
                    p.rule = accept_rule::match;
                } else {
                    throw std::invalid_argument("acceptance must be 'rejection' or 'match', got '" + acceptance + "'");
                }

                step_callback   cb = make_step_callback(on_step);
                generate_result res;
                {
                    py::gil_scoped_release nogil;
                    res = d.generate(prompt, p, cb, check_signals);
                }
                return result_to_dict(res);
            },
            py::arg("prompt"), py::arg("max_tokens") = 256, py::arg("n_draft") = 6, py::arg("temperature") = 0.8f,
            py::arg("top_k") = 40, py::arg("top_p") = 0.95f, py::arg("min_p") = 0.05f, py::arg("seed") = py::none(),
            py::arg("stop") = std::vector<std::string>{}, py::arg("ignore_eos") = false,
            py::arg("speculative") = true, py::arg("adaptive") = true, py::arg("drafter") = "model",
            py::arg("acceptance") = "rejection", py::arg("on_step") = py::none(),
            "Generate after prompt (token ids). on_step(tokens, text, n_drafted, n_accepted) runs after "
            "every verification step; returning True stops. Returns a dict: tokens, text, finish_reason, "
            "context_full, stats.");
}

}  // namespace specllama_py
