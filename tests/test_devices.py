"""Placement per model (llama.cpp's device list, -dev / -devd / -sm / -ts / -mg), `specllama
devices`, and llama.cpp's RPC backend: the target, or DSI's servers, on rpc-servers started as
users start them (`specllama rpc-server`, real processes on loopback ports)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import specllama
from conftest import LLAMA_CPP_BIN
from specllama import _core

ROOT = Path(specllama.__file__).parent.parent
needs_rpc = pytest.mark.skipif(not _core.supports_rpc(),
                               reason="the installed llama-cpp-python was built without -DGGML_RPC=ON (docs/gpu.md)")


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "specllama", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tempfile.gettempdir(),
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _greedy(dec, **kw):
    return dec.generate("the cat is", max_tokens=24, temperature=0, ignore_eos=True, **kw).tokens


# --- devices and placement (on any build) ---

def test_the_device_list_names_the_cpu_and_the_cli_prints_it():
    devs = _core.list_devices()
    cpu = [d for d in devs if d["type"] == "cpu"]
    assert len(cpu) == 1 and cpu[0]["name"] == "CPU" and cpu[0]["memory_total"] > 0
    assert all(set(d) == {"name", "description", "type", "memory_free", "memory_total"} for d in devs)
    out = _cli("devices")
    assert out.returncode == 0, out.stderr
    assert "CPU" in out.stdout and "RPC backend: " + ("yes" if _core.supports_rpc() else "no") in out.stdout
    # llama.cpp's --list-devices, on every model-running command: prints the same and exits
    flag = _cli("generate", "--list-devices")
    assert flag.returncode == 0 and flag.stdout == out.stdout


def test_the_cpu_placement_gives_the_same_output(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        default = _greedy(dec)
    for device, device_draft in (("none", "cpu"), (["CPU"], None)):
        with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, device=device,
                                          device_draft=device_draft) as dec:
            assert _greedy(dec) == default
            assert dec.shares_prefill  # nothing offloaded: the draft still copies the target's prompt


@pytest.mark.parametrize("kwargs, message", [
    (dict(device="NOPE"), "no device 'NOPE'; this libllama has: CPU"),
    (dict(device="none,NOPE"), "cannot be combined"),
    (dict(device=[]), "device is empty"),
    (dict(device="CPU,"), "empty entry"),
    (dict(split_mode="diagonal"), "split_mode must be"),
    (dict(tensor_split=[-1.0]), "tensor_split shares must be finite and >= 0"),
    (dict(tensor_split=[0.0]), "some device a share above 0"),
    (dict(main_gpu=-1), "main_gpu must be"),
    (dict(rpc="localhost"), "HOST:PORT" if _core.supports_rpc() else "-DGGML_RPC=ON"),
])
def test_a_bad_placement_is_a_clear_error(tiny, kwargs, message):
    with pytest.raises(ValueError) as err:
        specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, **kwargs)
    assert message in str(err.value)


def test_a_named_device_on_a_build_without_offload_does_not_warn_about_layers(tiny, monkeypatch):
    """Naming a device sets n_gpu_layers to every layer; on a build without GPU offload the only
    device is the CPU (no layers) and any other name is refused, so only layers asked for in so
    many words warn that they have no effect. (The suite turns warnings into errors: a warning
    here would take the place of the clear error.) What the build reports is set here, so that
    the check runs on GPU and RPC builds too."""
    monkeypatch.setattr(_core, "supports_gpu_offload", lambda: False)
    with pytest.raises(ValueError, match="no device 'NOPE'"):
        specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, device="NOPE")
    with pytest.raises(ValueError, match="no device 'NOPE'"):
        specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, device_draft="NOPE")
    with pytest.raises(TypeError, match="device must be a str"):
        specllama.SpeculativeDecoder(tiny.target_q, device=5)
    specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, device="cpu").close()
    with pytest.warns(RuntimeWarning, match="n_gpu_layers has no effect"):
        specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, n_gpu_layers_draft=-1).close()


def test_a_bad_placement_on_the_command_line_is_one_line(tiny):
    out = _cli("generate", "-m", tiny.target_q, "-d", tiny.draft_q, "-n", "4", "-dev", "NOPE", "hi")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == ["Error: no device 'NOPE'; this libllama has: CPU (none or cpu: no "
                                               "offload; HOST:PORT: an rpc-server)"]
    out = _cli("generate", "-m", tiny.target_q, "-n", "4", "-ts", "3,x", "hi")
    assert out.returncode == 2 and "'-ts': expected numbers separated by commas" in out.stderr


def test_dsi_servers_placed_on_their_own_devices_are_lossless(tiny):
    """A server placed on a device loads its own copy of the target there (here the CPU); DSI's
    output is still plain decoding's."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, dsi_devices=["none", "cpu"]) as dec:
        plain = _greedy(dec, speculative=False)
        assert _greedy(dec, mode="dsi", sp=3, lookahead=3) == plain
        with pytest.raises(ValueError, match="places 2 DSI servers beyond the target, but sp 2 runs 1"):
            _greedy(dec, mode="dsi", sp=2)
    with pytest.raises(TypeError, match="device must be a str"):
        specllama.SpeculativeDecoder(tiny.target_q, device=5)
    with pytest.raises(TypeError, match="dsi_devices must be a list"):
        specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, dsi_devices="none")


