// module.cpp: the private extension specllama._core; the public API is the specllama package.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "model.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
    m.doc() = "specllama's native core: speculative decoding over llama.cpp (use the specllama package)";
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) {
                std::rethrow_exception(p);
            }
        } catch (const specllama::file_not_found & e) {
            PyErr_SetString(PyExc_FileNotFoundError, e.what());
        }
    });
    specllama::backend_init();
    specllama_py::register_model(m);
    specllama_py::register_sampling(m);
    specllama_py::register_decoder(m);
    specllama_py::register_dsi(m);
}
