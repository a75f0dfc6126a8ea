// engine/devices.cpp: device discovery and placement resolution over ggml's backend registry.
#include "engine/devices.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "engine/llama_log.h"
#include "engine/rpc.h"

namespace specllama {

namespace {

const char * device_type_name(enum ggml_backend_dev_type t) {
    switch (t) {
        case GGML_BACKEND_DEVICE_TYPE_CPU: return "cpu";
        case GGML_BACKEND_DEVICE_TYPE_GPU: return "gpu";
        case GGML_BACKEND_DEVICE_TYPE_IGPU: return "igpu";
        default: return "accel";
    }
}

// the device named name (case-insensitive) for which usable(dev) holds, or nullptr
template <typename Usable> ggml_backend_dev_t find_device(const std::string & name, Usable usable) {
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        if (iequals(ggml_backend_dev_name(dev), name) && usable(dev)) {
            return dev;
        }
    }
    return nullptr;
}

// llama.cpp's default devices (every GPU, one per device id; else the integrated GPUs) without
// the rpc-servers: those this process reached serve the models placed on them, not every model
std::vector<ggml_backend_dev_t> local_devices() {
    std::vector<ggml_backend_dev_t> gpus, igpus;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const auto         t   = ggml_backend_dev_type(dev);
        if (ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev)) == std::string("RPC")) {
            continue;
        }
        ggml_backend_dev_props props{};
        ggml_backend_dev_get_props(dev, &props);
        const auto same_id = [&](ggml_backend_dev_t other) {
            ggml_backend_dev_props p{};
            ggml_backend_dev_get_props(other, &p);
            return props.device_id && p.device_id && std::strcmp(props.device_id, p.device_id) == 0;
        };
        if (t == GGML_BACKEND_DEVICE_TYPE_GPU && std::none_of(gpus.begin(), gpus.end(), same_id)) {
            gpus.push_back(dev);
        } else if (t == GGML_BACKEND_DEVICE_TYPE_IGPU &&
                   (igpus.empty() || ggml_backend_dev_backend_reg(dev) == ggml_backend_dev_backend_reg(igpus.back()))) {
            igpus.push_back(dev);
        }
    }
    std::vector<ggml_backend_dev_t> out = gpus.empty() ? igpus : gpus;
    out.push_back(nullptr);
    return out;
}

// placement::devices -> the NULL-terminated list llama_model_params.devices takes (empty: the default)
std::vector<ggml_backend_dev_t> resolve_devices(const std::vector<std::string> & names) {
    std::vector<ggml_backend_dev_t> out;
    if (names.empty()) {
        return rpc_any_servers() ? local_devices() : out;
    }
    if (names.size() == 1 && (iequals(names[0], "none") || iequals(names[0], "cpu"))) {
        out.push_back(nullptr);  // no device: every layer on the CPU
        return out;
    }
    for (const auto & name : names) {
        std::string host, port;
        if (iequals(name, "none") || iequals(name, "cpu")) {
            throw std::invalid_argument("device '" + name + "' (no offload) cannot be combined with other devices");
        }
        if (name.find(':') != std::string::npos && parse_endpoint(name, host, port)) {
            for (const auto & dev : rpc_add_servers({name})) {
                out.push_back(ggml_backend_dev_by_name(dev.c_str()));
            }
            continue;
        }
        ggml_backend_dev_t found = find_device(name, [](ggml_backend_dev_t dev) {
            return ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU;  // the CPU is "none"
        });
        if (found == nullptr) {
            throw std::invalid_argument("no device '" + name + "'; this libllama has: " + known_devices() +
                                        " (none or cpu: no offload; HOST:PORT: an rpc-server)");
        }
        if (std::find(out.begin(), out.end(), found) != out.end()) {
            throw std::invalid_argument("device '" + name + "' is named twice");
        }
        out.push_back(found);
    }
    out.push_back(nullptr);
    return out;
}

llama_split_mode parse_split_mode(const std::string & s) {
    if (s == "none") {
        return LLAMA_SPLIT_MODE_NONE;
    }
    if (s == "layer") {
        return LLAMA_SPLIT_MODE_LAYER;
    }
    if (s == "row") {
        return LLAMA_SPLIT_MODE_ROW;
    }
    throw std::invalid_argument("split_mode must be none, layer or row, got '" + s + "'");
}

}  // namespace

bool iequals(const std::string & a, const std::string & b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower((unsigned char) x) == std::tolower((unsigned char) y);
           });
}

std::string known_devices() {
    std::string out;
    for (const auto & d : list_devices()) {
        out += (out.empty() ? "" : ", ") + d.name;
    }
    return out;
}

ggml_backend_dev_t find_device_outside(const std::string & name, ggml_backend_reg_t excluded) {
    return find_device(name, [&](ggml_backend_dev_t dev) { return ggml_backend_dev_backend_reg(dev) != excluded; });
}