# --- llama.cpp's RPC backend ---

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def rpc_server(memory_bytes=None, program=None):
    """`specllama rpc-server` (or program, llama.cpp's rpc-server) on a free loopback port, as a user
    starts it; killed afterwards. memory_bytes: cap its address space (RLIMIT_AS), so that its
    device has that little room."""

    def cap():
        if memory_bytes is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    port = _free_port()
    command = [str(program)] if program else [sys.executable, "-m", "specllama", "rpc-server"]
    proc = subprocess.Popen([*command, "-p", str(port), "-t", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir(),
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), preexec_fn=cap)
    try:
        deadline = time.monotonic() + 60
        while True:  # listening once a connect succeeds (a bare connect is not a client: it is dropped)
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("rpc-server did not start: " + proc.stderr.read())
                time.sleep(0.05)
        yield f"127.0.0.1:{port}", proc
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


@pytest.fixture(scope="session")
def session_rpc_servers():
    """Start rpc-servers (rpc_server's arguments) that live as long as the test session, as every
    rpc-server this process reaches must (rpc_pair says why)."""
    with contextlib.ExitStack() as stack:
        yield lambda **kw: stack.enter_context(rpc_server(**kw))[0]


@pytest.fixture(scope="session")
def rpc_pair():
    """Two rpc-servers for this process (each serves one client at a time: this one, from here on).
    They live as long as the test session: llama.cpp keeps every rpc-server a process has reached
    in its device registry, and llama-cpp-python's models (tests/test_templates.py) use every
    registered device by default, a dead one included."""
    with rpc_server() as (a, _), rpc_server() as (b, _):
        yield a, b


@pytest.mark.skipif(_core.supports_rpc(), reason="this build has the RPC backend")
def test_rpc_without_the_rpc_build_says_how_to_get_it(tiny):
    with pytest.raises(ValueError, match=r'CMAKE_ARGS="-DGGML_RPC=ON"'):
        specllama.SpeculativeDecoder(tiny.target_q, rpc="127.0.0.1:50052")


@needs_rpc
def test_an_unreachable_or_silent_rpc_server_is_a_clear_error_in_bounded_time(tiny):
    with pytest.raises(ValueError, match=r"cannot reach rpc-server 127\.0\.0\.1:\d+: Connection refused"):
        specllama.SpeculativeDecoder(tiny.target_q, rpc=f"127.0.0.1:{_free_port()}")
    # something listens but does not speak RPC (or an rpc-server busy with another client)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        ep = "127.0.0.1:%d" % silent.getsockname()[1]
        with pytest.raises(ValueError, match="gave no RPC answer within 300 ms"):
            _core.rpc_add_servers(ep, timeout_ms=300)


