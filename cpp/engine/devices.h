// engine/devices.h: placement. The devices the installed libllama can use, and where a model's
// weights and KV cache go, spelled as llama.cpp's flags spell it (-dev, -sm, -ts, -mg).
// Not here: reaching rpc-servers (rpc.h), loading (model.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "llama.h"

namespace specllama {

// where a model's weights and KV cache live
struct placement {
    // device names as list_devices() gives them (case-insensitive), or an rpc-server's HOST:PORT for
    // every device it serves; "none" (or "cpu"): no offload. Empty: llama.cpp's default, every GPU.
    std::vector<std::string> devices;
    std::string              split_mode = "layer";  // none | layer | row: how a model spans several devices
    int32_t                  main_gpu   = 0;        // with split_mode none: which of the devices holds the model
    std::vector<float>       tensor_split;          // each device's share of the layers; empty: by free memory

    bool operator==(const placement & o) const {
        return devices == o.devices && split_mode == o.split_mode && main_gpu == o.main_gpu &&
               tensor_split == o.tensor_split;
    }
};

// one device the installed libllama can use
struct device_info {
    std::string name;         // what placement::devices names it by ("CPU", "CUDA0", "RPC0", ...)
    std::string description;  // the hardware (an rpc-server's device: its HOST:PORT)
    std::string type;         // cpu | gpu | igpu | accel
    size_t      memory_free  = 0;
    size_t      memory_total = 0;
};

// every device llama.cpp knows of, the CPU and the rpc-servers registered so far included
std::vector<device_info> list_devices();

// the devices a model goes to where none is named (llama.cpp's default: every local GPU, one per
// device id; else the integrated ones), with their free memory now
std::vector<device_info> default_devices();

// whether loading with this placement and n_gpu_layers puts any layer on a device other than the CPU
bool offloads(const placement & place, int32_t n_gpu_layers);

// a placement checked and turned into what llama_model_params takes; apply() points mparams into
// this object, which must outlive the load
struct resolved_placement {
    std::vector<ggml_backend_dev_t> devices;       // NULL-terminated; empty: llama.cpp's default
    std::vector<float>              tensor_split;  // llama_max_devices() shares; empty: by free memory
    llama_split_mode                split_mode = LLAMA_SPLIT_MODE_LAYER;
    int32_t                         main_gpu   = 0;

    // the devices named (0 with llama.cpp's default)
    size_t n_devices() const { return devices.empty() ? 0 : devices.size() - 1; }
    void   apply(llama_model_params & mparams) const;
    // whether n_gpu_layers offloaded here reach a GPU of this machine (not an rpc-server's device)
    bool   local_gpu(int32_t n_gpu_layers) const;
};

// throws std::invalid_argument naming what is wrong (an unknown device, a bad share, ...);
// rpc-servers named by HOST:PORT are reached and registered here (rpc_add_servers)
resolved_placement placement_resolve(const placement & place);

// "a,b,c" split at commas, spaces trimmed, empty parts refused (what = the option, for the message)
std::vector<std::string> split_list(const std::string & s, const std::string & what);

// the device named name (case-insensitive) whose backend registry is not excluded, or nullptr
ggml_backend_dev_t find_device_outside(const std::string & name, ggml_backend_reg_t excluded);

// the names of every device, "CPU, CUDA0, ..." (for messages)
std::string known_devices();

// a == b, ignoring ASCII case
bool iequals(const std::string & a, const std::string & b);

}  // namespace specllama
