// bindings/bind_model.cpp: Model (a loaded GGUF) and Context (a KV cache with decode and rollback) for
// experiments driven from Python, plus quantization and logging switches.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <optional>

#include "bindings.h"
#include "engine/cpu.h"
#include "engine/kv_cache.h"
#include "engine/llama_log.h"
#include "engine/model.h"
#include "engine/model_identity.h"
#include "engine/quantize.h"
#include "engine/vocab.h"

namespace py = pybind11;
using namespace specllama;

namespace specllama_py {

namespace {

// a kv_cache plus a lock: Python threads may share one Context
struct py_context {
    std::shared_ptr<model> mdl;
    kv_cache               cache;
    std::mutex             mutex;

    py_context(std::shared_ptr<model> m, const context_params & p) : mdl(m), cache(m, p) {}
};

}  // namespace

void register_model(py::module_ & m) {
    py::class_<model, std::shared_ptr<model>>(m, "Model", "A GGUF model loaded by llama.cpp.")
        .def(py::init([](const fs_path & path, int32_t n_gpu_layers, const py::object & device,
                         const std::string & split_mode, const std::optional<std::vector<float>> & tensor_split,
                         int32_t main_gpu) {
                 model_params p;
                 p.path         = path.value;
                 p.n_gpu_layers = n_gpu_layers;
                 p.place        = to_placement(device, split_mode, tensor_split, main_gpu);
                 py::gil_scoped_release nogil;
                 return model_load(p);
             }),
             py::arg("path"), py::arg("n_gpu_layers") = 0, py::arg("device") = py::none(),
             py::arg("split_mode") = placement{}.split_mode, py::arg("tensor_split") = py::none(),
             py::arg("main_gpu") = placement{}.main_gpu,
             "Load a GGUF. device: where its offloaded layers go ('CUDA0', 'CUDA0,CUDA1', an rpc-server's "
             "'HOST:PORT', 'none'; None: every GPU), split_mode / tensor_split / main_gpu: how it spans several "
             "(as llama.cpp's -sm, -ts, -mg).")
        .def_property_readonly("path", [](const model & mdl) { return mdl.path; })
        .def_property_readonly("n_vocab", [](const model & mdl) { return mdl.n_vocab; })
        .def_property_readonly("description", &model_describe)
        .def_property_readonly("chat_template", [](const model & mdl) { return model_chat_template(mdl); })
        .def("named_chat_template", &model_chat_template, py::arg("name"),
             "The GGUF's chat template of that name (tokenizer.chat_template.NAME: 'tool_use', 'rag', ...); '' "
             "where it has none.")
        .def_property_readonly("bos", [](const model & mdl) { return llama_vocab_bos(mdl.vocab); })
        .def_property_readonly("eos", [](const model & mdl) { return llama_vocab_eos(mdl.vocab); })
        .def_property_readonly(
            "fim_tokens",
            [](const model & mdl) {
                const llama_vocab * v = mdl.vocab;
                py::dict            out;
                out["pre"] = llama_vocab_fim_pre(v);
                out["suf"] = llama_vocab_fim_suf(v);
                out["mid"] = llama_vocab_fim_mid(v);
                out["pad"] = llama_vocab_fim_pad(v);
                out["rep"] = llama_vocab_fim_rep(v);
                out["sep"] = llama_vocab_fim_sep(v);
                return out;
            },
            "the fill-in-the-middle tokens the model's vocabulary names (pre, suf, mid, pad, rep, sep; -1 "
            "where it has none)")
        .def_property_readonly("add_bos", [](const model & mdl) { return llama_vocab_get_add_bos(mdl.vocab); },
                               "Whether tokenize(add_special=True) puts the BOS token first.")
        .def_property_readonly("n_ctx_train", [](const model & mdl) { return llama_model_n_ctx_train(mdl.get()); })
        .def_property_readonly("size", [](const model & mdl) { return llama_model_size(mdl.get()); })
        .def_property_readonly(
            "weight_buffers",
            [](const model & mdl) {
                py::dict d;
                for (const auto & [name, mib] : mdl.weight_buffers) {
                    d[py::str(name)] = mib;
                }
                return d;
            },
            "Where llama.cpp put the weights: each buffer type's name ('CPU_Mapped', 'CPU_REPACK' for "
            "quantized weights repacked for the CPU's kernels, 'CUDA0', ...) and its size in MiB.")
        .def("is_eog", [](const model & mdl, llama_token t) { return llama_vocab_is_eog(mdl.vocab, t); },
             py::arg("token"), "Whether llama.cpp counts this token as an end of generation.")
        .def_property_readonly("eog_ids", [](const model & mdl) { return mdl.eog_ids; },
                               "The end-of-generation tokens the decoding loop stops at, read from the vocabulary "
                               "when the model loads.")
        .def(
            "tokenize",
            [](const model & mdl, const text & t, bool add_special, bool parse_special, std::optional<int64_t> max_tokens) {
                py::gil_scoped_release nogil;
                return tokenize_bounded(mdl, t.value, add_special, parse_special, max_tokens.value_or(-1));
            },
            py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false,
            py::arg("max_tokens") = py::none(),
            "Token ids of text (NUL bytes included). With max_tokens, a text of more tokens raises ValueError "
            "after tokenizing a bounded prefix of it, however long it is.")
        .def_property_readonly("max_piece_bytes", [](const model & mdl) { return mdl.max_piece_bytes; },
                               "The longest token's text, in bytes.")
        .def("token_to_piece",
             [](const model & mdl, llama_token t, bool special) {
                 return py::bytes(token_to_piece(mdl, t, special));
             },
             py::arg("token"), py::arg("special") = false)
        .def("detokenize",
             [](const model & mdl, const std::vector<llama_token> & toks, bool special, bool whole) {
                 std::string s;
                 if (whole) {
                     for (llama_token t : toks) {
                         if (t < 0 || t >= mdl.n_vocab) {
                             throw std::invalid_argument("token id " + std::to_string(t) + " outside the vocabulary");
                         }
                     }
                     s.resize(toks.size() * 4 + 16);
                     int32_t n = llama_detokenize(mdl.vocab, toks.data(), (int32_t) toks.size(), s.data(),
                                                  (int32_t) s.size(), false, special);
                     if (n < 0) {
                         s.resize(-n);
                         n = llama_detokenize(mdl.vocab, toks.data(), (int32_t) toks.size(), s.data(), (int32_t) s.size(),
                                              false, special);
                     }
                     s.resize(std::max(n, 0));
                     return to_str(s);
                 }
                 for (llama_token t : toks) {
                     s += token_to_piece(mdl, t, special);
                 }
                 return to_str(s);
             },
             py::arg("tokens"), py::arg("special") = false, py::arg("whole") = false,
             "The tokens' text: their pieces one after another, or (whole) as llama.cpp's llama_detokenize "
             "renders a whole text (a SentencePiece tokenizer's space in front of the first word dropped)")
        .def("token_text",
             [](const model & mdl, llama_token t) {
                 if (t < 0 || t >= mdl.n_vocab) {
                     throw std::invalid_argument("token id " + std::to_string(t) + " outside the vocabulary");
                 }
                 return to_str(llama_vocab_get_text(mdl.vocab, t));
             });

    m.def("vocab_difference", &vocab_difference, py::arg("target"), py::arg("draft"),
          "The first difference between draft's vocabulary and target's, in words; '' when they are one "
          "(a draft with another vocabulary drafts by token-level intersection).");
    m.def(
        "model_identity",
        [](const fs_path & path) {
            model_identity id;
            {
                py::gil_scoped_release nogil;
                id = read_identity(path.value);
            }
            py::dict e;
            e["architecture"] = id.architecture;
            e["type"]         = id.type;
            e["name"]         = id.name;
            e["basename"]     = id.basename;
            e["finetune"]     = id.finetune;
            e["size_label"]   = id.size_label;
            e["n_params"]     = id.n_params;
            e["n_block"]      = id.n_block;
            e["n_vocab"]      = id.n_vocab;
            e["vocab_hash"]   = id.vocab_hash;
            e["split_no"]     = id.split_no;
            e["split_count"]  = id.split_count;
            return e;
        },
        py::arg("path"),
        "What a GGUF file is, from its metadata and tensor table (no weights are read): architecture, type, name, "
        "basename, finetune, size_label (general.*; '' where absent), n_params (elements of this file's tensors), "
        "n_block (its tensors of model layers), n_vocab, vocab_hash (over the tokenizer's model and every token's "
        "text: equal for files of one vocabulary), split_no and split_count. A file ggml cannot parse is a "
        "ValueError.");
    m.def(
        "chat_apply_template",
        [](const text & tmpl, const std::vector<std::pair<text, text>> & messages, bool add_assistant) {
            std::vector<std::pair<std::string, std::string>> msgs;
            for (const auto & m : messages) {
                msgs.emplace_back(m.first.value, m.second.value);
            }
            return to_str(chat_apply_template(tmpl.value, msgs, add_assistant));
        },
        py::arg("template"), py::arg("messages"), py::arg("add_assistant") = true);
    m.def("quantize_types", &quantize_types);
    m.def(
        "chat_builtin_templates",
        [] {
            std::vector<const char *> names(llama_chat_builtin_templates(nullptr, 0));
            llama_chat_builtin_templates(names.data(), names.size());
            return std::vector<std::string>(names.begin(), names.end());
        },
        "the names of llama.cpp's built-in chat templates (chat_apply_template takes one as its template)");
    m.def(
        "quantize",
        [](const fs_path & in, const fs_path & out, const std::string & type, int32_t n_threads) {
            py::gil_scoped_release nogil;
            model_quantize(in.value, out.value, type, n_threads);
        },
        py::arg("src"), py::arg("dst"), py::arg("type"), py::arg("n_threads") = 0);
    m.def("log_set_level", &log_set_level, py::arg("level"),
          "Show llama.cpp messages at or above level (0 none, 1 debug, 2 info, 3 warn, 4 error).");
    m.def("log_reclaim", &backend_init,
          "Route llama.cpp's log through specllama's filter again, where another user of libllama in this process "
          "(llama-cpp-python, when imported) has set its own.");
    m.def("supports_gpu_offload", &llama_supports_gpu_offload);
    m.def(
        "check_text",
        [](py::handle obj, const std::string & what) {
            if (!PyUnicode_Check(obj.ptr())) {
                throw py::type_error(what + " must be str, not " + std::string(Py_TYPE(obj.ptr())->tp_name));
            }
            Py_ssize_t n = 0;
            if (PyUnicode_AsUTF8AndSize(obj.ptr(), &n) == nullptr) {
                PyErr_Clear();
                throw py::value_error(not_utf8_message(obj.ptr(), what));
            }
            return n;
        },
        py::arg("text"), py::arg("what") = "the text",
        "The UTF-8 length of text in bytes; ValueError saying where and how to fix it when UTF-8 cannot "
        "carry it (a lone surrogate, as Python makes from bytes that are not UTF-8).");
    m.def("cpu_cores", [] { return py::make_tuple(physical_cores(), logical_cores()); },
          "(physical, logical) cores this process may run on; the default thread count is the physical.");

    py::class_<py_context>(m, "Context",
                           "A context on a Model: its KV cache, batch decoding with logits, and rollback.")
        .def(py::init([](std::shared_ptr<model> mdl, int32_t n_ctx, int32_t n_batch, int32_t n_threads,
                         bool swa_full, const std::string & checkpoint_memory, const std::string & cache_type_k,
                         const std::string & cache_type_v, const std::string & flash_attn) {
                 context_params p;
                 p.type_k     = cache_type_k;
                 p.type_v     = cache_type_v;
                 p.flash_attn = flash_attn;
                 p.n_ctx     = n_ctx;
                 p.n_batch   = n_batch;
                 p.n_threads = n_threads;
                 p.swa_full  = swa_full;
                 p.checkpoint_memory = checkpoint_memory;
                 py::gil_scoped_release nogil;
                 return std::make_unique<py_context>(mdl, p);
             }),
             py::arg("model"), py::arg("n_ctx") = 2048, py::arg("n_batch") = 512, py::arg("n_threads") = 0,
             py::arg("swa_full") = true, py::arg("checkpoint_memory") = context_params{}.checkpoint_memory,
             py::arg("cache_type_k") = context_params{}.type_k, py::arg("cache_type_v") = context_params{}.type_v,
             py::arg("flash_attn") = context_params{}.flash_attn)
        .def_property_readonly("model", [](const py_context & c) { return c.mdl; })
        .def_property_readonly("n_ctx", [](const py_context & c) { return c.cache.n_ctx(); })
        .def_property_readonly("n_past", [](py_context & c) {
            py::gil_scoped_release      nogil;  // never wait for the lock while holding the GIL
            std::lock_guard<std::mutex> lock(c.mutex);
            return c.cache.n_past();
        })
        .def_property_readonly("tokens", [](py_context & c) {
            std::vector<llama_token>    toks;
            py::gil_scoped_release      nogil;
            std::lock_guard<std::mutex> lock(c.mutex);
            toks = c.cache.tokens();
            return toks;
        })
        .def(
            "decode",
            [](py_context & c, const std::vector<llama_token> & toks, bool all_logits) {
                const int32_t n       = (int32_t) toks.size();
                const int32_t n_vocab = c.mdl->n_vocab;
                py::array_t<float> out(std::vector<py::ssize_t>{all_logits ? n : (n > 0 ? 1 : 0), n_vocab});
                float * data = out.mutable_data();
                {
                    py::gil_scoped_release nogil;
                    std::lock_guard<std::mutex> lock(c.mutex);
                    c.cache.decode(toks.data(), n, all_logits, data, check_signals);
                }
                return out;
            },
            py::arg("tokens"), py::arg("all_logits") = true,
            "Append tokens to the cache; return logits as float32 [n, n_vocab] (all_logits) or [1, n_vocab].")
        .def(
            "rollback",
            [](py_context & c, int32_t n_keep) {
                py::gil_scoped_release      nogil;
                std::lock_guard<std::mutex> lock(c.mutex);
                c.cache.rollback(n_keep);
            },
            py::arg("n_keep"),
            "Keep the first n_keep cached tokens and drop the rest (a recurrent or hybrid model: back to the last "
            "checkpoint at or before n_keep, then the tokens from there decoded again)")
        .def(
            "restart_at",
            [](py_context & c, const std::vector<llama_token> & seq, int32_t n_from) {
                py::gil_scoped_release      nogil;
                std::lock_guard<std::mutex> lock(c.mutex);
                c.cache.restart_at(seq, n_from);
            },
            py::arg("seq"), py::arg("n_from"),
            "Empty the cache and go on from position n_from of seq: tokens becomes seq[:n_from], none of which "
            "the memory holds (later tokens attend only to what follows them); a rollback into them empties "
            "the cache")
        .def(
            "keep_reusable",
            [](py_context & c, const std::vector<llama_token> & seq, int32_t n_min, std::optional<int32_t> n_max) {
                kv_cache::reuse_result r;
                {
                    py::gil_scoped_release      nogil;
                    std::lock_guard<std::mutex> lock(c.mutex);
                    r = c.cache.keep_reusable(seq, n_max.value_or((int32_t) seq.size()), n_min, check_signals);
                }
                return py::make_tuple(r.n_kept, r.n_shifted, r.n_decoded);
            },
            py::arg("seq"), py::arg("n_min"), py::arg("n_max") = py::none(),
            "Keep what the cache shares with seq (at most n_max tokens): the common prefix, and beyond it runs of "
            "at least n_min tokens held at other positions, moved to their positions in seq, with the tokens "
            "between them decoded (llama-server's --cache-reuse, also after inserted text). Returns (n_kept, "
            "n_shifted, n_decoded): tokens now holds seq[:n_kept]. The moved keys and values were computed after "
            "the old text, so what follows is close to, not exactly, a fresh pass over seq.")
        .def_property_readonly("can_reuse", [](const py_context & c) { return c.cache.can_reuse(); },
                               "whether keep_reusable can move keys and values here (a model with plain attention)")
        .def_property_readonly("n_forgotten", [](py_context & c) {
            py::gil_scoped_release      nogil;
            std::lock_guard<std::mutex> lock(c.mutex);
            return c.cache.n_forgotten();
        }, "leading positions the memory does not hold (restart_at); 0 normally")
        .def_property_readonly("recurrent", [](const py_context & c) { return c.cache.recurrent(); },
                               "whether the model's memory is recurrent or hybrid (every rollback by checkpoint)")
        .def_property_readonly("checkpoint_memory", [](const py_context & c) { return std::string(c.cache.checkpoint_memory()); },
                               "where checkpoint() saves: 'device' (a copy within the memory that holds the state, "
                               "llama.cpp's on-device flag) or 'host'; '' where the memory takes no checkpoints")
        .def_property_readonly("window_only", [](const py_context & c) { return c.cache.window_only(); },
                               "whether a sliding-window model's window layers keep only the window (swa_full=False): "
                               "rollback further back than the window goes back to a checkpoint")
        .def_property_readonly("n_redecoded", [](py_context & c) {
            py::gil_scoped_release      nogil;
            std::lock_guard<std::mutex> lock(c.mutex);
            return c.cache.n_redecoded();
        }, "tokens decoded again after restoring a checkpoint, or from the start where none was saved")
        .def(
            "checkpoint",
            [](py_context & c) {
                py::gil_scoped_release      nogil;
                std::lock_guard<std::mutex> lock(c.mutex);
                c.cache.checkpoint();
            },
            "A recurrent or hybrid model: save its state now, for rollback to any length from here on (a no-op "
            "for other memories); replaces the previous one.")
        .def(
            "keep_checkpoint",
            [](py_context & c) {
                py::gil_scoped_release      nogil;
                std::lock_guard<std::mutex> lock(c.mutex);
                c.cache.keep_checkpoint();
            },
            "A recurrent, hybrid or window-only memory: save its state now in a checkpoint that checkpoint() "
            "leaves in place (where a prompt ends); a no-op for a KV cache.")
        .def(
            "set_n_threads",
            [](py_context & c, int32_t n) {
                py::gil_scoped_release      nogil;
                std::lock_guard<std::mutex> lock(c.mutex);
                c.cache.set_n_threads(n);
            },
            py::arg("n_threads"),
            "Decode on n_threads threads from now on; 0 or -1: the count the context was made with, which where it "
            "was -1 and the model runs on the CPU alone is tuned by measuring the decodes.")
        .def_property_readonly("n_threads", [](py_context & c) {
            py::gil_scoped_release      nogil;
            std::lock_guard<std::mutex> lock(c.mutex);
            return c.cache.n_threads();
        }, "the CPU threads decodes use now (the tuned count, where tuned)")
        .def_property_readonly("threads_tuned", [](py_context & c) {
            py::gil_scoped_release      nogil;
            std::lock_guard<std::mutex> lock(c.mutex);
            return c.cache.tuning_threads();
        }, "whether the thread count is tuned by measuring the decodes (ThreadTuner): n_threads -1, and the "
           "model on the CPU alone")
        .def_property_readonly("n_thread_probes", [](py_context & c) {
            py::gil_scoped_release      nogil;
            std::lock_guard<std::mutex> lock(c.mutex);
            return c.cache.n_thread_probes();
        }, "decodes run at another thread count than the tuned one, to compare");
}

}  // namespace specllama_py