@needs_rpc
def test_a_target_split_across_two_rpc_servers_gives_the_local_output(tiny, rpc_pair):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        local = _greedy(dec)
    names = _core.rpc_add_servers(list(rpc_pair))
    assert len(names) == 2 and all(n.startswith("RPC") for n in names)
    by_name = {d["name"]: d for d in _core.list_devices()}
    assert [by_name[n]["description"] for n in names] == list(rpc_pair)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, rpc=",".join(rpc_pair),
                                      tensor_split=[1, 1]) as dec:
        assert not dec.shares_prefill  # the target's cache is remote: the draft processes the prompt itself
        assert _greedy(dec) == local
        assert _greedy(dec, speculative=False) == local
        with dec.sibling(n_draft=3) as sib:  # (the same weights on the rpc-servers, caches of its own there)
            assert sib.target_model is dec.target_model and sib.lost is None
            assert _greedy(sib) == local
    # the same devices by name, the draft on the CPU
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, device=names,
                                      device_draft="none") as dec:
        assert _greedy(dec) == local
    # both models on one device; the draft on a device and the target here
    for device, device_draft in ((names[0], names[0]), ("none", names[1])):
        with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, device=device,
                                          device_draft=device_draft) as dec:
            assert dec.lost is None and _greedy(dec) == local


@needs_rpc
def test_models_on_an_rpc_server_sample_there(tiny, rpc_pair):
    """An offloaded model (here to an rpc-server) runs the chain's top-k where it runs, by default:
    only the candidates cross the network, and the tokens are those of sampling whole rows here."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, device=rpc_pair[0],
                                      device_draft=rpc_pair[0]) as dec:
        for temperature in (0.0, 0.8):
            kw = dict(max_tokens=16, temperature=temperature, seed=2, n_draft=3, adaptive=False, drafter="model",
                      ignore_eos=True)
            remote, here = dec.generate("the cat", **kw), dec.generate("the cat", device_sampling=False, **kw)
            assert remote.stats.sampling == "device" and remote.stats.host_sampling_reason == ""
            assert remote.tokens == here.tokens
            assert remote.stats.logits_bytes < here.stats.logits_bytes


# llama.cpp's own rpc-server, built from the same llama-cpp-python sdist by benchmarks/build_llama_cpp.sh
LLAMA_CPP_RPC_SERVER = LLAMA_CPP_BIN / "ggml-rpc-server"


@needs_rpc
@pytest.mark.skipif(not LLAMA_CPP_RPC_SERVER.exists(),
                    reason=f"no {LLAMA_CPP_RPC_SERVER}: SPECLLAMA_LLAMA_CPP_TARGETS=ggml-rpc-server "
                           "bash benchmarks/build_llama_cpp.sh builds it")
def test_llama_cpps_own_rpc_server_program_runs_the_target(tiny, session_rpc_servers):
    """llama.cpp's rpc-server program, built from the pinned sdist, serves specllama's target as
    `specllama rpc-server` does: the same output as on this machine, and DSI with a server on it."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        local = _greedy(dec)
    ep = session_rpc_servers(program=LLAMA_CPP_RPC_SERVER)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, rpc=ep) as dec:
        assert _greedy(dec) == local
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, dsi_devices=[ep]) as dec:
        assert _greedy(dec, mode="dsi", sp=2, lookahead=2) == local


@needs_rpc
@pytest.mark.default_pair
def test_a_model_that_does_not_fit_on_its_device_is_a_clear_error(default_pair, tiny, session_rpc_servers):
    """The default pair's target (538 MB of F32 weights) on an rpc-server with 400 MB of address
    space: its device cannot hold the weights, and the load is a ValueError that says so; the
    process goes on, and a small model fits on the same rpc-server."""
    target = default_pair[0]
    ep = session_rpc_servers(memory_bytes=400 * 2**20)
    with pytest.raises(ValueError, match=r"failed to allocate RPC\d+\[127\.0\.0\.1:\d+\] buffer .*"
                                         r"\(it does not fit on its devices: offload fewer layers, or name more"):
        specllama.SpeculativeDecoder(target, n_ctx=256, rpc=ep)
    with specllama.SpeculativeDecoder(tiny.target_q, n_ctx=256, rpc=ep) as dec:
        assert dec.generate("the cat is", max_tokens=4, temperature=0, ignore_eos=True).stats.n_generated == 4


