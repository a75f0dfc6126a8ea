// model.cpp: loading GGUF models, the vocabulary (checks, tokenization, chat templates), and
// routing llama.cpp's log.
// Not here: checks of the file before loading (gguf_checks.cpp), quantization (quantize.cpp).
#include "model.h"

#include "gguf_checks.h"
#include "llama_log.h"

#if __has_include("ggml-rpc.h")
#include "ggml-rpc.h"  // the RPC protocol's version, in builds that have the RPC backend
#endif

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cctype>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <cerrno>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace specllama {

namespace {

std::atomic<int> g_log_level{GGML_LOG_LEVEL_NONE};  // errors reach the user in exceptions
std::mutex       g_log_mutex;
std::string      g_last_error;  // error lines llama.cpp logged since the last take, to explain a failure
int              g_last_level = GGML_LOG_LEVEL_NONE;

void log_callback(ggml_log_level level, const char * text, void * /*user_data*/) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (level != GGML_LOG_LEVEL_CONT) {
        g_last_level = level;
    }
    if (g_last_level >= GGML_LOG_LEVEL_ERROR && g_last_error.size() < 4096) {
        g_last_error += text;
    }
    if (g_last_level >= g_log_level.load() && g_log_level.load() != GGML_LOG_LEVEL_NONE) {
        fputs(text, stderr);
    }
}

}  // namespace

// the error lines logged since the last call, joined with "; ", without llama.cpp's generic
// "failed to load model" lines when a more specific one is there
std::string take_last_error() {
    std::string all;
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        all.swap(g_last_error);
    }
    std::vector<std::string> lines, generic;
    size_t                   start = 0;
    while (start < all.size()) {
        size_t      end  = all.find('\n', start);
        std::string line = all.substr(start, end == std::string::npos ? std::string::npos : end - start);
        start            = end == std::string::npos ? all.size() : end + 1;
        while (!line.empty() && line.back() == ' ') {
            line.pop_back();
        }
        if (!line.empty()) {
            (line.find("failed to load model") != std::string::npos ? generic : lines).push_back(line);
        }
    }
    if (lines.empty()) {
        lines = generic;
    }
    std::string out;
    for (const auto & l : lines) {
        out += (out.empty() ? "" : "; ") + l;
    }
    return out;
}



void backend_init() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_set(log_callback, nullptr);
        llama_backend_init();
    });
}

void log_set_level(int level) { g_log_level.store(level); }

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

namespace {

const char * device_type_name(enum ggml_backend_dev_type t) {
    switch (t) {
        case GGML_BACKEND_DEVICE_TYPE_CPU: return "cpu";
        case GGML_BACKEND_DEVICE_TYPE_GPU: return "gpu";
        case GGML_BACKEND_DEVICE_TYPE_IGPU: return "igpu";
        default: return "accel";
    }
}

bool iequals(const std::string & a, const std::string & b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower((unsigned char) x) == std::tolower((unsigned char) y);
           });
}

// HOST:PORT (a [v6] host allowed) -> host, port; false when it is not one
bool parse_endpoint(const std::string & ep, std::string & host, std::string & port) {
    const size_t colon = ep.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == ep.size()) {
        return false;
    }
    host = ep.substr(0, colon);
    port = ep.substr(colon + 1);
    if (host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    return port.find_first_not_of("0123456789") == std::string::npos && port.size() <= 5 && std::stoi(port) > 0 &&
           std::stoi(port) < 65536;
}

// n bytes through a non-blocking socket, each wait for it bounded by timeout_ms; false on a
// timeout or a closed connection
bool io_all(int fd, void * buf, size_t n, bool sending, int32_t timeout_ms) {
    auto * p = static_cast<char *>(buf);
    while (n > 0) {
        pollfd pf{fd, (short) (sending ? POLLOUT : POLLIN), 0};
        if (poll(&pf, 1, timeout_ms) <= 0) {
            return false;
        }
        const ssize_t k = sending ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k <= 0) {
            if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
                continue;
            }
            return false;
        }
        p += k;
        n -= (size_t) k;
    }
    return true;
}

