// bindings/bind_devices.cpp: the devices the installed libllama can use, placements from Python's
// keyword arguments, and llama.cpp's RPC backend (reaching rpc-servers, serving this machine's devices).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "engine/context_params.h"
#include "engine/devices.h"
#include "engine/footprint.h"
#include "engine/rpc.h"

namespace py = pybind11;
using namespace specllama;

namespace specllama_py {

std::vector<std::string> to_devices(const py::object & devices, const std::string & what) {
    if (devices.is_none()) {
        return {};
    }
    if (py::isinstance<py::str>(devices)) {
        return split_list(devices.cast<std::string>(), what);
    }
    if (!py::isinstance<py::sequence>(devices)) {
        throw py::type_error(what + " must be a str ('CUDA0,CUDA1'), a sequence of device names or None, not " +
                             std::string(Py_TYPE(devices.ptr())->tp_name));
    }
    std::vector<std::string> out;
    for (const auto & d : devices.cast<py::sequence>()) {
        if (!py::isinstance<py::str>(d)) {
            throw py::type_error(what + " must hold device names (str)");
        }
        out.push_back(d.cast<std::string>());
    }
    if (out.empty()) {
        throw py::value_error(what + " is empty; None means llama.cpp's default, 'none' no offload");
    }
    return out;
}

placement to_placement(const py::object & device, const std::string & split_mode,
                       const std::optional<std::vector<float>> & tensor_split, int32_t main_gpu) {
    placement pl;
    pl.devices    = to_devices(device, "device");
    pl.split_mode = split_mode;
    pl.main_gpu   = main_gpu;
    if (tensor_split) {
        pl.tensor_split = *tensor_split;
    }
    return pl;
}

void register_devices(py::module_ & m) {
    m.def("supports_rpc", &supports_rpc,
          "Whether the installed libllama has llama.cpp's RPC backend (built with -DGGML_RPC=ON).");
    m.def(
        "list_devices",
        [] {
            py::list out;
            for (const auto & d : list_devices()) {
                py::dict e;
                e["name"]         = d.name;
                e["description"]  = d.description;
                e["type"]         = d.type;
                e["memory_free"]  = d.memory_free;
                e["memory_total"] = d.memory_total;
                out.append(e);
            }
            return out;
        },
        "Every device the installed libllama can use (the CPU, GPUs, the rpc-servers added so far): name, "
        "description, type (cpu, gpu, igpu, accel), memory_free and memory_total in bytes.");
    m.def(
        "default_devices",
        [] {
            py::list out;
            for (const auto & d : default_devices()) {
                out.append(py::make_tuple(d.name, d.memory_free));
            }
            return out;
        },
        "The devices a model goes to where none is named (llama.cpp's default: every local GPU), as "
        "(name, memory_free in bytes); empty where the installed libllama has none.");
    m.def(
        "model_footprint",
        [](const std::string & path, const std::string & cache_type_k, const std::string & cache_type_v) {
            model_footprint fp;
            {
                py::gil_scoped_release nogil;
                fp = read_footprint(path, cache_type_k, cache_type_v);
            }
            py::dict e;
            e["n_layer"]               = fp.n_layer;
            e["n_vocab"]               = fp.n_vocab;
            e["n_embd"]                = fp.n_embd;
            e["n_head"]                = fp.n_head;
            e["n_ctx_train"]           = fp.n_ctx_train;
            e["layer_bytes"]           = fp.layer_bytes;
            e["output_bytes"]          = fp.output_bytes;
            e["other_bytes"]           = fp.other_bytes;
            e["kv_bytes_per_position"] = fp.kv_bytes_per_position;
            return e;
        },
        py::arg("path"), py::arg("cache_type_k") = "f16", py::arg("cache_type_v") = "f16",
        "What a GGUF model needs in a device's memory, from its metadata and tensor table: n_layer, n_vocab, "
        "n_embd, n_head, n_ctx_train, layer_bytes (the repeating layers' weights), output_bytes (the output layer), "
        "other_bytes (the input embeddings and the rest), kv_bytes_per_position (keys and values of every "
        "layer, in the cache formats named). A file ggml cannot parse, or a format not known, is a ValueError.");
    // the KV cache formats llama.cpp's programs accept (context_params::type_k)
    m.attr("CACHE_TYPES") = py::tuple(py::cast(std::vector<std::string>(std::begin(k_cache_types), std::end(k_cache_types))));
    m.def(
        "rpc_add_servers",
        [](const py::object & endpoints, int32_t timeout_ms) {
            std::vector<std::string> eps = to_devices(endpoints, "rpc");
            py::gil_scoped_release    nogil;
            return rpc_add_servers(eps, timeout_ms);
        },
        py::arg("endpoints"), py::arg("timeout_ms") = 5000,
        "Register rpc-servers ('HOST:PORT,...' or a list); returns their device names. An unreachable one is "
        "a ValueError.");
    m.def("rpc_park_breaks", &rpc_park_breaks,
          "From now on, a broken connection to an rpc-server parks the thread that met it and is counted "
          "(rpc_failures), instead of aborting the process as llama.cpp does; for callers that watch the count "
          "while they wait (specllama.rpc_guard).");
    m.def("rpc_failures", &rpc_failures,
          "Connections to rpc-servers that broke in this process so far (llama.cpp's client would have aborted; "
          "the thread that met the break is parked instead).");
    m.def("rpc_failure_message", &rpc_failure_message, "llama.cpp's message for the latest broken RPC connection.");
    m.def("rpc_endpoint", &rpc_endpoint, py::arg("device"),
          "The rpc-server (HOST:PORT) serving the device named device, or '' for a device of this machine.");
    m.def(
        "rpc_serve",
        [](const std::string & endpoint, int32_t n_threads, const py::object & device, const std::string & cache_dir) {
            std::vector<std::string> devs = to_devices(device, "device");
            py::gil_scoped_release    nogil;
            rpc_serve(endpoint, n_threads, devs, cache_dir);
        },
        py::arg("endpoint"), py::arg("n_threads") = 0, py::arg("device") = py::none(), py::arg("cache_dir") = "",
        "Serve this machine's devices to llama.cpp's RPC clients at HOST:PORT (llama.cpp's own rpc-server); "
        "returns only if the server fails to start.");
}

}  // namespace specllama_py