@needs_rpc
def test_dsi_with_servers_on_rpc_endpoints_is_lossless(tiny, rpc_pair):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, dsi_devices=list(rpc_pair)) as dec:
        plain = _greedy(dec, speculative=False)
        res = dec.generate("the cat is", max_tokens=24, temperature=0, ignore_eos=True, mode="dsi", sp=3,
                           lookahead=3)
        assert res.tokens == plain
        assert res.dsi.n_tasks > 0


@needs_rpc
def test_the_cli_runs_the_target_on_an_rpc_server(tiny):
    local = _cli("generate", "-m", tiny.target_q, "-d", tiny.draft_q, "-n", "16", "--temp", "0", "the cat is")
    assert local.returncode == 0, local.stderr
    with rpc_server() as (ep, _):
        remote = _cli("generate", "-m", tiny.target_q, "-d", tiny.draft_q, "-n", "16", "--temp", "0", "--rpc", ep,
                      "the cat is")
        assert remote.returncode == 0, remote.stderr
        assert remote.stdout == local.stdout
        # llama.cpp's rpc-server serves one client at a time: while another holds it, a new one is
        # refused in bounded time instead of waiting without end
        # the holder runs in a child process, so that this process's own connections stay free
        holder = subprocess.Popen([sys.executable, "-c",
                                   "import sys, specllama; d = specllama.SpeculativeDecoder(sys.argv[1], rpc=sys.argv[2],"
                                   " n_ctx=64); print('ready', flush=True); sys.stdin.read()", tiny.target_q, ep],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir(),
                                  env=dict(os.environ, PYTHONPATH=str(ROOT)))
        try:
            assert holder.stdout.readline().strip() == "ready"
            busy = _cli("generate", "-m", tiny.target_q, "-n", "4", "--rpc", ep, "hi")
            assert busy.returncode == 1
            assert "serves one client at a time" in busy.stderr and "Traceback" not in busy.stderr
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
            holder.stdout.close()


@needs_rpc
def test_models_placed_elsewhere_do_not_use_the_rpc_servers_this_process_reached(tiny):
    """rpc-servers serve the models placed on them only: llama.cpp's default placement (every GPU)
    leaves them out, so a decoder on the default placement still runs after one of them is gone.
    In a process of its own: llama.cpp's device registry is per process, and other libraries'
    models (llama-cpp-python's) do take every registered device by default."""
    code = """if True:
        import sys, specllama
        target, draft, ep = sys.argv[1:]
        with specllama.SpeculativeDecoder(target, rpc=ep, n_ctx=64) as dec:
            remote = dec.generate("the cat is", max_tokens=24, temperature=0, ignore_eos=True).tokens
        print("gone?", flush=True)
        sys.stdin.readline()
        with specllama.SpeculativeDecoder(target, draft, n_ctx=256) as dec:
            assert dec.shares_prefill  # nothing offloaded
            local = dec.generate("the cat is", max_tokens=24, temperature=0, ignore_eos=True, speculative=False)
        print("same" if local.tokens == remote else "differs", flush=True)
    """
    with rpc_server() as (ep, server):
        rc, out, err = _kill_when_asked(server, "gone?", code, tiny.target_q, tiny.draft_q, ep)
    assert rc == 0, err
    assert out.strip() == "same"


