// bind_dsi.cpp: Decoder.generate_dsi (DSI on real models) and simulate_dsi (the same orchestrator
// against simulated servers).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "dsi_backends.h"

namespace py = pybind11;
using namespace specllama;

namespace specllama_py {

namespace {

py::dict dsi_stats_to_dict(const dsi_stats & s) {
    py::dict d;
    d["n_tasks"]            = s.n_tasks;
    d["n_tasks_cancelled"]  = s.n_tasks_cancelled;
    d["n_drafted"]          = s.n_drafted;
    d["n_checked"]          = s.n_checked;
    d["n_accepted"]         = s.n_accepted;
    d["n_target_only"]      = s.n_target_only;
    d["t_total_ms"]         = s.t_total_ms;
    d["t_draft_ms"]         = s.t_draft_ms;
    d["t_draft_idle_ms"]    = s.t_draft_idle_ms;
    d["t_verify_ms"]        = s.t_verify_ms;
    d["t_verify_wasted_ms"] = s.t_verify_wasted_ms;
    // verification the drafter did not wait for: the used verification time less the drafter's waits
    const double used       = s.t_verify_ms - s.t_verify_wasted_ms;
    d["t_verify_hidden_ms"] = std::max(0.0, used - s.t_draft_idle_ms);
    d["verify_hidden_share"] = used > 0 ? std::max(0.0, used - s.t_draft_idle_ms) / used : 0.0;
    return d;
}

}  // namespace

void register_dsi(py::module_ & m) {
    auto cls = py::reinterpret_borrow<py::class_<decoder>>(m.attr("Decoder"));
    cls.def(
        "generate_dsi",
        [](decoder & d, const std::vector<llama_token> & prompt, int32_t max_tokens, float temperature, int32_t top_k,
           float top_p, float min_p, std::optional<uint64_t> seed, const std::vector<std::string> & stop,
           bool ignore_eos, int32_t sp, int32_t lookahead, int32_t n_threads_draft, int32_t n_threads_server,
           bool overlap, std::optional<py::function> on_step) {
            const generate_params p = common_params(max_tokens, temperature, top_k, top_p, min_p, seed, stop,
                                                    ignore_eos);
            dsi_options o;
            o.sp               = sp;
            o.lookahead        = lookahead;
            o.n_threads_draft  = n_threads_draft;
            o.n_threads_server = n_threads_server;
            o.overlap          = overlap;
            step_callback   cb = make_step_callback(on_step);
            generate_result res;
            {
                py::gil_scoped_release nogil;
                res = d.generate_dsi(prompt, p, o, cb, check_signals);
            }
            py::dict out = result_to_dict(res);
            py::dict dsi = dsi_stats_to_dict(res.dsi->stats);
            dsi["sp"]               = res.dsi->sp;
            dsi["lookahead"]        = res.dsi->lookahead;
            dsi["n_threads_draft"]  = res.dsi->n_threads_draft;
            dsi["n_threads_server"] = res.dsi->n_threads_server;
            dsi["overlap"]          = overlap;
            out["dsi"]              = dsi;
            return out;
        },
        py::arg("prompt"), py::arg("max_tokens") = 256, py::arg("temperature") = 0.8f, py::arg("top_k") = 40,
        py::arg("top_p") = 0.95f, py::arg("min_p") = 0.05f, py::arg("seed") = py::none(),
        py::arg("stop") = std::vector<std::string>{}, py::arg("ignore_eos") = false, py::arg("sp") = 1,
        py::arg("lookahead") = 4, py::arg("n_threads_draft") = 0, py::arg("n_threads_server") = 0,
        py::arg("overlap") = true, py::arg("on_step") = py::none(),
        "Generate after prompt by Distributed Speculative Inference with sp target servers. Returns what "
        "generate returns plus 'dsi': the orchestrator's counts and times.");

    m.def(
        "simulate_dsi",
        [](double target_ms, double drafter_ms, const std::vector<bool> & drafter_right, int32_t lookahead,
           int32_t sp, bool overlap, int32_t n_prompt, uint64_t seed) {
            if (!(target_ms >= 0) || !(drafter_ms >= 0)) {
                throw std::invalid_argument("latencies must be >= 0");
            }
            if (n_prompt < 1) {
                throw std::invalid_argument("n_prompt must be >= 1");
            }
            if (drafter_right.empty()) {
                throw std::invalid_argument("drafter_right must say, for each token to generate, whether the "
                                            "drafter gets it right");
            }
            simulated_world world;
            world.n_prompt = n_prompt;
            world.seed     = seed;
            world.drafter_right.assign(drafter_right.begin(), drafter_right.end());
            const int32_t n_tokens = (int32_t) drafter_right.size();
            simulated_drafter             drafter(world, drafter_ms);
            std::vector<simulated_server> servers;
            servers.reserve(sp > 0 ? sp : 0);
            std::vector<dsi_server *> ptrs;
            for (int32_t s = 0; s < sp; ++s) {
                servers.emplace_back(world, target_ms);
                ptrs.push_back(&servers.back());
            }
            std::vector<llama_token> prompt(n_prompt, 0), out;
            dsi_callbacks            cb;
            cb.emit = [&](llama_token t) {
                out.push_back(t);
                return true;
            };
            cb.poll = check_signals;
            dsi_params p;
            p.lookahead = lookahead;
            p.overlap   = overlap;
            sampling_params greedy;
            greedy.temperature = 0.0f;
            dsi_stats st;
            {
                py::gil_scoped_release nogil;
                st = run_dsi(drafter, ptrs, prompt, n_prompt + n_tokens - 1, greedy, seed, p, cb, world.n_vocab);
            }
            bool correct = (int32_t) out.size() == n_tokens;
            for (int32_t i = 0; correct && i < n_tokens; ++i) {
                correct = out[i] == world.truth(n_prompt + i);
            }
            py::dict r     = dsi_stats_to_dict(st);
            r["n_tokens"]  = (int32_t) out.size();
            r["correct"]   = correct;
            return r;
        },
        py::arg("target_ms"), py::arg("drafter_ms"), py::arg("drafter_right"), py::arg("lookahead") = 4,
        py::arg("sp") = 1, py::arg("overlap") = true, py::arg("n_prompt") = 1, py::arg("seed") = 0,
        "Run the DSI orchestrator (overlap=False: SI; with lookahead=0 too: non-SI) against simulated "
        "servers whose forward pass waits target_ms and a drafter that waits drafter_ms per token and "
        "proposes the target's token where drafter_right[i] is true. Returns the orchestrator's stats, "
        "n_tokens and whether the output equals the simulated target's ('correct').");
}

}  // namespace specllama_py