// llama.cpp's RPC handshake (ggml-rpc.cpp: HELLO, command 14, with 24 bytes of connection
// capabilities; the answer is the protocol version and the server's capabilities), bounded by
// timeout_ms: "" when an rpc-server answered, else why not
std::string rpc_hello(int fd, int32_t timeout_ms) {
    constexpr uint8_t  k_cmd_hello = 14;
    constexpr uint64_t k_caps      = 24;
    uint8_t            req[1 + 8 + k_caps] = {};
    req[0]                                 = k_cmd_hello;
    std::memcpy(req + 1, &k_caps, 8);
    uint64_t n_rsp = 0;
    uint8_t  rsp[4 + k_caps];
    if (!io_all(fd, req, sizeof req, true, timeout_ms) || !io_all(fd, &n_rsp, 8, false, timeout_ms)) {
        return "it took the connection but gave no RPC answer within " + std::to_string(timeout_ms) +
               " ms (llama.cpp's rpc-server serves one client at a time: is another connected to it?)";
    }
    if (n_rsp != sizeof rsp || !io_all(fd, rsp, sizeof rsp, false, timeout_ms)) {
        return "its answer is not llama.cpp's RPC protocol";
    }
#ifdef RPC_PROTO_MAJOR_VERSION
    if (rsp[0] != RPC_PROTO_MAJOR_VERSION || rsp[1] > RPC_PROTO_MINOR_VERSION) {
        return "it speaks RPC protocol " + std::to_string(rsp[0]) + "." + std::to_string(rsp[1]) + "." +
               std::to_string(rsp[2]) + ", this libllama " + std::to_string(RPC_PROTO_MAJOR_VERSION) + "." +
               std::to_string(RPC_PROTO_MINOR_VERSION) + " (build both from the same llama.cpp)";
    }
#endif
    return std::string();
}

// a TCP connect to host:port and llama.cpp's RPC handshake, each step within timeout_ms; "" when
// an rpc-server answered, else why not
std::string try_connect(const std::string & host, const std::string & port, int32_t timeout_ms) {
    addrinfo hints{};
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo * res    = nullptr;
    if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
        return gai_strerror(rc);
    }
    std::string why = "no address";
    for (addrinfo * ai = res; ai != nullptr; ai = ai->ai_next) {
        const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            why = std::strerror(errno);
            continue;
        }
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            rc = poll(&p, 1, timeout_ms);
            if (rc == 0) {
                why = "no answer within " + std::to_string(timeout_ms) + " ms";
                rc  = -1;
            } else if (rc > 0) {
                int       err = 0;
                socklen_t len = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
                rc = err == 0 ? 0 : -1;
                if (err != 0) {
                    why = std::strerror(err);
                }
            } else {
                why = std::strerror(errno);
            }
        } else if (rc != 0) {
            why = std::strerror(errno);
        }
        if (rc == 0) {
            freeaddrinfo(res);
            why = rpc_hello(fd, timeout_ms);
            close(fd);
            return why;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return why;
}

std::mutex                                                    g_rpc_mutex;
std::unordered_map<std::string, std::vector<std::string>>     g_rpc_devices;  // endpoint -> its device names

std::atomic<uint64_t> g_rpc_failures{0};
std::mutex            g_rpc_failure_mutex;
std::string           g_rpc_failure_message;
ggml_abort_callback_t g_previous_abort = nullptr;
std::atomic<bool>     g_park_rpc_breaks{false};