def _kill_when_asked(server, ask, code, *args, timeout=300):
    """Run code in a Python process of its own; when it prints the line ask, kill server and answer
    it with a line. Returns its exit status, stdout (after ask) and stderr; timeout bounds a hang."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir(),
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert child.stdout.readline().strip() == ask, child.stderr.read()
        server.kill()
        server.wait()
        out, err = child.communicate("\n", timeout=timeout)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, out, err


# --- an rpc-server that dies in the middle of a generation ---

_KILLED_MID_GENERATION = """if True:
    import sys, threading, specllama
    target, draft, ep_a, ep_b, ep_c, mode = sys.argv[1:]
    kw = dict(max_tokens=200, temperature=0, ignore_eos=True)
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512) as local:
        plain = local.generate("the cat is", speculative=False, **kw).tokens
        if mode == "dsi":  # DSI's first target server on b (the first that a task goes to), the second on a
            dec = specllama.SpeculativeDecoder(target, draft, n_ctx=512, device=ep_b, dsi_devices=[ep_a])
            run = dict(kw, mode="dsi", sp=2, lookahead=2)
        else:  # the target across both rpc-servers
            dec = specllama.SpeculativeDecoder(target, draft, n_ctx=512, rpc=ep_a + "," + ep_b)
            run = dict(kw)
        asked = []

        def kill_b(*step):
            if not asked:  # the parent kills rpc-server b now; the next step needs it
                asked.append(1)
                print("kill b", flush=True)
                sys.stdin.readline()

        try:
            if mode == "stream":  # b dies while the decoder is idle; a stream meets it
                kill_b()
                for chunk in dec.stream("the cat is", **run):
                    pass
            else:
                dec.generate("the cat is", on_step=kill_b, **run)
            print("no error")
        except specllama.RPCConnectionLost as exc:
            print("lost:", exc, flush=True)
        assert dec.lost is not None
        try:
            dec.generate("the cat is", **kw)
            print("ran again")
        except specllama.RPCConnectionLost:
            print("refused again", flush=True)
        dec.close()
        # the rest of the process goes on: a decoder on this machine
        print("local same" if local.generate("the cat is", **kw).tokens == plain else "local differs", flush=True)
        # the broken rpc-server is not used again; another one is
        try:
            specllama.SpeculativeDecoder(target, n_ctx=512, rpc=ep_b)
            print("reused b")
        except specllama.RPCConnectionLost as exc:
            print("b refused:", exc, flush=True)
        with specllama.SpeculativeDecoder(target, draft, n_ctx=512, rpc=ep_c) as again:
            print("reloaded same" if again.generate("the cat is", **kw).tokens == plain else "reloaded differs",
                  flush=True)
"""


@needs_rpc
@pytest.mark.parametrize("mode", ["split", "dsi", "stream"])
def test_an_rpc_server_killed_mid_generation_is_a_clear_error_and_the_process_goes_on(tiny, mode):
    """llama.cpp's RPC client aborts the process on a broken connection; here the decoder raises
    RPCConnectionLost instead, refuses to run again, and everything else in the process goes on,
    a decoder reloaded on another rpc-server included. In a process of its own; rpc-server b is
    killed by the parent at the first verification step (event-driven), or before a stream starts;
    communicate()'s timeout bounds a hang."""
    with rpc_server() as (ep_a, _), rpc_server() as (ep_b, server_b), rpc_server() as (ep_c, _):
        rc, out, err = _kill_when_asked(server_b, "kill b", _KILLED_MID_GENERATION, tiny.target_q, tiny.draft_q,
                                        ep_a, ep_b, ep_c, mode)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("lost: a connection to an rpc-server") and "Remote RPC server crashed" in lines[0], out
    assert lines[1:3] == ["refused again", "local same"], out
    assert lines[3].startswith(f"b refused: the connection to rpc-server {ep_b} broke earlier"), out
    assert lines[4:] == ["reloaded same"], out


