// bindings/bind_sampling.cpp: the sampling transforms and the acceptance rule on arrays, so tests and
// experiments can check them against distributions they build themselves.
#include <map>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "speculative/acceptance.h"
#include "bindings.h"
#include "engine/model.h"
#include "sampling/controls.h"
#include "sampling/sampling.h"

namespace py = pybind11;
using namespace specllama;

namespace specllama_py {

namespace {

using farray = py::array_t<float, py::array::c_style | py::array::forcecast>;

sampling_params make_sampling(float temperature, int32_t top_k, float top_p, float min_p,
                              const llama_vocab * infill = nullptr) {
    sampling_params p;
    p.temperature = temperature;
    p.top_k       = top_k;
    p.top_p       = top_p;
    p.min_p       = min_p;
    p.infill      = infill;
    sampling_params_validate(p);
    return p;
}

// rows of a 2-D probability array as sparse distributions (their nonzero entries)
std::vector<token_dist> rows_to_dists(const farray & a, const char * name) {
    if (a.ndim() != 2) {
        throw std::invalid_argument(std::string(name) + " must be a 2-D array [positions, vocab]");
    }
    auto                    r = a.unchecked<2>();
    std::vector<token_dist> out(a.shape(0));
    for (py::ssize_t i = 0; i < a.shape(0); ++i) {
        double sum = 0.0;
        for (py::ssize_t j = 0; j < a.shape(1); ++j) {
            const float v = r(i, j);
            if (!(v >= 0.0f)) {
                throw std::invalid_argument(std::string(name) + " has a negative or NaN probability");
            }
            if (v > 0.0f) {
                out[i].ids.push_back((llama_token) j);
                out[i].probs.push_back(v);
                sum += v;
            }
        }
        if (std::abs(sum - 1.0) > 1e-4) {
            throw std::invalid_argument(std::string(name) + " row " + std::to_string(i) + " sums to " +
                                        std::to_string(sum) + ", not 1");
        }
    }
    return out;
}

}  // namespace

void register_sampling(py::module_ & m) {
    m.def(
        "sampling_distribution",
        [](const farray & logits, float temperature, int32_t top_k, float top_p, float min_p,
           const model * infill_model, const std::map<llama_token, float> & logit_bias, float repeat_penalty,
           int32_t repeat_last_n, float presence_penalty, float frequency_penalty,
           const std::vector<llama_token> & history) {
            if (logits.ndim() != 1 || logits.shape(0) == 0) {
                throw std::invalid_argument("logits must be a non-empty 1-D array");
            }
            if (infill_model != nullptr && logits.shape(0) != infill_model->n_vocab) {
                throw std::invalid_argument("logits must hold one entry per token of infill_model's vocabulary");
            }
            const sampling_params p =
                make_sampling(temperature, top_k, top_p, min_p, infill_model ? infill_model->vocab : nullptr);
            const int32_t         n = (int32_t) logits.shape(0);
            logit_controls        c;
            c.bias.assign(logit_bias.begin(), logit_bias.end());
            c.repeat    = repeat_penalty;
            c.last_n    = repeat_last_n;
            c.presence  = presence_penalty;
            c.frequency = frequency_penalty;
            logit_controls_validate(c, n);
            logit_editor  editor;
            const float * row = editor.apply(c, logits.data(), n, history.data(), (int32_t) history.size(), nullptr, 0);
            token_dist    d;
            sampling_distribution(row, n, p, d);
            py::array_t<float> dense(n);
            std::fill_n(dense.mutable_data(), n, 0.0f);
            for (size_t i = 0; i < d.ids.size(); ++i) {
                dense.mutable_data()[d.ids[i]] = d.probs[i];
            }
            return dense;
        },
        py::arg("logits"), py::arg("temperature") = 0.8f, py::arg("top_k") = 40, py::arg("top_p") = 0.95f,
        py::arg("min_p") = 0.05f, py::arg("infill_model") = nullptr, py::kw_only(),
        py::arg("logit_bias") = std::map<llama_token, float>{}, py::arg("repeat_penalty") = 1.0f,
        py::arg("repeat_last_n") = 64, py::arg("presence_penalty") = 0.0f, py::arg("frequency_penalty") = 0.0f,
        py::arg("history") = std::vector<llama_token>{},
        "The distribution (dense, float32) a sampler with these settings draws from; temperature 0 is one-hot "
        "argmax. infill_model: then llama.cpp's infill sampler, with that model's vocabulary. logit_bias "
        "({token: bias}) and the repetition penalties over the last repeat_last_n tokens of history come first, "
        "as in llama.cpp's chain.");

    m.def(
        "candidates_distribution",
        [](const farray & logits, const std::vector<llama_token> & ids, float temperature, float top_p, float min_p) {
            if (logits.ndim() != 1 || logits.shape(0) == 0 || (size_t) logits.shape(0) != ids.size()) {
                throw std::invalid_argument("logits must be a non-empty 1-D array with one entry per id");
            }
            if (!(temperature > 0.0f)) {
                throw std::invalid_argument("temperature must be > 0: the candidates are a sampled chain's");
            }
            const sampling_params p = make_sampling(temperature, (int32_t) ids.size(), top_p, min_p);
            token_dist            d;
            sparse_distribution(logits.data(), ids.data(), (int32_t) ids.size(), p, d);
            return std::make_pair(d.ids, d.probs);
        },
        py::arg("logits"), py::arg("ids"), py::arg("temperature") = 0.8f, py::arg("top_p") = 0.95f,
        py::arg("min_p") = 0.05f,
        "The distribution the chain draws from when only a top-k row's candidates are known (logits[i] is "
        "ids[i]'s, in any order), as device sampling returns them: (ids most likely first, equal logits lower "
        "id first; their probabilities).");

    m.def(
        "accept_trials",
        [](const farray & p, const farray & q, int64_t n_trials, uint64_t seed, const std::string & rule) {
            if (rule != "rejection" && rule != "match" && rule != "keyed") {
                throw std::invalid_argument("rule must be 'rejection', 'match' or 'keyed'");
            }
            const bool match = rule == "match";
            const bool keyed = rule == "keyed";
            std::vector<token_dist> pd = rows_to_dists(p, "p");
            std::vector<token_dist> qd = rows_to_dists(q, "q");
            const int32_t           n  = (int32_t) qd.size();
            if ((int32_t) pd.size() != n + 1 || p.shape(1) != q.shape(1)) {
                throw std::invalid_argument("p must be [n_draft + 1, vocab] and q [n_draft, vocab]");
            }
            if (n_trials < 1) {
                throw std::invalid_argument("n_trials must be >= 1");
            }
            const int32_t      n_vocab = (int32_t) p.shape(1);
            py::array_t<int32_t> out(std::vector<py::ssize_t>{(py::ssize_t) n_trials, n + 1});
            int32_t *          o = out.mutable_data();
            {
                py::gil_scoped_release   nogil;
                rng_t                    rng(seed);
                acceptance_scratch       scratch;
                std::vector<llama_token> draft(n);
                for (int64_t t = 0; t < n_trials; ++t) {
                    const uint64_t key = keyed ? rng() : 0;  // (a key per trial, positions 0..n_draft)
                    for (int32_t i = 0; i < n; ++i) {
                        draft[i] = keyed ? sample_keyed(qd[i], key, i) : sample(qd[i], rng);
                    }
                    acceptance_result r = keyed ? accept_keyed(draft.data(), n, pd, key, 0)
                                          : match ? accept_match(draft.data(), n, pd, rng)
                                                  : accept_sampled(draft.data(), n, qd, pd, n_vocab, rng, scratch);
                    int32_t * row = o + t * (n + 1);
                    for (int32_t i = 0; i <= n; ++i) {
                        row[i] = i < r.n_accepted ? draft[i] : (i == r.n_accepted ? r.next : -1);
                    }
                }
            }
            return out;
        },
        py::arg("p"), py::arg("q"), py::arg("n_trials"), py::arg("seed") = 0, py::arg("rule") = "rejection",
        "Run one speculative step n_trials times on fixed per-position target (p) and draft (q) "
        "distributions: drafts are drawn from q, then the rule runs ('rejection', llama.cpp's "
        "sample-and-'match', or 'keyed': both sides' draws keyed by position, a new key per trial). Returns int32 "
        "[n_trials, n_draft + 1]: the emitted tokens of each trial, padded with -1.");
}

}  // namespace specllama_py