// ggml_abort's hook: see rpc_failures() in model.h
void on_ggml_abort(const char * message) {
    const bool rpc_break = std::strstr(message, "Remote RPC server crashed") != nullptr ||
                           std::strstr(message, "Failed to connect to") != nullptr ||
                           std::strstr(message, "RPC handshake failed") != nullptr;
    if (!rpc_break || !g_park_rpc_breaks.load()) {
        if (g_previous_abort != nullptr) {
            g_previous_abort(message);
        } else {
            std::fprintf(stderr, "%s\n", message);
        }
        return;  // ggml_abort aborts
    }
    {
        std::lock_guard<std::mutex> lock(g_rpc_failure_mutex);
        g_rpc_failure_message = message;
    }
    g_rpc_failures.fetch_add(1);
    for (;;) {
        std::this_thread::sleep_for(std::chrono::hours(24));
    }
}

void hook_rpc_aborts() {
    static std::once_flag once;
    std::call_once(once, [] { g_previous_abort = ggml_set_abort_callback(on_ggml_abort); });
}

ggml_backend_reg_t rpc_reg() {
    backend_init();
    return llama_supports_rpc() ? ggml_backend_reg_by_name("RPC") : nullptr;
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

std::string known_devices() {
    std::string out;
    for (const auto & d : list_devices()) {
        out += (out.empty() ? "" : ", ") + d.name;
    }
    return out;
}

}  // namespace

bool supports_rpc() { return rpc_reg() != nullptr; }

bool offloads(const model_params & params) {
    const auto & d = params.place.devices;
    if (params.n_gpu_layers == 0 || (d.size() == 1 && (iequals(d[0], "none") || iequals(d[0], "cpu")))) {
        return false;
    }
    if (!d.empty()) {
        return true;
    }
    backend_init();
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {  // llama.cpp's default: the local GPUs
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const auto         t   = ggml_backend_dev_type(dev);
        if ((t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU) &&
            ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev)) != std::string("RPC")) {
            return true;
        }
    }
    return false;
}

std::vector<device_info> list_devices() {
    backend_init();
    std::vector<device_info> out;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t     dev = ggml_backend_dev_get(i);
        ggml_backend_dev_props props{};
        ggml_backend_dev_get_props(dev, &props);
        device_info d;
        d.name         = props.name ? props.name : "";
        d.description  = props.description ? props.description : "";
        d.type         = device_type_name(props.type);
        d.memory_free  = props.memory_free;
        d.memory_total = props.memory_total;
        out.push_back(d);
    }
    return out;
}

std::vector<std::string> rpc_add_servers(const std::vector<std::string> & endpoints, int32_t timeout_ms) {
    ggml_backend_reg_t reg = rpc_reg();
    if (reg == nullptr) {
        throw std::invalid_argument("the installed llama-cpp-python was built without llama.cpp's RPC backend; "
                                    "rebuild it with CMAKE_ARGS=\"-DGGML_RPC=ON\" (docs/gpu.md, RPC)");
    }
    using add_server_fn = ggml_backend_reg_t (*)(const char *);
    auto add_server     = (add_server_fn) ggml_backend_reg_get_proc_address(reg, "ggml_backend_rpc_add_server");
    if (add_server == nullptr) {
        throw std::runtime_error("the RPC backend does not export ggml_backend_rpc_add_server");
    }
    std::vector<std::string>    names;
    std::lock_guard<std::mutex> lock(g_rpc_mutex);
    for (const auto & ep : endpoints) {
        if (auto it = g_rpc_devices.find(ep); it != g_rpc_devices.end()) {
            names.insert(names.end(), it->second.begin(), it->second.end());
            continue;
        }
        std::string host, port;
        if (!parse_endpoint(ep, host, port)) {
            throw std::invalid_argument("rpc-server '" + ep + "' is not HOST:PORT");
        }
        // llama.cpp's RPC client aborts the process when it cannot connect, and waits without end
        // for a server that does not answer: find out first
        if (std::string why = try_connect(host, port, timeout_ms); !why.empty()) {
            throw std::invalid_argument("cannot reach rpc-server " + ep + ": " + why);
        }
        ggml_backend_reg_t server = add_server(ep.c_str());
        if (server == nullptr) {
            throw std::invalid_argument("rpc-server " + ep + " serves no device");
        }
        std::vector<std::string> mine;
        for (size_t i = 0; i < ggml_backend_reg_dev_count(server); ++i) {
            mine.push_back(ggml_backend_dev_name(ggml_backend_reg_dev_get(server, i)));
        }
        ggml_backend_register(server);
        g_rpc_devices[ep] = mine;
        names.insert(names.end(), mine.begin(), mine.end());
    }
    return names;
}

