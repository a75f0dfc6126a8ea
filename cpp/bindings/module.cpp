// bindings/module.cpp: the private extension specllama._core; the public API is the specllama package.
#include <pybind11/pybind11.h>

#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>

#include "bindings.h"
#include "engine/llama_log.h"
#include "engine/model.h"
#include "engine/vocab.h"

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

PyObject * text_too_long_type = nullptr;  // specllama._core.TextTooLong, a ValueError

}  // namespace

namespace specllama_py {

std::string not_utf8_message(PyObject * s, const std::string & what) {
    const Py_ssize_t n = PyUnicode_GetLength(s);
    const int        kind = PyUnicode_KIND(s);
    const void *     data = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; ++i) {
        const Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0xD800 || c > 0xDFFF) {
            continue;
        }
        char at[96];
        if (c >= 0xDC80 && c <= 0xDCFF) {  // surrogateescape's stand-in for an undecodable byte
            std::snprintf(at, sizeof(at), "character %zd stands for the byte 0x%02X, which is not UTF-8", (ssize_t) i,
                          (unsigned) (c - 0xDC00));
        } else {
            std::snprintf(at, sizeof(at), "character %zd is a lone surrogate (U+%04X)", (ssize_t) i, (unsigned) c);
        }
        return what + " is not valid UTF-8: " + at +
               ". Decode the input with its own encoding (the command line's --encoding, for example "
               "--encoding latin-1), or with errors='replace'";
    }
    return what + " is not valid UTF-8";
}

}  // namespace specllama_py

PYBIND11_MODULE(_core, m) {
    m.doc() = "specllama's native core: speculative decoding over llama.cpp (use the specllama package)";
    static py::exception<specllama::text_too_long> text_too_long_exc(m, "TextTooLong", PyExc_ValueError);
    text_too_long_type = text_too_long_exc.ptr();
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) {
                std::rethrow_exception(p);
            }
        } catch (const py::error_already_set &) {
            throw;  // a Python exception on its way back: pybind11 restores it
        } catch (const py::builtin_exception &) {
            throw;  // pybind11's own (py::value_error, ...): it sets them itself
        } catch (const specllama::text_too_long & e) {  // with the count, for the caller's own message
            PyObject * exc = PyObject_CallFunction(text_too_long_type, "s", e.what());
            if (exc != nullptr) {
                PyObject * n = PyLong_FromLongLong(e.n_tokens_at_least);
                PyObject_SetAttrString(exc, "n_tokens_at_least", n);
                Py_XDECREF(n);
                PyObject_SetAttrString(exc, "exact", e.exact ? Py_True : Py_False);
                PyErr_SetObject(text_too_long_type, exc);
                Py_DECREF(exc);
            }
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
    specllama_py::register_devices(m);
    specllama_py::register_sampling(m);
    specllama_py::register_adaptive(m);
    specllama_py::register_decoder(m);
    specllama_py::register_dsi(m);
}
