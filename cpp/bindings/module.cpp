// module.cpp: the private extension specllama._core; the public API is the specllama package.
#include <pybind11/pybind11.h>

#include <cstring>
#include <new>
#include <stdexcept>

#include "bindings.h"
#include "model.h"

namespace py = pybind11;

namespace {

// set a Python exception whose message may hold bytes that are not UTF-8 (token texts and keys
// from a broken file): they become U+FFFD instead of turning the error into a UnicodeDecodeError
void set_error(PyObject * type, const char * what) {
    PyObject * msg = PyUnicode_DecodeUTF8(what, (Py_ssize_t) std::strlen(what), "replace");
    if (msg == nullptr) {
        return;  // the decode error stays set
    }
    PyErr_SetObject(type, msg);
    Py_DECREF(msg);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "specllama's native core: speculative decoding over llama.cpp (use the specllama package)";
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) {
                std::rethrow_exception(p);
            }
        } catch (const py::error_already_set &) {
            throw;  // a Python exception on its way back: pybind11 restores it
        } catch (const py::builtin_exception &) {
            throw;  // pybind11's own (py::value_error, ...): it sets them itself
        } catch (const specllama::file_not_found & e) {
            set_error(PyExc_FileNotFoundError, e.what());
        } catch (const std::out_of_range & e) {  // pybind11's mapping, with tolerant decoding
            set_error(PyExc_IndexError, e.what());
        } catch (const std::overflow_error & e) {
            set_error(PyExc_OverflowError, e.what());
        } catch (const std::invalid_argument & e) {
            set_error(PyExc_ValueError, e.what());
        } catch (const std::length_error & e) {
            set_error(PyExc_ValueError, e.what());
        } catch (const std::domain_error & e) {
            set_error(PyExc_ValueError, e.what());
        } catch (const std::range_error & e) {
            set_error(PyExc_ValueError, e.what());
        } catch (const std::bad_alloc &) {
            PyErr_SetString(PyExc_MemoryError, "out of memory");
        } catch (const std::runtime_error & e) {
            set_error(PyExc_RuntimeError, e.what());
        }
    });
    specllama::backend_init();
    specllama_py::register_model(m);
    specllama_py::register_sampling(m);
    specllama_py::register_decoder(m);
    specllama_py::register_dsi(m);
}
