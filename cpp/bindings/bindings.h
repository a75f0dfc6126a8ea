// bindings.h: one register_<thing>(module) per binding file; shared conversions.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

#include "speculative.h"

namespace specllama_py {

void register_model(pybind11::module_ & m);
void register_sampling(pybind11::module_ & m);
void register_decoder(pybind11::module_ & m);
void register_dsi(pybind11::module_ & m);

// on_step(tokens, text, n_drafted, n_accepted) -> bool, with a Ctrl-C check before each call
specllama::step_callback make_step_callback(const std::optional<pybind11::function> & on_step);

// bytes from llama.cpp to str; invalid UTF-8 (a character cut by max_tokens) becomes U+FFFD
inline pybind11::str to_str(const std::string & s) {
    PyObject * o = PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t) s.size(), "replace");
    if (o == nullptr) {
        throw pybind11::error_already_set();
    }
    return pybind11::reinterpret_steal<pybind11::str>(o);
}

// raise KeyboardInterrupt (or whatever a signal handler raised) in the thread that called us
inline void check_signals() {
    pybind11::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
        throw pybind11::error_already_set();
    }
}

}  // namespace specllama_py
