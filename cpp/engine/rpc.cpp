// engine/rpc.cpp: the bounded handshake with an rpc-server, the registry of servers reached, the
// abort hook that parks a thread whose connection broke, and rpc_serve.
#include "engine/rpc.h"

#if __has_include("ggml-rpc.h")
#include "ggml-rpc.h"  // the RPC protocol's version, in builds that have the RPC backend
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <netdb.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

#include "engine/devices.h"
#include "engine/llama_log.h"
#include "llama.h"

namespace specllama {

namespace {

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

// ggml_abort's hook: see rpc_park_breaks() in rpc.h
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

}  // namespace

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

bool supports_rpc() { return rpc_reg() != nullptr; }

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

bool rpc_any_servers() {
    std::lock_guard<std::mutex> lock(g_rpc_mutex);
    return !g_rpc_devices.empty();
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
        ggml_backend_dev_t found = find_device_outside(name, reg);  // not an rpc-server's
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

}  // namespace specllama
