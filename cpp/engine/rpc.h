// engine/rpc.h: llama.cpp's RPC backend from this side: reaching rpc-servers (a bounded handshake
// first, since llama.cpp's own client aborts the process or waits for ever), registering their
// devices, surviving a connection that breaks later, and serving this machine's devices.
// Not here: naming devices in a placement (devices.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specllama {

// whether the installed libllama was built with llama.cpp's RPC backend (-DGGML_RPC=ON)
bool supports_rpc();

// register rpc-servers (HOST:PORT each) so that their devices can be named; each is reached first
// with a plain TCP connect bounded by timeout_ms, so that an unreachable one is an error here
// (std::invalid_argument), not inside llama.cpp. Returns the names of the servers' devices.
std::vector<std::string> rpc_add_servers(const std::vector<std::string> & endpoints, int32_t timeout_ms = 5000);

// whether any rpc-server was registered in this process
bool rpc_any_servers();

// llama.cpp's RPC client ends the process when a connection to an rpc-server breaks (ggml-rpc.cpp,
// "Remote RPC server crashed or returned malformed response", raised in the thread that owns the
// connection, or in the loading thread when it cannot connect). After rpc_park_breaks(), that abort
// is intercepted: the thread that met it is parked for good (llama.cpp's client cannot go on with
// the connection, and returning would abort), and the break is counted, so that whoever waits on
// that connection can give up on it. Only for callers that watch rpc_failures() while they wait
// (specllama.rpc_guard): anyone else waiting on the connection waits for ever. Other aborts keep
// their course. (llama.cpp opens its connection to an rpc-server once, right after
// rpc_add_servers' own handshake; a server that dies in that instant parks a thread that holds
// llama.cpp's lock on its connections, and later loads on rpc-servers in the process then wait.)
void        rpc_park_breaks();
uint64_t    rpc_failures();
std::string rpc_failure_message();  // the latest break's message ("" when none)

// the rpc-server (HOST:PORT) that serves the device named name, or "" when no registered one does
std::string rpc_endpoint(const std::string & device);

// serve this machine's devices (names; empty: every GPU, else the CPU) to llama.cpp's RPC clients
// at HOST:PORT: llama.cpp's rpc-server, run in this thread. n_threads: the CPU device's threads (0:
// half the cores, as rpc-server); cache_dir: where received tensors are cached ("" for none).
// Returns only when it could not start (std::runtime_error).
void rpc_serve(const std::string & endpoint, int32_t n_threads, const std::vector<std::string> & devices,
               const std::string & cache_dir);

// HOST:PORT (a [v6] host allowed) -> host, port; false when it is not one
bool parse_endpoint(const std::string & ep, std::string & host, std::string & port);

}  // namespace specllama