void rpc_park_breaks() {
    hook_rpc_aborts();
    g_park_rpc_breaks = true;
}

uint64_t rpc_failures() { return g_rpc_failures.load(); }

std::string rpc_failure_message() {
    std::lock_guard<std::mutex> lock(g_rpc_failure_mutex);
    return g_rpc_failure_message;
}

std::string rpc_endpoint(const std::string & device) {
    std::lock_guard<std::mutex> lock(g_rpc_mutex);
    for (const auto & [ep, names] : g_rpc_devices) {
        if (iequals(ep, device) || std::any_of(names.begin(), names.end(), [&](const std::string & n) {
                return iequals(n, device);
            })) {
            return ep;
        }
    }
    return "";
}

void rpc_serve(const std::string & endpoint, int32_t n_threads, const std::vector<std::string> & devices,
               const std::string & cache_dir) {
    ggml_backend_reg_t reg = rpc_reg();
    if (reg == nullptr) {
        throw std::invalid_argument("the installed llama-cpp-python was built without llama.cpp's RPC backend; "
                                    "rebuild it with CMAKE_ARGS=\"-DGGML_RPC=ON\" (docs/gpu.md, RPC)");
    }
    std::string host, port;
    if (!parse_endpoint(endpoint, host, port)) {
        throw std::invalid_argument("endpoint '" + endpoint + "' is not HOST:PORT");
    }
    if (n_threads < 0) {
        throw std::invalid_argument("n_threads must be >= 0 (0: half the cores), got " + std::to_string(n_threads));
    }
    std::vector<ggml_backend_dev_t> devs;
    for (const auto & name : devices) {
        ggml_backend_dev_t found = find_device(name, [&](ggml_backend_dev_t dev) {
            return ggml_backend_dev_backend_reg(dev) != reg;  // not an rpc-server's
        });
        if (found == nullptr) {
            throw std::invalid_argument("no device '" + name + "' to serve; this libllama has: " + known_devices());
        }
        devs.push_back(found);
    }
    for (size_t i = 0; i < ggml_backend_dev_count() && devs.empty(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const auto         t   = ggml_backend_dev_type(dev);
        if (t != GGML_BACKEND_DEVICE_TYPE_CPU && t != GGML_BACKEND_DEVICE_TYPE_ACCEL && ggml_backend_dev_backend_reg(dev) != reg) {
            devs.push_back(dev);  // every GPU, as rpc-server
        }
    }
    if (devs.empty()) {
        devs.push_back(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
    }
    using start_fn = void (*)(const char *, const char *, size_t, size_t, ggml_backend_dev_t *);
    auto start     = (start_fn) ggml_backend_reg_get_proc_address(reg, "ggml_backend_rpc_start_server");
    if (start == nullptr) {
        throw std::runtime_error("the RPC backend does not export ggml_backend_rpc_start_server");
    }
    const size_t threads = n_threads > 0 ? (size_t) n_threads : std::max(1U, std::thread::hardware_concurrency() / 2);
    take_last_error();
    start(endpoint.c_str(), cache_dir.empty() ? nullptr : cache_dir.c_str(), threads, devs.size(), devs.data());
    const std::string why = take_last_error();
    throw std::runtime_error("rpc-server at " + endpoint + " could not serve" +
                             (why.empty() ? std::string(" (is the port in use?)") : ": " + why));
}

namespace {

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
        std::lock_guard<std::mutex> lock(g_rpc_mutex);
        return g_rpc_devices.empty() ? out : local_devices();
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

std::shared_ptr<model> model_load(const model_params & params) {
    backend_init();
    check_gguf_file(params.path);

    llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = params.n_gpu_layers;
    const placement & pl = params.place;
    mparams.split_mode   = parse_split_mode(pl.split_mode);
    std::vector<ggml_backend_dev_t> devices = resolve_devices(pl.devices);
    if (!devices.empty()) {
        mparams.devices = devices.data();
    }
    const size_t n_devices = devices.empty() ? (size_t) 0 : devices.size() - 1;
    if (pl.main_gpu < 0 || (n_devices > 0 && (size_t) pl.main_gpu >= n_devices)) {
        throw std::invalid_argument("main_gpu must index the model's devices (0.." +
                                    std::to_string(std::max<int64_t>(0, (int64_t) n_devices - 1)) + "), got " +
                                    std::to_string(pl.main_gpu));
    }
    mparams.main_gpu = pl.main_gpu;
    std::vector<float> split(llama_max_devices(), 0.0f);
    if (!pl.tensor_split.empty()) {
        if (pl.tensor_split.size() > split.size() || (n_devices > 0 && pl.tensor_split.size() > n_devices)) {
            throw std::invalid_argument("tensor_split has " + std::to_string(pl.tensor_split.size()) +
                                        " shares, more than the " +
                                        std::to_string(n_devices > 0 ? n_devices : split.size()) + " devices");
        }
        float sum = 0;
        for (size_t i = 0; i < pl.tensor_split.size(); ++i) {
            if (!(pl.tensor_split[i] >= 0) || !std::isfinite(pl.tensor_split[i])) {
                throw std::invalid_argument("tensor_split shares must be finite and >= 0");
            }
            split[i] = pl.tensor_split[i];
            sum += split[i];
        }
        if (sum <= 0) {
            throw std::invalid_argument("tensor_split must give some device a share above 0");
        }
        mparams.tensor_split = split.data();
    }

    take_last_error();
    llama_model * raw = llama_model_load_from_file(params.path.c_str(), mparams);
    if (raw == nullptr) {
        std::string why = take_last_error();
        const bool offload = n_devices > 0 || (devices.empty() && params.n_gpu_layers != 0);
        throw std::invalid_argument("failed to load model " + params.path +
                                    (why.empty() ? std::string() : ": " + why) +
                                    (offload && why.find("alloc") != std::string::npos
                                         ? " (it does not fit on its devices: offload fewer layers, or name more "
                                           "devices)"
                                         : ""));
    }
    auto mdl     = std::make_shared<model>();
    mdl->ptr.reset(raw);
    mdl->path    = params.path;
    mdl->offloaded = offloads(params);
    mdl->vocab   = llama_model_get_vocab(raw);
    mdl->n_vocab = mdl->vocab ? llama_vocab_n_tokens(mdl->vocab) : 0;
    if (mdl->vocab == nullptr || mdl->n_vocab <= 0) {
        throw std::invalid_argument("model has no vocabulary: " + params.path);
    }
    for (llama_token t = 0; t < mdl->n_vocab; ++t) {
        mdl->max_piece_bytes = std::max<int32_t>(mdl->max_piece_bytes, (int32_t) token_to_piece(*mdl, t, true).size());
    }
    return mdl;
}

std::string vocab_difference(const model & target, const model & draft) {
    const llama_vocab * vt = target.vocab;
    const llama_vocab * vd = draft.vocab;
    if (llama_vocab_type(vt) != llama_vocab_type(vd)) {
        return "draft vocab type " + std::to_string(llama_vocab_type(vd)) + " differs from target vocab type " +
               std::to_string(llama_vocab_type(vt));
    }
    if (target.n_vocab != draft.n_vocab) {
        return "draft vocab has " + std::to_string(draft.n_vocab) + " tokens, target " + std::to_string(target.n_vocab);
    }
    const std::pair<const char *, std::pair<llama_token, llama_token>> specials[] = {
        {"BOS", {llama_vocab_bos(vt), llama_vocab_bos(vd)}},
        {"EOS", {llama_vocab_eos(vt), llama_vocab_eos(vd)}},
        {"EOT", {llama_vocab_eot(vt), llama_vocab_eot(vd)}},
    };
    for (const auto & s : specials) {
        if (s.second.first != s.second.second) {
            return std::string("draft ") + s.first + " token is " + std::to_string(s.second.second) + ", target's is " +
                   std::to_string(s.second.first);
        }
    }
    if (llama_vocab_get_add_bos(vt) != llama_vocab_get_add_bos(vd)) {
        return std::string("draft ") + (llama_vocab_get_add_bos(vd) ? "adds" : "does not add") +
               " a BOS token and the target " + (llama_vocab_get_add_bos(vt) ? "does" : "does not");
    }
    for (llama_token id = 0; id < target.n_vocab; ++id) {
        const char * a = llama_vocab_get_text(vt, id);
        const char * b = llama_vocab_get_text(vd, id);
        if (std::strcmp(a ? a : "", b ? b : "") != 0) {
            return "draft token " + std::to_string(id) + " is '" + (b ? b : "") + "', target's is '" + (a ? a : "") + "'";
        }
    }
    return std::string();
}

namespace {

std::string meta_string(const model & mdl, const char * key) {
    char buf[256];
    const int32_t n = llama_model_meta_val_str(mdl.get(), key, buf, sizeof buf);
    return n < 0 ? std::string() : std::string(buf);
}

}  // namespace

bool kv_interchangeable(const model & target, const model & draft) {
    const llama_model * t = target.get();
    const llama_model * d = draft.get();
    return meta_string(target, "general.architecture") == meta_string(draft, "general.architecture") &&
           llama_model_n_layer(t) == llama_model_n_layer(d) && llama_model_n_embd(t) == llama_model_n_embd(d) &&
           llama_model_n_head(t) == llama_model_n_head(d) && llama_model_n_head_kv(t) == llama_model_n_head_kv(d) &&
           llama_model_n_swa(t) == llama_model_n_swa(d) && llama_model_rope_type(t) == llama_model_rope_type(d) &&
           llama_model_rope_freq_scale_train(t) == llama_model_rope_freq_scale_train(d) &&
           llama_model_n_ctx_train(t) == llama_model_n_ctx_train(d) && target.n_vocab == draft.n_vocab &&
           llama_model_n_params(t) == llama_model_n_params(d);
}

std::string model_describe(const model & mdl) {
    char buf[256];
    llama_model_desc(mdl.get(), buf, sizeof(buf));
    return std::string(buf);
}

std::string model_chat_template(const model & mdl) {
    const char * tmpl = llama_model_chat_template(mdl.get(), nullptr);
    return tmpl ? std::string(tmpl) : std::string();
}

namespace {

// every occurrence of from in s replaced by to
std::string replace_all(std::string s, const std::string & from, const std::string & to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
        s.replace(at, from.size(), to);
    }
    return s;
}

}  // namespace

std::string chat_apply_template(const std::string & tmpl,
                                const std::vector<std::pair<std::string, std::string>> & messages,
                                bool add_assistant) {
    // llama_chat_apply_template reads C strings: a NUL byte in a message travels as a marker that
    // occurs in no message (U+F8FF repeated) and is put back in the result
    std::string marker = "\xEF\xA3\xBF";
    bool        has_nul = false;
    for (bool clash = true; clash;) {
        clash = false;
        for (const auto & m : messages) {
            has_nul = has_nul || m.first.find('\0') != std::string::npos || m.second.find('\0') != std::string::npos;
            clash   = clash || m.first.find(marker) != std::string::npos || m.second.find(marker) != std::string::npos;
        }
        if (clash) {
            marker += "\xEF\xA3\xBF";
        }
    }
    const std::string nul(1, '\0');
    std::vector<std::pair<std::string, std::string>> texts;
    texts.reserve(messages.size());
    std::vector<llama_chat_message> chat;
    chat.reserve(messages.size());
    size_t n_chars = 0;
    for (const auto & m : messages) {
        texts.emplace_back(has_nul ? replace_all(m.first, nul, marker) : m.first,
                           has_nul ? replace_all(m.second, nul, marker) : m.second);
        chat.push_back({texts.back().first.c_str(), texts.back().second.c_str()});
        n_chars += texts.back().first.size() + texts.back().second.size();
    }
    if (tmpl.find('\0') != std::string::npos) {
        throw std::invalid_argument("a chat template name holds a NUL byte");
    }
    std::vector<char> buf(2 * n_chars + 256);
    int32_t n = llama_chat_apply_template(tmpl.c_str(), chat.data(), chat.size(), add_assistant, buf.data(),
                                          (int32_t) buf.size());
    if (n < 0) {
        throw std::invalid_argument("chat template not supported by llama.cpp's built-in templates");
    }
    if ((size_t) n > buf.size()) {
        buf.resize(n);
        n = llama_chat_apply_template(tmpl.c_str(), chat.data(), chat.size(), add_assistant, buf.data(),
                                      (int32_t) buf.size());
    }
    std::string out(buf.data(), n);
    return has_nul ? replace_all(out, marker, nul) : out;
}

std::vector<llama_token> tokenize(const model & mdl, const std::string & text, bool add_special, bool parse_special) {
    if (text.size() > (size_t) INT32_MAX / 2) {
        throw std::invalid_argument("text too long to tokenize");
    }
    std::vector<llama_token> out(text.size() + 8);
    int32_t n = llama_tokenize(mdl.vocab, text.data(), (int32_t) text.size(), out.data(), (int32_t) out.size(),
                               add_special, parse_special);
    if (n < 0) {
        if (n == INT32_MIN) {
            throw std::invalid_argument("text too long to tokenize");
        }
        out.resize(-n);
        n = llama_tokenize(mdl.vocab, text.data(), (int32_t) text.size(), out.data(), (int32_t) out.size(),
                           add_special, parse_special);
    }
    out.resize(n);
    return out;
}

std::vector<llama_token> tokenize_bounded(const model & mdl, const std::string & text, bool add_special,
                                          bool parse_special, int64_t max_tokens) {
    const size_t budget = (size_t) (max_tokens + 64) * (size_t) mdl.max_piece_bytes;
    if (max_tokens >= 0 && text.size() > budget) {
        size_t cut = budget;
        while (cut > 0 && ((unsigned char) text[cut] & 0xC0) == 0x80) {  // not inside a UTF-8 character
            --cut;
        }
        const auto head = tokenize(mdl, text.substr(0, cut), add_special, parse_special);
        if ((int64_t) head.size() > max_tokens + 32) {  // the cut changes at most the last word's tokens
            throw text_too_long((int64_t) head.size() - 32, max_tokens, false);
        }
    }
    auto out = tokenize(mdl, text, add_special, parse_special);
    if (max_tokens >= 0 && (int64_t) out.size() > max_tokens) {
        throw text_too_long((int64_t) out.size(), max_tokens, true);
    }
    return out;
}

std::string token_to_piece(const model & mdl, llama_token token, bool special) {
    if (token < 0 || token >= mdl.n_vocab) {
        throw std::invalid_argument("token id " + std::to_string(token) + " outside the vocabulary of " +
                                    std::to_string(mdl.n_vocab));
    }
    char    buf[128];
    int32_t n = llama_token_to_piece(mdl.vocab, token, buf, sizeof(buf), 0, special);
    if (n >= 0) {
        return std::string(buf, n);
    }
    std::string big(-n, '\0');
    n = llama_token_to_piece(mdl.vocab, token, big.data(), (int32_t) big.size(), 0, special);
    big.resize(n < 0 ? 0 : n);
    return big;
}


}  // namespace specllama
