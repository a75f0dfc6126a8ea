// bindings/bind_decoder.cpp: the native decoding loop as one Python call. Arguments become C++ values
// before the GIL is released; the per-step callback takes the GIL back only to report a step
// and to check for Ctrl-C.
#include <array>
#include <map>

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "speculative/decoder.h"

namespace py = pybind11;
using namespace specllama;

namespace specllama_py {

step_callback make_step_callback(const std::optional<py::function> & on_step, bool with_logprobs,
                                 const signal_watch & signals) {
    return [on_step, with_logprobs, &signals](const step_event & ev) -> bool {
        signals.check();
        if (!on_step) {
            return false;
        }
        py::gil_scoped_acquire gil;
        // with GenerateOptions.logprobs, a fifth argument: the tokens' TokenLogprob entries
        py::object r = with_logprobs
                           ? (*on_step)(ev.tokens, to_str(ev.text), ev.n_drafted, ev.n_accepted, ev.logprobs)
                           : (*on_step)(ev.tokens, to_str(ev.text), ev.n_drafted, ev.n_accepted);
        return r.cast<bool>();
    };
}

namespace {

// A decoder is freed with the GIL released: freeing a model or context on an rpc-server talks to
// the server, which may wait (specllama.rpc_guard gives up on such a wait; a wait with the GIL
// held would stop every Python thread).
struct gil_free_delete {
    void operator()(decoder * d) const {
        if (PyGILState_Check()) {
            py::gil_scoped_release nogil;
            delete d;
        } else {
            delete d;
        }
    }
};
using decoder_holder = std::unique_ptr<decoder, gil_free_delete>;

// Decoder.sibling()'s keyword arguments: what each sets in the new decoder's parameters
void apply_sibling_settings(decoder_params & p, const py::kwargs & settings) {
    std::map<std::string, int32_t *> ints = {
        {"n_ctx", &p.ctx.n_ctx},        {"n_batch", &p.ctx.n_batch}, {"n_threads", &p.ctx.n_threads},
        {"n_threads_draft", &p.n_threads_draft}, {"n_draft", &p.n_draft}, {"settle_steps", &p.settle_steps}};
    std::map<std::string, bool *> flags = {{"share_prefill", &p.share_prefill}, {"swa_full", &p.ctx.swa_full},
                                           {"probe_reads", &p.probe_reads}};
    std::map<std::string, std::string *> texts = {
        {"checkpoint_memory", &p.ctx.checkpoint_memory}, {"draft_catch_up", &p.draft_catch_up},
        {"verify_shape", &p.verify_shape},           {"cache_type_k", &p.ctx.type_k},
        {"cache_type_v", &p.ctx.type_v},             {"cache_type_k_draft", &p.type_k_draft},
        {"cache_type_v_draft", &p.type_v_draft},     {"flash_attn", &p.ctx.flash_attn}};
    for (const auto & [k, value] : settings) {
        const std::string key  = k.cast<std::string>();
        const bool        flag = py::isinstance<py::bool_>(value);
        const bool        num  = py::isinstance<py::int_>(value) && !flag;
        const bool        text = py::isinstance<py::str>(value);
        if (ints.count(key) + flags.count(key) + texts.count(key) == 0) {
            throw py::type_error("sibling() got an unexpected keyword argument '" + key +
                                 "' (the models and their placement are this decoder's)");
        }
        if ((ints.count(key) && !num) || (flags.count(key) && !flag) || (texts.count(key) && !text)) {
            throw py::type_error(key + " must be " + (ints.count(key) ? "an int" : flags.count(key) ? "a bool" : "a str") +
                                 ", got " + py::repr(value).cast<std::string>());
        }
        if (ints.count(key)) {
            try {
                *ints[key] = value.cast<int32_t>();
            } catch (const py::cast_error &) {
                throw py::value_error(key + " is out of range, got " + py::repr(value).cast<std::string>());
            }
        } else if (flags.count(key)) {
            *flags[key] = value.cast<bool>();
        } else {
            *texts[key] = value.cast<std::string>();
        }
    }
}

// GenerateOptions(**fields): every field of generate_params by name; an unknown name is a TypeError
void set_options(py::object self, const py::kwargs & fields) {
    for (const auto & kv : fields) {
        const std::string name = py::str(kv.first);
        if (name.empty() || name[0] == '_' || !py::hasattr(py::type::handle_of(self), name.c_str())) {
            throw py::type_error("unknown generation option '" + name + "'");
        }
        py::setattr(self, kv.first, kv.second);
    }
}

}  // namespace

void register_options(py::module_ & m) {
    m.attr("MAX_DRAFT")   = k_max_draft;
    m.attr("MAX_SERVERS") = k_max_servers;

    py::class_<step_prices>(m, "StepPrices",
                            "Prices (ms) the adaptive draft length uses instead of measured times: the same "
                            "prices give the same draft lengths on any machine and under any load.")
        .def(py::init([](double draft_ms, double verify_ms, double verify_token_ms) {
                 return step_prices{draft_ms, verify_ms, verify_token_ms};
             }),
             py::arg("draft_ms"), py::arg("verify_ms"), py::arg("verify_token_ms"))
        .def_readonly("draft_ms", &step_prices::draft_ms, "one draft decode")
        .def_readonly("verify_ms", &step_prices::verify_ms, "a one-token verification")
        .def_readonly("verify_token_ms", &step_prices::verify_token_ms, "each further token of a verification")
        .def("__repr__", [](const step_prices & c) {
            return "StepPrices(draft_ms=" + std::to_string(c.draft_ms) + ", verify_ms=" + std::to_string(c.verify_ms) +
                   ", verify_token_ms=" + std::to_string(c.verify_token_ms) + ")";
        });

    using gp = generate_params;
    py::class_<gp>(m, "GenerateOptions",
                   "What one generation does. Every field has its default here and is checked by the native "
                   "core when a generation starts; GenerateOptions(**fields) sets fields by name.")
        .def(py::init([](const py::kwargs & fields) {
                 auto       p    = std::make_unique<gp>();
                 py::object self = py::cast(p.get(), py::return_value_policy::reference);
                 set_options(self, fields);
                 return p;
             }))
        .def_readwrite("max_tokens", &gp::max_tokens, "tokens to generate at most")
        .def_readwrite("n_draft", &gp::n_draft,
                       "tokens drafted per step: at most (adaptive) or exactly; None: the decoder's n_draft")
        .def_property(
            "temperature", [](const gp & p) { return p.sampling.temperature; },
            [](gp & p, float v) { p.sampling.temperature = v; }, "0 = greedy; > 0 samples")
        .def_property(
            "top_k", [](const gp & p) { return p.sampling.top_k; }, [](gp & p, int32_t v) { p.sampling.top_k = v; },
            "keep the k most likely tokens (0 = all)")
        .def_property(
            "top_p", [](const gp & p) { return p.sampling.top_p; }, [](gp & p, float v) { p.sampling.top_p = v; },
            "nucleus: the smallest set reaching this probability, in (0, 1]")
        .def_property(
            "min_p", [](const gp & p) { return p.sampling.min_p; }, [](gp & p, float v) { p.sampling.min_p = v; },
            "drop tokens below min_p times the most likely one's probability, in [0, 1)")
        .def_readwrite("infill", &gp::infill,
                       "llama.cpp's infill sampler after the chain (llama-server's 'infill' in its sampler list), "
                       "applied to the target's and the draft's distributions alike; needs top_k in [1, 1024]")
        .def_property(
            "logit_bias",
            [](const gp & p) { return std::map<llama_token, float>(p.controls.bias.begin(), p.controls.bias.end()); },
            [](gp & p, const std::map<llama_token, float> & v) { p.controls.bias.assign(v.begin(), v.end()); },
            "{token id: bias} added to the token's logits before the chain (-inf: never drawn), for the target and "
            "the draft alike")
        .def_property(
            "repeat_penalty", [](const gp & p) { return p.controls.repeat; },
            [](gp & p, float v) { p.controls.repeat = v; },
            "llama.cpp's repetition penalty over the last repeat_last_n tokens (prompt, output and drafts before "
            "each position): a counted token's logit divided by it where positive, multiplied where not; 1 = off")
        .def_property(
            "repeat_last_n", [](const gp & p) { return p.controls.last_n; },
            [](gp & p, int32_t v) { p.controls.last_n = v; },
            "tokens the penalties count (0: none; -1: all before the position)")
        .def_property(
            "presence_penalty", [](const gp & p) { return p.controls.presence; },
            [](gp & p, float v) { p.controls.presence = v; }, "subtracted once from a counted token's logit; 0 = off")
        .def_property(
            "frequency_penalty", [](const gp & p) { return p.controls.frequency; },
            [](gp & p, float v) { p.controls.frequency = v; },
            "subtracted per occurrence from a counted token's logit; 0 = off")
        .def_property(
            "thinking_budget", [](const gp & p) { return p.controls.budget.tokens; },
            [](gp & p, int32_t v) { p.controls.budget.tokens = v; },
            "a reasoning model's thinking budget in tokens (llama-server's --reasoning-budget): once that many "
            "tokens of the reply are thinking (after thinking_budget_start, or from the reply's start with "
            "thinking_budget_opened) and none of thinking_budget_ends closed it, thinking_budget_forced follows, "
            "for the target and the draft alike; -1 = none")
        .def_property(
            "thinking_budget_opened", [](const gp & p) { return p.controls.budget.opened; },
            [](gp & p, bool v) { p.controls.budget.opened = v; }, "the prompt opened the thinking")
        .def_property(
            "thinking_budget_start", [](const gp & p) { return p.controls.budget.start; },
            [](gp & p, const std::vector<llama_token> & v) { p.controls.budget.start = v; },
            "the tokens that open the thinking (its opening tag)")
        .def_property(
            "thinking_budget_ends", [](const gp & p) { return p.controls.budget.ends; },
            [](gp & p, const std::vector<std::vector<llama_token>> & v) { p.controls.budget.ends = v; },
            "token sequences that close the thinking (its closing tag)")
        .def_property(
            "thinking_budget_forced", [](const gp & p) { return p.controls.budget.forced; },
            [](gp & p, const std::vector<llama_token> & v) { p.controls.budget.forced = v; },
            "the tokens forced once the budget is spent (a message and the closing tag)")
        .def_property(
            "grammar", [](const gp & p) { return to_str(p.grammar); },
            [](gp & p, const std::string & v) { p.grammar = v; },
            "a GBNF grammar (llama.cpp's) the output must follow: what it rejects is masked out of the target's and "
            "the draft's logits alike at every position; '' = none")
        .def_readwrite("grammar_root", &gp::grammar_root, "the grammar's start rule")
        .def_readwrite("grammar_trigger_patterns", &gp::grammar_trigger_patterns,
                       "a lazy grammar (llama.cpp's, as llama-server's for tool calls): it allows everything until "
                       "the output matches one of these regular expressions, and then follows from the first capture "
                       "group's start (or the match's)")
        .def_readwrite("grammar_trigger_tokens", &gp::grammar_trigger_tokens,
                       "a lazy grammar's trigger tokens: it follows from the first of these in the output")
        .def_property(
            "grammar_thinking",
            [](const gp & p) {
                return p.grammar_thinking.start == thinking_start::open     ? "open" :
                       p.grammar_thinking.start == thinking_start::optional ? "optional" : "";
            },
            [](gp & p, const std::string & v) {
                if (v != "" && v != "optional" && v != "open") {
                    throw py::value_error("grammar_thinking must be '', 'optional' or 'open', got '" + v + "'");
                }
                p.grammar_thinking.start = v == "open" ? thinking_start::open :
                                           v == "optional" ? thinking_start::optional : thinking_start::none;
            },
            "a lazy grammar's: where a reasoning model's reply may open a thinking block ('optional') or starts "
            "inside one its prompt opened ('open'), the grammar reads the reply from after the block's closing "
            "tag on (grammar_thinking_tags), so that a trigger inside the thinking does not start it; '' = the "
            "whole reply")
        .def_property(
            "grammar_thinking_tags",
            [](const gp & p) { return py::make_tuple(p.grammar_thinking.open_tag, p.grammar_thinking.close_tag); },
            [](gp & p, const std::pair<std::string, std::string> & tags) {
                p.grammar_thinking.open_tag  = tags.first;
                p.grammar_thinking.close_tag = tags.second;
            },
            "the opening and closing tags of the thinking block grammar_thinking reads past")
        .def_property(
            "grammar_thinking_calls", [](const gp & p) { return p.grammar_thinking.call_tags; },
            [](gp & p, const std::vector<std::string> & tags) { p.grammar_thinking.call_tags = tags; },
            "tags that also end the thinking block grammar_thinking reads past, and that the grammar reads "
            "from their start on: a tool call's opening tag, where the model may call a tool from inside its "
            "thinking (Qwen3.5's <tool_call>)")
        .def_readwrite("forced_drafts", &gp::forced_drafts,
                       "with a grammar and a draft model: where the grammar leaves no choice of the next characters, "
                       "their tokens are drafted with q = 1 ahead of the draft model, without draft decodes to "
                       "choose them (exact either way)")
        .def_readwrite("device_sampling", &gp::device_sampling,
                       "True: run the sampling chain inside llama_decode, on the device holding the output layer, "
                       "so that only each row's candidates come back to the host, where the generation allows it "
                       "(no grammar, logit bias or penalties, greedy logprobs, top_k 0, DSI, slots); False: whole "
                       "rows of logits come back and the host samples; None (default): True for each model "
                       "offloaded to a GPU. Stats.sampling says which ran")
        .def_readwrite("logprobs", &gp::logprobs,
                       "None, or 0..20: each generated token's log-probability under the target's final "
                       "distribution (the chain's; greedy: the softmax of the logits), with this many likeliest "
                       "tokens at its position (Completion.logprobs)")
        .def_readwrite("cache_reuse", &gp::cache_reuse,
                       "llama-server's --cache-reuse: >= 1 moves runs of at least this many prompt tokens that the "
                       "cache holds at other positions (after an edit in the middle) instead of processing them "
                       "again; the output then follows the target given those moved keys and values, not a fresh "
                       "pass. 0: the common prefix only")
        .def_readwrite("prediction", &gp::prediction,
                       "a prediction of the output in the target's token ids (OpenAI's Predicted Outputs: the text "
                       "an edit mostly repeats); where the output follows it, its next tokens are drafted first, "
                       "at no draft decode; the output is the target's whatever it holds. Mode 'si'; [] (default): "
                       "none")
        .def_readwrite("seed", &gp::seed, "random seed; None: a random one")
        .def_property(
            "stop", [](const gp & p) { return p.stop; },
            [](gp & p, const std::vector<text> & v) {
                p.stop.clear();
                for (const auto & t : v) {
                    p.stop.push_back(t.value);
                }
            },
            "stop strings (not included in the text)")
        .def_readwrite("ignore_eos", &gp::ignore_eos, "keep going past end-of-generation tokens")
        .def_readwrite("preserved_tokens", &gp::preserved_tokens,
                       "special tokens spelled out in the text where generated (a chat format's tags that are "
                       "control tokens, as llama-server's preserved tokens); other control tokens are left out of it")
        .def_readwrite("speculative", &gp::speculative, "False: plain decoding on the target, through the same loop")
        .def_readwrite("adaptive", &gp::adaptive,
                       "choose each step's draft length by expected speed; None: adaptive unless sampling "
                       "with a seed by the rejection or match rule (adaptive lengths follow measured times)")
        .def_property(
            "drafter", [](const gp & p) { return drafter_to_string(p.drafter); },
            [](gp & p, const std::string & v) { p.drafter = drafter_from_string(v); },
            "'auto' (model+lookup with a draft model, the model alone in DSI, plain decoding without "
            "one), 'model', 'lookup' (no draft model needed) or 'model+lookup'")
        .def_property(
            "acceptance",
            [](const gp & p) { return p.rule ? std::optional<std::string>(accept_rule_to_string(*p.rule)) : std::nullopt; },
            [](gp & p, const std::optional<std::string> & v) {
                p.rule = v ? std::optional<accept_rule>(accept_rule_from_string(*v)) : std::nullopt;
            },
            "'rejection' (Leviathan et al.'s rule), 'match' (llama.cpp's sample-and-match, for comparison) or "
            "'keyed' (match with draws keyed by position, the draft's too: the output is plain decoding's "
            "with the same seed, whatever is drafted; a seed then leaves the draft length adaptive); None: "
            "keyed when sampling with a seed (mode si), else rejection")
        .def_readwrite("prices", &gp::prices,
                       "StepPrices for the adaptive rule instead of measured times; None: measured")
        .def_property(
            "mode", [](const gp & p) { return decode_mode_to_string(p.mode); },
            [](gp & p, const std::string & v) { p.mode = decode_mode_from_string(v); },
            "'si' (speculative decoding) or 'dsi' (Distributed Speculative Inference)")
        .def_property(
            "sp", [](const gp & p) { return p.dsi.sp; }, [](gp & p, int32_t v) { p.dsi.sp = v; },
            "DSI: target servers")
        .def_property(
            "lookahead", [](const gp & p) { return p.dsi.lookahead; }, [](gp & p, int32_t v) { p.dsi.lookahead = v; },
            "DSI: drafted tokens per verification task")
        .def_property(
            "threads_draft", [](const gp & p) { return p.dsi.n_threads_draft; },
            [](gp & p, int32_t v) { p.dsi.n_threads_draft = v; },
            "DSI: drafter threads (0: split the decoder's threads)")
        .def_property(
            "threads_server", [](const gp & p) { return p.dsi.n_threads_server; },
            [](gp & p, int32_t v) { p.dsi.n_threads_server = v; },
            "DSI: threads per target server (0: split the decoder's threads)")
        .def_property(
            "overlap", [](const gp & p) { return p.dsi.overlap; }, [](gp & p, bool v) { p.dsi.overlap = v; },
            "DSI: False runs SI on the same code path (each verification waited for)")
        .def_property(
            "wait_for_drafts", [](const gp & p) { return p.dsi.wait_for_drafts; },
            [](gp & p, bool v) { p.dsi.wait_for_drafts = v; },
            "DSI: use the target's prediction at a position only once the drafter has proposed there, so "
            "every token is a judged draft whatever the timing")
        .def_readwrite("draft_ahead", &gp::draft_ahead,
                       "draft this many tokens past each step's drafts while the target verifies them (0: off); "
                       "needs adaptive=False and the draft model, mode 'si'")
        .def_readwrite("record_steps", &gp::record_steps,
                       "keep a record of every step in Stats.steps (what was drafted, with what confidence, "
                       "what it cost, what was kept): for looking into the draft length (mode 'si')")
        .def("copy", [](const gp & p) { return gp(p); }, "an independent copy")
        .def("validate", &generate_params_validate, "raise ValueError naming the first bad field");
}

void register_decoder(py::module_ & m) {
    register_options(m);
    register_stats(m);
    {
        // the decoder's defaults, for the Python signature and the CLI (defined once, here)
        const decoder_params d;
        py::dict             defaults;
        defaults["n_ctx"]              = d.ctx.n_ctx;
        defaults["n_batch"]            = d.ctx.n_batch;
        defaults["n_threads"]          = d.ctx.n_threads;
        defaults["n_threads_draft"]    = d.n_threads_draft;
        defaults["n_gpu_layers"]       = d.target.n_gpu_layers;
        defaults["n_gpu_layers_draft"] = d.target.n_gpu_layers;
        defaults["n_draft"]            = d.n_draft;
        defaults["share_prefill"]      = d.share_prefill;
        defaults["swa_full"]           = d.ctx.swa_full;
        defaults["checkpoint_memory"]  = d.ctx.checkpoint_memory;
        defaults["draft_catch_up"]     = d.draft_catch_up;
        defaults["verify_shape"]       = d.verify_shape;
        defaults["settle_steps"]       = d.settle_steps;
        defaults["probe_reads"]        = d.probe_reads;
        defaults["cache_type_k"]       = d.ctx.type_k;
        defaults["cache_type_v"]       = d.ctx.type_v;
        defaults["cache_type_k_draft"] = d.type_k_draft;
        defaults["cache_type_v_draft"] = d.type_v_draft;
        defaults["flash_attn"]         = d.ctx.flash_attn;
        m.attr("DECODER_DEFAULTS")     = defaults;
    }

    py::class_<decoder, decoder_holder>(m, "Decoder", "A target model, an optional draft model, and their KV caches.")
        .def(py::init([](const fs_path & target, std::optional<fs_path> draft, int32_t n_ctx,
                         int32_t n_batch, int32_t n_threads, int32_t n_threads_draft, int32_t n_gpu_layers,
                         int32_t n_gpu_layers_draft, int32_t n_draft, bool share_prefill, bool swa_full,
                         const py::object & device, const py::object & device_draft, const std::string & split_mode,
                         const std::optional<std::vector<float>> & tensor_split, int32_t main_gpu,
                         const std::vector<py::object> & dsi_devices, const std::string & checkpoint_memory,
                         const std::string & draft_catch_up, const std::string & verify_shape, int32_t settle_steps,
                         bool probe_reads, const std::array<std::string, 4> & cache_types,
                         const std::string & flash_attn) {
                 decoder_params p;
                 p.target.path         = target.value;
                 p.target.n_gpu_layers = n_gpu_layers;
                 p.target.place        = to_placement(device, split_mode, tensor_split, main_gpu);
                 if (draft) {
                     model_params d;
                     d.path          = draft->value;
                     d.n_gpu_layers  = n_gpu_layers_draft;
                     d.place.devices = to_devices(device_draft, "device_draft");
                     p.draft         = d;
                 }
                 for (const auto & dev : dsi_devices) {
                     placement pl;
                     pl.devices = to_devices(dev, "dsi_devices");
                     if (pl.devices.empty()) {
                         throw py::value_error("dsi_devices: each server needs a device ('none' for the CPU)");
                     }
                     p.dsi_servers.push_back(pl);
                 }
                 p.ctx.n_ctx       = n_ctx;
                 p.ctx.n_batch     = n_batch;
                 p.ctx.n_threads   = n_threads;
                 p.ctx.swa_full    = swa_full;
                 p.ctx.checkpoint_memory = checkpoint_memory;
                 p.n_threads_draft = n_threads_draft;
                 p.n_draft         = n_draft;
                 p.share_prefill   = share_prefill;
                 p.draft_catch_up  = draft_catch_up;
                 p.verify_shape    = verify_shape;
                 p.settle_steps    = settle_steps;
                 p.probe_reads     = probe_reads;
                 p.ctx.type_k      = cache_types[0];
                 p.ctx.type_v      = cache_types[1];
                 p.type_k_draft    = cache_types[2];
                 p.type_v_draft    = cache_types[3];
                 p.ctx.flash_attn  = flash_attn;
                 py::gil_scoped_release nogil;
                 return decoder_holder(new decoder(p));
             }),
             py::arg("target"), py::arg("draft") = py::none(), py::arg("n_ctx") = context_params{}.n_ctx,
             py::arg("n_batch") = context_params{}.n_batch, py::arg("n_threads") = context_params{}.n_threads,
             py::arg("n_threads_draft") = decoder_params{}.n_threads_draft,
             py::arg("n_gpu_layers") = model_params{}.n_gpu_layers,
             py::arg("n_gpu_layers_draft") = model_params{}.n_gpu_layers, py::arg("n_draft") = decoder_params{}.n_draft,
             py::arg("share_prefill") = decoder_params{}.share_prefill, py::arg("swa_full") = context_params{}.swa_full,
             py::arg("device") = py::none(), py::arg("device_draft") = py::none(),
             py::arg("split_mode") = placement{}.split_mode, py::arg("tensor_split") = py::none(),
             py::arg("main_gpu") = placement{}.main_gpu, py::arg("dsi_devices") = std::vector<py::object>{},
             py::arg("checkpoint_memory") = context_params{}.checkpoint_memory,
             py::arg("draft_catch_up") = decoder_params{}.draft_catch_up,
             py::arg("verify_shape") = decoder_params{}.verify_shape,
             py::arg("settle_steps") = decoder_params{}.settle_steps,
             py::arg("probe_reads") = decoder_params{}.probe_reads,
             py::arg("cache_types") = std::array<std::string, 4>{"f16", "f16", "f16", "f16"},
             py::arg("flash_attn") = context_params{}.flash_attn)
        .def_property_readonly("n_draft", &decoder::n_draft)
        .def_property_readonly("draft_catch_up", &decoder::draft_catch_up, "'batch', 'tokens' ('' without a draft)")
        .def_property_readonly("verify_shape", &decoder::verify_shape,
                               "'exact', 'padded', or 'auto' (padded where the target samples on its device)")
        .def_property_readonly("settle_steps", &decoder::settle_steps,
                               "steps of a run of drafting (or plain) steps the adaptive length takes as transitions")
        .def_property_readonly("probe_reads", &decoder::probe_reads,
                               "whether a paused draft's probes read first where settle_steps is above 0")
        .def_property_readonly("n_ctx", &decoder::n_ctx)
        .def_property_readonly("shares_prefill", &decoder::shares_prefill)
        .def_property_readonly(
            "cross_vocab",
            [](const decoder & d) -> py::object {
                const vocab_map * v = d.cross_vocab();
                if (v == nullptr) {
                    return py::none();
                }
                py::dict out;
                out["n_shared"]     = v->n_shared();
                out["draft_share"]  = v->draft_share();
                out["target_share"] = v->target_share();
                return out;
            },
            "None when the draft shares the target's vocabulary; else how the two pair: n_shared tokens, "
            "as shares of the draft's and of the target's tokens")
        .def_property_readonly("has_draft", [](const decoder & d) { return d.draft() != nullptr; })
        .def_property_readonly("target_model", &decoder::target_shared)
        .def_property_readonly("draft_model", &decoder::draft_shared)
        .def("cached_tokens", [](const decoder & d) {
            py::gil_scoped_release nogil;
            return d.cached_tokens();
        })
        .def("draft_cached_tokens", [](const decoder & d) {
            py::gil_scoped_release nogil;
            return d.draft_cached_tokens();
        }, "tokens in the draft's cache (its own vocabulary's)")
        .def("draft_view_of", &decoder::draft_view_of, py::arg("target_tokens"),
             "target tokens as the draft reads them: the same tokens with one vocabulary, else each as its "
             "partner in the draft's vocabulary or spelled with draft tokens")
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
                 out["paused"] = m.paused();
                 out["probe_gap"] = m.probe_gap();  // steps a paused model sits out before its next probe
                 out["pays_at_prices"] = m.pays_at_prices();  // the prediction before drafting is measured
                 out["draft_token_ms"] = m.draft_token_ms();  // a draft prompt token (prices a probe's catch-up)
                 out["checkpoint_ms"]  = m.checkpoint_ms();   // a recurrent target's save where a prompt ends
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
        .def("adaptive_state", [](const decoder & d) {
            py::gil_scoped_release nogil;  // (it waits for a running generation, whose callbacks need the GIL)
            return d.adaptive_state();
        }, "what the adaptive draft length has learned (DraftLengthModel.state)")
        .def("set_adaptive_state", [](decoder & d, const std::vector<double> & state) {
            py::gil_scoped_release nogil;
            d.set_adaptive_state(state);
        }, py::arg("state"),
             "start the adaptive draft length from a state an earlier decoder of the same pair, machine and "
             "settings learned (ValueError where it is not one of this format; nothing changes then)")
        .def("reset", [](decoder & d) {
            py::gil_scoped_release nogil;
            d.reset();
        })
        .def(
            "warm_up",
            [](decoder & d) {
                py::gil_scoped_release nogil;
                d.warm_up();
            },
            "decode once, and roll back, each shape a generation's steps use, then price the target's steps "
            "for the adaptive rule (done on creation where a model is on a local GPU); the caches keep what "
            "they hold")
        .def(
            "slots",
            [](decoder & d, int32_t n, int32_t n_ctx, int32_t max_wait_us) {
                std::vector<std::unique_ptr<decoder>> made;
                {
                    py::gil_scoped_release nogil;  // waits for a running generation of d
                    made = d.slots(n, n_ctx, max_wait_us);
                }
                py::list out;
                for (auto & s : made) {
                    out.append(py::cast(decoder_holder(s.release())));
                }
                return out;
            },
            py::arg("n"), py::arg("n_ctx") = 0, py::arg("max_wait_us") = 100000,
            "n decoders on these models (not loaded again) whose caches, of n_ctx positions each (0: this "
            "one's), are sequences of one context per model. One native thread runs all their decodes and "
            "merges those sent at the same time: slots generating in parallel threads verify in one "
            "llama_decode and draft in one. max_wait_us: how long a decode is held for slots still busy "
            "between decodes.")
        .def(
            "sibling",
            [](const decoder & d, const py::kwargs & settings) {
                decoder_params p = d.settings();
                apply_sibling_settings(p, settings);
                py::gil_scoped_release nogil;
                return decoder_holder(d.sibling(p).release());
            },
            "a decoder on these models (not loaded again) with caches and an adaptive draft length of its "
            "own; keyword arguments change settings (n_ctx, n_batch, n_threads, n_threads_draft, n_draft, "
            "share_prefill, swa_full, checkpoint_memory, draft_catch_up, verify_shape, settle_steps), the "
            "rest are this one's")
        .def_property_readonly("is_slot", &decoder::is_slot, "whether this decoder is one of slots()'s")
        .def_property_readonly("slot_decodes", &decoder::slot_decodes,
                               "llama_decode calls this slot's group has made")
        .def(
            "slot_round_rates",
            [](const decoder & d, int32_t n_generating) {
                py::dict             out;
                std::vector<double> model, lookup;
                if (const batch_drafting * b = d.slot_drafting()) {
                    for (int32_t k = 0; k <= d.n_draft(); ++k) {
                        model.push_back(b->rate(n_generating, k));
                        lookup.push_back(b->lookup_rate(n_generating, k));
                    }
                }
                out["model"]  = model;
                out["lookup"] = lookup;
                out["acceptance"] = d.slot_drafting() ? d.slot_drafting()->acceptance() : -1.0;
                return out;
            },
            py::arg("n_generating"),
            "for a slot: its group's expected tokens per ms of a round of n_generating slots, by k = 0, 1, ...: "
            "'model': every slot drafts k tokens with the model; 'lookup': one slot adds k prompt-lookup drafts "
            "to plain steps (negative while not priced; empty lists for a decoder that is not a slot); 'acceptance': "
            "the rate at which the target kept the model drafts it judged (negative while none was)")
        .def_property_readonly("slot_chunks", &decoder::slot_chunks,
                               "the slots' decodes merged into them (slot_chunks / slot_decodes: slots per decode)")
        .def(
            "generate",
            [](decoder & d, const std::vector<llama_token> & prompt, const generate_params & options,
               std::optional<py::function> on_step) {
                const signal_watch signals;
                step_callback      cb = make_step_callback(on_step, options.logprobs.has_value(), signals);
                generate_result    res;
                {
                    py::gil_scoped_release nogil;
                    res = d.generate(prompt, options, cb, [&signals] { signals.check(); });
                }
                return res;
            },
            py::arg("prompt"), py::arg("options"), py::arg("on_step") = py::none(),
            "Generate after prompt (token ids). on_step(tokens, text, n_drafted, n_accepted) runs after "
            "every verification step (with options.logprobs set, a fifth argument: the tokens' TokenLogprob "
            "entries); returning True stops.")
        .def("drafter_name", &decoder::drafter_name, py::arg("options"),
             "who drafts in a generation with these options: 'model', 'lookup', 'model+lookup' or 'none'")
        .def("validate", &decoder::validate, py::arg("options"),
             "raise ValueError naming the first option this decoder cannot run with");
}

}  // namespace specllama_py
