// bindings/bind_dsi.cpp: simulate_dsi, the DSI orchestrator against simulated servers (the decoder runs DSI on
// real models through Decoder.generate with mode "dsi").
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "dsi/backends.h"

namespace py = pybind11;
using namespace specllama;

namespace specllama_py {

void register_dsi(py::module_ & m) {
    m.def(
        "simulate_dsi",
        [](double target_ms, double drafter_ms, const std::vector<bool> & drafter_right, int32_t lookahead,
           int32_t sp, bool overlap, int32_t n_prompt, uint64_t seed, double prompt_ms, double draft_prompt_ms) {
            if (!(target_ms >= 0) || !(drafter_ms >= 0) || !(prompt_ms >= 0) || !(draft_prompt_ms >= 0)) {
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
            simulated_drafter             drafter(world, drafter_ms, draft_prompt_ms);
            std::vector<simulated_server> servers;
            servers.reserve(sp > 0 ? sp : 0);
            std::vector<dsi_server *> ptrs;
            for (int32_t s = 0; s < sp; ++s) {
                servers.emplace_back(world, target_ms, s > 0 ? prompt_ms : 0.0);
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
            dsi_report rep;
            rep.sp        = sp;
            rep.lookahead = lookahead;
            rep.overlap   = overlap;
            {
                py::gil_scoped_release nogil;
                rep.stats = run_dsi(drafter, ptrs, prompt, n_prompt + n_tokens - 1, greedy, seed, p, cb, world.n_vocab);
            }
            bool correct = (int32_t) out.size() == n_tokens;
            for (int32_t i = 0; correct && i < n_tokens; ++i) {
                correct = out[i] == world.truth(n_prompt + i);
            }
            return py::make_tuple(rep, (int32_t) out.size(), correct);
        },
        py::arg("target_ms"), py::arg("drafter_ms"), py::arg("drafter_right"), py::arg("lookahead") = 4,
        py::arg("sp") = 1, py::arg("overlap") = true, py::arg("n_prompt") = 1, py::arg("seed") = 0,
        py::arg("prompt_ms") = 0.0, py::arg("draft_prompt_ms") = 0.0,
        "Run the DSI orchestrator (overlap=False: SI; with lookahead=0 too: non-SI) against simulated "
        "servers whose forward pass waits target_ms and a drafter that waits drafter_ms per token and "
        "proposes the target's token where drafter_right[i] is true. prompt_ms > 0: every server but the "
        "first reads the prompt in its thread as the run starts, a wait of prompt_ms (the first server "
        "holds it); draft_prompt_ms > 0: the drafter likewise. Returns (DSIStats, tokens emitted, whether "
        "the output equals the simulated target's).");
}

}  // namespace specllama_py