namespace {
bool is_local_gpu(ggml_backend_dev_t dev) {
    const auto t = ggml_backend_dev_type(dev);
    return (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU) &&
           ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev)) != std::string("RPC");
}

// whether llama.cpp's default device list (every local GPU) holds anything
bool any_local_gpu() {
    backend_init();
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        if (is_local_gpu(ggml_backend_dev_get(i))) {
            return true;
        }
    }
    return false;
}
}  // namespace

bool offloads(const placement & place, int32_t n_gpu_layers) {
    const auto & d = place.devices;
    if (n_gpu_layers == 0 || (d.size() == 1 && (iequals(d[0], "none") || iequals(d[0], "cpu")))) {
        return false;
    }
    if (!d.empty()) {
        return true;
    }
    return any_local_gpu();  // llama.cpp's default: the local GPUs
}

namespace {
device_info info_of(ggml_backend_dev_t dev) {
    ggml_backend_dev_props props{};
    ggml_backend_dev_get_props(dev, &props);
    device_info d;
    d.name         = props.name ? props.name : "";
    d.description  = props.description ? props.description : "";
    d.type         = device_type_name(props.type);
    d.memory_free  = props.memory_free;
    d.memory_total = props.memory_total;
    return d;
}
}  // namespace

std::vector<device_info> list_devices() {
    backend_init();
    std::vector<device_info> out;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        out.push_back(info_of(ggml_backend_dev_get(i)));
    }
    return out;
}

std::vector<device_info> default_devices() {
    backend_init();
    std::vector<device_info> out;
    for (ggml_backend_dev_t dev : local_devices()) {
        if (dev != nullptr) {
            out.push_back(info_of(dev));
        }
    }
    return out;
}

resolved_placement placement_resolve(const placement & place) {
    resolved_placement out;
    out.split_mode = parse_split_mode(place.split_mode);
    out.devices    = resolve_devices(place.devices);
    const size_t n_devices = out.n_devices();
    if (place.main_gpu < 0 || (n_devices > 0 && (size_t) place.main_gpu >= n_devices)) {
        throw std::invalid_argument("main_gpu must index the model's devices (0.." +
                                    std::to_string(std::max<int64_t>(0, (int64_t) n_devices - 1)) + "), got " +
                                    std::to_string(place.main_gpu));
    }
    out.main_gpu = place.main_gpu;
    if (place.tensor_split.empty()) {
        return out;
    }
    out.tensor_split.assign(llama_max_devices(), 0.0f);
    if (place.tensor_split.size() > out.tensor_split.size() || (n_devices > 0 && place.tensor_split.size() > n_devices)) {
        throw std::invalid_argument("tensor_split has " + std::to_string(place.tensor_split.size()) +
                                    " shares, more than the " +
                                    std::to_string(n_devices > 0 ? n_devices : out.tensor_split.size()) + " devices");
    }
    float sum = 0;
    for (size_t i = 0; i < place.tensor_split.size(); ++i) {
        if (!(place.tensor_split[i] >= 0) || !std::isfinite(place.tensor_split[i])) {
            throw std::invalid_argument("tensor_split shares must be finite and >= 0");
        }
        out.tensor_split[i] = place.tensor_split[i];
        sum += out.tensor_split[i];
    }
    if (sum <= 0) {
        throw std::invalid_argument("tensor_split must give some device a share above 0");
    }
    return out;
}

void resolved_placement::apply(llama_model_params & mparams) const {
    mparams.split_mode = split_mode;
    mparams.main_gpu   = main_gpu;
    if (!devices.empty()) {
        mparams.devices = const_cast<ggml_backend_dev_t *>(devices.data());
    }
    if (!tensor_split.empty()) {
        mparams.tensor_split = tensor_split.data();
    }
}

bool resolved_placement::local_gpu(int32_t n_gpu_layers) const {
    if (n_gpu_layers == 0) {
        return false;
    }
    if (devices.empty()) {
        return any_local_gpu();
    }
    return std::any_of(devices.begin(), devices.end(), [](ggml_backend_dev_t d) { return d != nullptr && is_local_gpu(d); });
}

std::vector<std::string> split_list(const std::string & s, const std::string & what) {
    std::vector<std::string> out;
    size_t                   start = 0;
    while (true) {
        const size_t end  = s.find(',', start);
        std::string  part = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
        part.erase(0, part.find_first_not_of(" \t"));
        part.erase(part.find_last_not_of(" \t") + 1);
        if (part.empty()) {
            throw std::invalid_argument(what + ": empty entry in '" + s + "'");
        }
        out.push_back(part);
        if (end == std::string::npos) {
            return out;
        }
        start = end + 1;
    }
}

}  // namespace specllama
