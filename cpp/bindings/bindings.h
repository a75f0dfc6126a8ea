// bindings/bindings.h: one register_<thing>(module) per binding file; shared conversions.
#pragma once

#include <pybind11/pybind11.h>

#include <csignal>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "speculative/decoder.h"

namespace specllama_py {

void register_model(pybind11::module_ & m);
void register_devices(pybind11::module_ & m);
void register_sampling(pybind11::module_ & m);
void register_adaptive(pybind11::module_ & m);
void register_decoder(pybind11::module_ & m);
void register_dsi(pybind11::module_ & m);
void register_stats(pybind11::module_ & m);  // Stats, StepTrace, DSIStats, GenerateResult

// a device list from Python: None (llama.cpp's default), "CUDA0,CUDA1" or a sequence of names;
// what names the argument in errors
std::vector<std::string> to_devices(const pybind11::object & devices, const std::string & what);

// a model's placement from the keyword arguments that spell it
specllama::placement to_placement(const pybind11::object & device, const std::string & split_mode,
                                  const std::optional<std::vector<float>> & tensor_split, int32_t main_gpu);

// Ctrl-C (KeyboardInterrupt), and whatever else Python's signal handlers raise, for a native call
// that runs without the GIL: made with the GIL held, before the call; check() from the call's
// thread, without the GIL, raises what a handler raised. In the main thread, while it lives, each
// signal Python handles goes through a wrapper of Python's handler that also raises a flag, and
// check() takes the GIL and runs the handlers only when one came; elsewhere Python runs no handler
// and check() does nothing. Where SIGINT is not Python's to handle, check() takes the GIL each time
class signal_watch {
  public:
    signal_watch();
    ~signal_watch();
    signal_watch(const signal_watch &)             = delete;
    signal_watch & operator=(const signal_watch &) = delete;
    void check() const;

  private:
    enum class how { none, flag, every };
    how                                           how_ = how::every;
    std::vector<std::pair<int, struct sigaction>> saved_;  // the wrapped signals' handlers before
};

// on_step(tokens, text, n_drafted, n_accepted) -> bool, after the watch's check
// on_step(tokens, text, n_drafted, n_accepted[, logprobs]): the fifth with GenerateOptions.logprobs
specllama::step_callback make_step_callback(const std::optional<pybind11::function> & on_step, bool with_logprobs,
                                            const signal_watch & signals);

// bytes from llama.cpp to str; invalid UTF-8 (a character cut by max_tokens) becomes U+FFFD
inline pybind11::str to_str(const std::string & s) {
    PyObject * o = PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t) s.size(), "replace");
    if (o == nullptr) {
        throw pybind11::error_already_set();
    }
    return pybind11::reinterpret_steal<pybind11::str>(o);
}

// text for llama.cpp: a str as UTF-8 bytes, by pointer and length (NUL bytes kept); a str that
// UTF-8 cannot carry (a lone surrogate, as Python makes from undecodable bytes) is a ValueError
// saying where and what to do, never a signature mismatch
struct text {
    std::string value;
};

// a file path: str (encoded as the OS encodes file names), bytes or os.PathLike
struct fs_path {
    std::string value;
};

// the ValueError message for a str holding a lone surrogate; what names the text ("the prompt")
std::string not_utf8_message(PyObject * s, const std::string & what);

// raise KeyboardInterrupt (or whatever a signal handler raised) in the thread that called us
inline void check_signals() {
    pybind11::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
        throw pybind11::error_already_set();
    }
}

}  // namespace specllama_py

namespace pybind11::detail {

template <> struct type_caster<specllama_py::text> {
    PYBIND11_TYPE_CASTER(specllama_py::text, const_name("str"));

    bool load(handle src, bool) {
        if (!src || !PyUnicode_Check(src.ptr())) {
            return false;
        }
        Py_ssize_t n = 0;
        const char * p = PyUnicode_AsUTF8AndSize(src.ptr(), &n);
        if (p == nullptr) {
            PyErr_Clear();
            throw value_error(specllama_py::not_utf8_message(src.ptr(), "the text"));
        }
        value.value.assign(p, (size_t) n);
        return true;
    }

    static handle cast(const specllama_py::text & t, return_value_policy, handle) {
        return specllama_py::to_str(t.value).release();
    }
};

template <> struct type_caster<specllama_py::fs_path> {
    PYBIND11_TYPE_CASTER(specllama_py::fs_path, const_name("str | os.PathLike"));

    bool load(handle src, bool) {
        if (!src || !(PyUnicode_Check(src.ptr()) || PyBytes_Check(src.ptr()) || PyObject_HasAttrString(src.ptr(), "__fspath__"))) {
            return false;
        }
        PyObject * raw = nullptr;
        if (!PyUnicode_FSConverter(src.ptr(), &raw)) {  // os.fsencode
            throw error_already_set();
        }
        auto encoded = reinterpret_steal<object>(raw);
        value.value.assign(PyBytes_AS_STRING(raw), (size_t) PyBytes_GET_SIZE(raw));
        return true;
    }

    static handle cast(const specllama_py::fs_path & p, return_value_policy, handle) {
        PyObject * o = PyUnicode_DecodeFSDefaultAndSize(p.value.data(), (Py_ssize_t) p.value.size());
        if (o == nullptr) {
            throw error_already_set();
        }
        return o;
    }
};

}  // namespace pybind11::detail