@needs_rpc
def test_the_server_fails_the_requests_a_dead_rpc_server_held_and_health_says_so(tiny):
    from test_server import CHAT, running

    with rpc_server() as (ep, rpc_proc):
        with running(["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "4096", "-np", "2", "--rpc", ep]) as server:
            assert server.health()["status"] == "ok"
            body = {"messages": [{"role": "user", "content": "Count."}], "max_tokens": 4000, "ignore_eos": True,
                    "stream": True}
            events = []
            with server.http.stream("POST", CHAT, json=body) as response:
                assert response.status_code == 200
                for line in response.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    events.append(line[6:])
                    if len(events) == 2:  # the reply's first text is out: the rpc-server dies
                        rpc_proc.send_signal(signal.SIGSTOP)  # it answers nothing from here on
                        rpc_proc.kill()
                        rpc_proc.wait()
            last = json.loads(events[-1])
            assert last["error"]["code"] == "rpc_connection_lost", events[-3:]
            assert "Remote RPC server crashed" in last["error"]["message"]
            health = server.http.get("/health")
            assert health.status_code == 503 and health.json()["status"] == "error"
            again = server.post(CHAT, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
            assert again.status_code == 500 and again.json()["error"]["code"] == "rpc_connection_lost"
            tokens = server.post("/tokenize", {"content": "the cat"})  # what needs no model pass still works
            assert tokens.status_code == 200 and tokens.json()["tokens"]
        assert server.proc.returncode == 0  # stopped by Ctrl-C as ever


@needs_rpc
def test_ctrl_c_stops_a_generation_on_rpc_servers_and_the_decoder_goes_on(tiny, rpc_pair):
    """A decoder on rpc-servers runs each call in a helper thread (rpc_guard): Ctrl-C reaches the
    waiting caller, which stops the generation at a coming step and raises KeyboardInterrupt."""
    kw = dict(max_tokens=400, temperature=0, ignore_eos=True)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512, rpc=",".join(rpc_pair)) as dec:
        full = []
        expected = dec.generate("the cat is", on_step=lambda *step: full.append(1), **kw).tokens
        handled = threading.Event()

        def on_sigint(signum, frame):
            handled.set()
            raise KeyboardInterrupt

        steps = []

        def on_step(*step):
            steps.append(1)
            if len(steps) == 2:
                os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: the main thread gets it
            if len(steps) >= 2:
                assert handled.wait(60)  # no step past the second until the caller has seen Ctrl-C

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            with pytest.raises(KeyboardInterrupt):
                dec.generate("the cat is", on_step=on_step, **kw)
        finally:
            signal.signal(signal.SIGINT, previous)
        assert 2 <= len(steps) < len(full) // 2  # it stopped once the caller had seen Ctrl-C
        assert dec.lost is None and dec.generate("the cat is", **kw).tokens == expected


@needs_rpc
def test_a_waiting_call_inside_a_generation_on_rpc_servers_is_refused(tiny, rpc_pair):
    """On rpc-servers each call runs in a helper thread (rpc_guard); a call from a generation's
    own on_step runs in that generation's thread, so reset() raises there as on a local decoder
    instead of waiting for ever in another helper thread. (The generation runs in a thread here,
    and the decoder is closed only once it ended, so that a wait for ever fails the test instead
    of hanging it.)"""
    kw = dict(max_tokens=6, temperature=0, ignore_eos=True)
    dec = specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, rpc=",".join(rpc_pair))
    errors, done = [], {}

    def on_step(*_):
        try:
            dec.reset()
        except RuntimeError as exc:
            errors.append(str(exc))
        return False

    t = threading.Thread(target=lambda: done.setdefault("out", dec.generate("the cat", on_step=on_step, **kw)),
                         daemon=True)
    t.start()
    t.join(300)
    assert "out" in done, "reset() from inside on_step waited for the generation it was called from"
    with dec:
        assert len(errors) == done["out"].stats.n_steps
        assert all("inside this decoder's own generation" in e for e in errors), errors
        dec.reset()
        assert dec.lost is None and dec.generate("the cat", **kw).tokens == done["out"].tokens


def test_a_model_says_where_its_weights_went(tiny):
    """Model.weight_buffers: llama.cpp's load report, each buffer type with its MiB. On the CPU the
    file's weights are mapped, and those of the tiny Q4_1 model (a type llama.cpp repacks on no x86
    or Arm CPU) stay there whole."""
    model = specllama.Model(tiny.target_q)
    buffers = model.weight_buffers
    assert "CPU_Mapped" in buffers, buffers
    file_mib = os.path.getsize(tiny.target_q) / 2**20
    assert 0.8 * file_mib <= buffers["CPU_Mapped"] <= file_mib, (buffers, file_mib)


@needs_rpc
def test_a_model_on_rpc_servers_says_its_weights_are_there(tiny, rpc_pair):
    names = _core.rpc_add_servers(list(rpc_pair))
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, device=names,
                                      device_draft="none", tensor_split=[1, 1]) as dec:
        target, draft = dec.target_model.weight_buffers, dec.draft_model.weight_buffers
    for endpoint in rpc_pair:
        assert any(endpoint in name and mib > 0 for name, mib in target.items()), target
    assert set(draft) == {"CPU_Mapped"}, draft
