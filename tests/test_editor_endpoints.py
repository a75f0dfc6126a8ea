"""Code completion as editors ask for it: llama-server's /infill and /completion on a real
`specllama serve` process, with request bodies shaped as ggml-org's llama.vim and llama.vscode
send them, and the fill-in-the-middle prompt compared token for token with llama-server's own
(built from the pinned sdist by benchmarks/build_llama_cpp.sh; those comparisons skip without it).

Sources of the bodies: llama.vim autoload/llama.vim at a1c8e6e (completion: lines 796-826, cache
warm-up: 552-566, and its headers: 579-584, 838-843); llama.vscode src/llama-server.ts at 3938fb3
(defaultRequestParams: 121-127, createRequestPayload: 183-214).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import signal
import socket
import subprocess
import time

import httpx
import pytest

import specllama
from conftest import LLAMA_CPP_BIN, load_benchmark
from specllama.server import native_completion as nc
from test_server import running
from tiny_models import perturbed, random_weights, vocab, write_model

LLAMA_SERVER = LLAMA_CPP_BIN / "llama-server"
needs_llama_server = pytest.mark.skipif(
    not LLAMA_SERVER.exists(),
    reason=f"no {LLAMA_SERVER}: SPECLLAMA_LLAMA_CPP_TARGETS=llama-server bash benchmarks/build_llama_cpp.sh builds it")

# llama.vim's completion request (autoload/llama.vim:796-826), and the headers it always sends
# (579-584, 838-843: `len("g:llama_config.model_fim")` is the length of that string, so "model"
# and an empty bearer token go with every request)
VIM_HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer "}


def vim_body(prefix, suffix, middle, extra=(), indent=4, t_max_predict_ms=250):
    return {
        "id_slot": 0, "input_prefix": prefix, "input_suffix": suffix, "input_extra": list(extra), "prompt": middle,
        "n_predict": 128, "stop": [], "n_indent": indent, "top_k": 40, "top_p": 0.90,
        "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True, "t_max_prompt_ms": 500,
        "t_max_predict_ms": t_max_predict_ms,
        "response_fields": ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
                            "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
                            "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated",
                            "tokens_cached"],
        "model": "",
    }


# llama.vim's warm-up when a chunk enters its ring (autoload/llama.vim:552-566)
def vim_warmup(extra):
    return {"id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": list(extra), "prompt": "",
            "n_predict": 0, "temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True,
            "t_max_prompt_ms": 1, "t_max_predict_ms": 1, "response_fields": [""], "model": ""}


# llama.vscode's completion and warm-up (src/llama-server.ts:121-127, 183-214; its defaults:
# n_predict 128, max_parallel_completions 3, t_max_prompt_ms 500, t_max_predict_ms 500: package.json)
def vscode_body(prefix, suffix, prompt, chunks=(), nindent=4):
    body = {"id_slot": 0, "input_prefix": prefix, "input_suffix": suffix, "input_extra": list(chunks),
            "prompt": prompt, "n_predict": 128, "n_cmpl": 3, "top_k": 40, "top_p": 0.99, "stream": False,
            "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "t_max_prompt_ms": 500,
            "t_max_predict_ms": 500}
    if nindent:
        body["n_indent"] = nindent
    return body


def vscode_warmup(prefix, suffix, chunks=()):
    return {"id_slot": 0, "input_prefix": prefix, "input_suffix": suffix, "input_extra": list(chunks), "prompt": "",
            "n_predict": 0, "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1}


PREFIX = "def fibonacci(n):\n    \"\"\"The n-th Fibonacci number.\"\"\"\n"
SUFFIX = "\n\nif __name__ == \"__main__\":\n    print(fibonacci(10))\n"
CHUNKS = [{"text": "import math\n\n\ndef square(x):\n    return x * x\n", "time": 1732550000, "filename": "util.py"},
          {"text": "def cube(x):\n    return x * x * x\n", "time": 1732550001, "filename": "more.py"}]


# -- a tiny pair whose vocabulary has FIM tokens but no repo-level ones -----------------------------

@pytest.fixture(scope="module")
def fim_tiny(tmp_path_factory):
    """A tiny target and draft whose vocabulary names FIM prefix, suffix and middle tokens (not
    FIM_REP / FIM_SEP: the plain pattern, extra chunks separated by '--- snippet ---' lines)."""
    d = tmp_path_factory.mktemp("fim_tiny")
    toks = vocab()
    n = len(toks)
    for i, text in zip((n - 3, n - 2, n - 1), ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")):
        toks[i] = text
    ids = {"tokenizer.ggml.fim_pre_token_id": n - 3, "tokenizer.ggml.fim_suf_token_id": n - 2,
           "tokenizer.ggml.fim_mid_token_id": n - 1}
    w = random_weights(n, seed=1)
    target = write_model(d / "target.gguf", toks, w, extra_u32=ids)
    draft = write_model(d / "draft.gguf", toks, perturbed(w, seed=2, noise=0.15), extra_u32=ids)
    return str(target), str(draft)


@pytest.fixture(scope="module")
def fim_server(fim_tiny):
    target, draft = fim_tiny
    with running(["-m", target, "-d", draft, "-c", "1024", "-b", "256", "--alias", "tiny-fim"]) as s:
        yield s


@pytest.fixture(scope="module")
def no_fim_server(tiny):
    with running(["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "256"]) as s:
        yield s


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@functools.lru_cache(maxsize=None)
def _compare():
    return load_benchmark("compare.py")


@contextlib.contextmanager
def llama_server(model, *args):
    """llama.cpp's own llama-server on model, on a free loopback port; on a CPU with AMX without
    weight repacking, whose AMX kernels crash this llama.cpp there (a quantized model's first
    matrix multiplication), as specllama loads its models there (engine/model.cpp) and the
    benchmarks run llama.cpp's programs (compare.has_amx)."""
    port = _free_port()
    no_repack = ["--no-repack"] if _compare().has_amx() else []
    proc = subprocess.Popen([str(LLAMA_SERVER), "-m", model, "--port", str(port), "--host", "127.0.0.1",
                             "-np", "1", "-t", "2", *no_repack, *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # (a prompt of 4096 tokens for the 1.5B target takes minutes on a busy 2-core machine: the same
    # limit as specllama's servers' clients, test_server.Server)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600)
    try:
        for _ in range(1200):
            try:
                if http.get("/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, "llama-server exited"
            time.sleep(0.1)
        else:
            raise AssertionError("llama-server did not become healthy")
        yield http
    finally:
        http.close()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _prompt_of(http, body):
    """The prompt's text and token count as the server answers them; the status for a refusal."""
    r = http.post("/infill", json=dict(body, n_predict=1, temperature=0.0, samplers=["temperature"]))
    if r.status_code != 200:
        return r.status_code
    out = r.json()
    return out["prompt"], out["tokens_evaluated"]


def _lines(name, n):
    return "".join(f"{name}_{i} = {i}\n" for i in range(n))


def _cases(n_prefix_lines, n_extra_lines):
    """Requests for both servers: the last two are cut (prefix and extra context), and the last
    does not fit even so (its suffix keeps its most, n_batch / 4 - 2 - the typed text)."""
    extra = [{"filename": f"f{j}.py", "text": _lines(f"v{j}", n_extra_lines)} for j in range(6)]
    return {
        "plain": {"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "    "},
        "extra chunks": {"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "    return",
                         "input_extra": CHUNKS + [{"text": "no filename\n"}]},
        "cut": {"input_prefix": _lines("line", n_prefix_lines), "input_suffix": _lines("tail", 3), "prompt": "x",
                "input_extra": extra},
        "too long": {"input_prefix": _lines("line", n_prefix_lines), "input_suffix": _lines("tail", n_prefix_lines),
                     "prompt": "x", "input_extra": extra},
    }


def _same_prompts(ours, ref, cases):
    for name, body in cases.items():
        mine = _prompt_of(ours, body)
        assert mine == _prompt_of(ref, body), name
        assert (mine == 400) == (name == "too long"), (name, mine)


@needs_llama_server
def test_the_fim_prompt_is_llama_servers(fim_tiny, fim_server):
    """Plain pattern with a BOS (the tiny vocabulary adds one), '--- snippet ---' separators, and
    prefix, suffix and extra cut to -b 256 in a context of 1024, as llama-server cuts them."""
    with llama_server(fim_tiny[0], "-c", "1024", "-b", "256") as ref:
        _same_prompts(fim_server.http, ref, _cases(120, 60))


# -- the editors' requests on the tiny pair -------------------------------------------------------

def curl_post(server, path, body):
    """A POST as llama.vim's curl sends it, headers byte for byte ("Authorization: Bearer " with
    nothing after it, which httpx refuses to send): (status, body text)."""
    host, port = server.url[len("http://"):].split(":")
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in VIM_HEADERS.items())
            + f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=300) as sock:
        sock.sendall(head + data)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    status_line, _, rest = reply.partition(b"\r\n")
    _, _, body_bytes = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), body_bytes.decode()


def test_llama_vims_requests_are_answered_as_it_reads_them(fim_server):
    status, text = curl_post(fim_server, "/infill", vim_body(PREFIX, SUFFIX, "    ", CHUNKS))
    assert status == 200, text
    # llama.vim takes a reply only if it matches these (autoload/llama.vim, s:fim_on_response)
    assert re.match(r"^\s*{", text) and re.search(r"\"content\"\s*:\"", text)
    out = json.loads(text)
    assert set(out) == set(vim_body("", "", "")["response_fields"])
    assert isinstance(out["content"], str) and out["timings/prompt_n"] > 0 and out["tokens_cached"] > 0
    status, text = curl_post(fim_server, "/infill", vim_warmup(CHUNKS))
    assert status == 200 and json.loads(text) == {}


def test_llama_vscodes_requests_get_three_completions(fim_server):
    r = fim_server.post("/infill", vscode_body(PREFIX, SUFFIX, "    ", CHUNKS))
    assert r.status_code == 200, r.text
    out = r.json()
    assert isinstance(out, list) and [c["index"] for c in out] == [0, 1, 2]
    for c in out:  # what its status bar and completion provider read
        assert isinstance(c["content"], str) and isinstance(c["tokens_cached"], int)
        assert c["generation_settings"]["n_ctx"] == 1024
        assert {"prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
                "predicted_per_second", "draft_n", "draft_n_accepted"} <= set(c["timings"])
    warm = fim_server.post("/infill", vscode_warmup(PREFIX, SUFFIX, CHUNKS))
    assert warm.status_code == 200 and warm.json()["content"] == "" and warm.json()["tokens_predicted"] == 0


def test_a_warm_up_fills_the_cache_that_the_completion_after_it_reuses(fim_server):
    body = vscode_body(PREFIX + "# warm\n", SUFFIX, "", CHUNKS)
    assert fim_server.post("/infill", vscode_warmup(body["input_prefix"], SUFFIX, CHUNKS)).status_code == 200
    out = fim_server.post("/infill", dict(body, n_cmpl=1, temperature=0.0, samplers=["temperature"])).json()
    assert out["timings"]["cache_n"] == out["tokens_evaluated"] - 1  # all but the last prompt token were cached


class _Pieces:
    """A vocabulary whose token i is the text pieces[i] (what Limits reads)."""

    def __init__(self, pieces):
        self.pieces = pieces

    def token_to_piece(self, tok, special=False):
        return self.pieces[tok].encode()


def _limited(pieces, n_indent=0, t_max_predict_ms=0.0, elapsed_s=0.0, steps=None):
    """Feed the tokens 0..n-1 to Limits in steps (lists of token counts; default one token each)
    as the generation's steps would: (kept text, kept tokens, stopped, steps fed)."""
    limits = nc.Limits(_Pieces(pieces), n_indent, t_max_predict_ms)
    limits.t0 -= elapsed_s  # the generation started this long ago
    toks = list(range(len(pieces)))
    steps = steps or [1] * len(toks)
    fed, at = 0, 0
    for n in steps:
        fed += 1
        stop = limits.step(toks[at:at + n])
        at += n
        if stop:
            break
    text, kept = limits.cut("".join(pieces[:at]), toks[:at])
    return text, kept, limits.stopped, fed


def test_n_indent_ends_a_completion_at_a_less_indented_line():
    """As llama-server: once a line has begun, a line whose first non-blank character comes before
    column n_indent ends the completion, cut before that character (its indentation stays)."""
    pieces = ["if x:", "\n", "        ", "y = 1", "\n", "    ", "z", " = 2", "\n"]
    assert _limited(pieces)[2] is False
    text, kept, stopped, _ = _limited(pieces, n_indent=8)
    assert stopped and text == "if x:\n        y = 1\n    " and kept == list(range(7))
    assert _limited(pieces, n_indent=4)[2] is False  # every line is indented enough
    # several tokens in one verification step: the cut is the same
    assert _limited(pieces, n_indent=8, steps=[4, 5])[:3] == (text, kept, True)


def test_t_max_predict_ms_ends_a_completion_at_the_next_line_end():
    """Once t_max_predict_ms has passed, the completion ends after the next token holding a line
    end; before that, the time limit ends nothing."""
    pieces = ["a", "b", "\n", "c", "\n", "d"]
    assert _limited(pieces, t_max_predict_ms=60_000.0, elapsed_s=1.0)[2] is False
    text, kept, stopped, _ = _limited(pieces, t_max_predict_ms=500.0, elapsed_s=1.0)
    assert stopped and text == "ab\n" and kept == [0, 1, 2]
    text, kept, stopped, _ = _limited(pieces, t_max_predict_ms=500.0, elapsed_s=1.0, steps=[5, 1])
    assert stopped and text == "ab\n" and kept == [0, 1, 2]


def test_completion_streams_as_llama_server(fim_server):
    with fim_server.http.stream("POST", "/completion", json={"prompt": "the cat", "n_predict": 8, "stream": True,
                                                            "temperature": 0.0, "samplers": ["temperature"],
                                                            "ignore_eos": True}) as r:
        events = [json.loads(line[len("data: "):]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1]["stop"] is True and events[-1]["content"] == "" and events[-1]["tokens_predicted"] == 8
    assert all(e["stop"] is False for e in events[:-1])
    whole = fim_server.post("/completion", {"prompt": "the cat", "n_predict": 8, "temperature": 0.0,
                                            "samplers": ["temperature"], "ignore_eos": True}).json()
    assert "".join(e["content"] for e in events[:-1]) == whole["content"]


def test_several_completions_stream_one_after_another(fim_server):
    """n_cmpl with stream: each completion's chunks carry its index and end with its whole object."""
    body = {"prompt": "the cat", "n_predict": 6, "n_cmpl": 2, "temperature": 0.0, "samplers": ["temperature"],
            "ignore_eos": True}
    with fim_server.http.stream("POST", "/completion", json=dict(body, stream=True)) as r:
        events = [json.loads(line[len("data: "):]) for line in r.iter_lines() if line.startswith("data: ")]
    assert [e["index"] for e in events if e["stop"]] == [0, 1] and events[-1]["stop"]
    whole = fim_server.post("/completions", body).json()  # llama-server's alias of /completion
    assert [w["index"] for w in whole] == [0, 1]
    for k in (0, 1):
        assert "".join(e["content"] for e in events if e["index"] == k and not e["stop"]) == whole[k]["content"]


def test_penalties_and_logit_bias_on_the_native_endpoints(fim_server):
    """llama-server's fields: logit_bias as [id, bias] pairs (false bans), the penalties, which a
    samplers list without "penalties" turns off (the bias stays: it is not in the list, as there)."""
    body = {"prompt": "the cat", "n_predict": 12, "temperature": 0.0, "ignore_eos": True,
            "logit_bias": [[10, 25], [11, False]], "frequency_penalty": 2.0, "repeat_penalty": 1.3}
    on = fim_server.post("/completion", body).json()
    assert 1 < on["tokens"].count(10) < 12 and 11 not in on["tokens"]
    assert on["generation_settings"]["logit_bias"] == [[10, 25.0], [11, False]]
    off = fim_server.post("/completion", dict(body, samplers=["top_k", "temperature"])).json()
    assert off["tokens"] == [10] * 12


def test_an_edit_before_the_suffix_reuses_it_with_n_cache_reuse(fim_server):
    """Typing in a line moves the whole suffix along: with n_cache_reuse (llama-server's
    --cache-reuse) its cached keys and values move with it instead of being processed again."""
    base = {"input_prefix": PREFIX, "input_suffix": _lines("after", 30), "n_predict": 1, "temperature": 0.0,
            "samplers": ["temperature"]}

    def typed(text, **fields):
        r = fim_server.post("/infill", dict(base, prompt=text, **fields))
        assert r.status_code == 200, r.text
        return r.json()["timings"]

    typed("")
    again = typed("x = 1", n_cache_reuse=0)  # the common prefix only: the suffix is processed again
    typed("")
    moved = typed("x = 1", n_cache_reuse=16)
    n_typed = len(fim_server.post("/tokenize", {"content": "x = 1"}).json()["tokens"])
    # the typed tokens and FIM_MID (the last, decoded anew each time) against those and the suffix (-b 256
    # keeps about 64 - 2 - n_typed of its tokens)
    assert moved["prompt_n"] <= n_typed + 2 < again["prompt_n"] - 40, (again, moved)
    assert moved["cache_n"] - again["cache_n"] == again["prompt_n"] - moved["prompt_n"]


@pytest.mark.parametrize("body, param", [
    ({"input_prefix": "x", "input_extra": [{"filename": "a.py"}]}, "input_extra"),
    ({"input_prefix": "x", "input_extra": "text"}, "input_extra"),
    ({"input_prefix": "x", "t_max_predict_ms": -1}, "t_max_predict_ms"),
    ({"input_prefix": 3}, "input_prefix"),
    ({"input_prefix": "x", "samplers": ["top_k", "mirostat"]}, "samplers"),
    ({"input_prefix": "x", "samplers": ["temperature", "top_k"]}, "samplers"),
    ({"input_prefix": "x", "samplers": ["infill"], "top_k": 0}, "top_k"),
    ({"input_prefix": "x", "repeat_penalty": 0}, "repeat_penalty"),
    ({"input_prefix": "x", "logit_bias": [["x", 1]]}, "logit_bias"),
    ({"input_prefix": "x", "dry_multiplier": 0.8}, "dry_multiplier"),
    ({"input_prefix": "x", "n_cache_reuse": -1}, "n_cache_reuse"),
    (_cases(120, 60)["too long"], "input_prefix"),  # fits only once cut, and not even so
])
def test_bad_infill_requests_get_a_400_and_the_server_goes_on(fim_server, body, param):
    r = fim_server.post("/infill", body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert fim_server.post("/infill", {"input_prefix": "a", "input_suffix": "b", "n_predict": 2}).status_code == 200


def test_a_model_without_fim_tokens_gets_a_clear_400(no_fim_server):
    r = no_fim_server.post("/infill", vim_body(PREFIX, SUFFIX, ""))
    assert r.status_code == 400 and "infill is not supported by this model" in r.json()["error"]["message"]
    assert no_fim_server.post("/completion", {"prompt": "the cat", "n_predict": 2}).status_code == 200


# -- the Qwen2.5-Coder pair: its repo-level FIM tokens, as the editors run it ---------------------

@pytest.fixture(scope="module")
def qwen_server(qwen_pair):
    with running(["-m", qwen_pair[0], "-d", qwen_pair[1], "-c", "4096", "-t", "2"]) as s:
        yield s


@pytest.mark.real_pair
@pytest.mark.slow
@needs_llama_server
def test_the_repo_level_fim_prompt_is_llama_servers(qwen_pair, qwen_server):
    """Qwen2.5-Coder's <|repo_name|> / <|file_sep|> pattern, with and without extra chunks and
    with the extra context cut (-c 4096, llama-server's default -b 2048)."""
    with llama_server(qwen_pair[0], "-c", "4096") as ref:
        _same_prompts(qwen_server.http, ref, _cases(400, 120))
    assert _prompt_of(qwen_server.http, _cases(400, 120)["plain"])[0].startswith("<|repo_name|>myproject\n")


@pytest.mark.real_pair
@pytest.mark.slow
def test_editors_bodies_on_the_qwen_pair(qwen_server):
    status, text = curl_post(qwen_server, "/infill", vim_body(PREFIX, SUFFIX, "    ", CHUNKS, 4, 1000))
    assert status == 200 and re.search(r"\"content\"\s*:\"", text), text
    out = qwen_server.post("/infill", vscode_body(PREFIX, SUFFIX, "    ", CHUNKS)).json()
    assert len(out) == 3 and all(isinstance(c["content"], str) for c in out)


@pytest.mark.real_pair
@pytest.mark.slow
def test_greedy_infill_is_plain_greedy_decoding(qwen_pair, qwen_server):
    """The speculative server's greedy infill equals plain decoding of the same FIM prompt."""
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "    ", "n_predict": 48, "temperature": 0.0,
            "samplers": ["temperature"], "return_tokens": True}
    out = qwen_server.post("/infill", body).json()
    with specllama.SpeculativeDecoder(*qwen_pair, n_ctx=4096) as dec:
        prompt = dec.tokenize(out["prompt"], add_special=False, parse_special=True)
        assert len(prompt) == out["tokens_evaluated"]
        plain = dec.generate(prompt, max_tokens=48, temperature=0.0, speculative=False)
    assert out["tokens"] == plain.tokens


def test_openai_completions_with_a_suffix_are_infill(fim_server):
    """OpenAI's FIM field: /v1/completions with "suffix" completes the same prompt /infill builds
    from that prefix and suffix (greedy: the same text)."""
    from openai import OpenAI

    client = OpenAI(base_url=fim_server.url + "/v1", api_key="none", max_retries=0, timeout=120)
    out = client.completions.create(model="tiny-fim", prompt=PREFIX, suffix=SUFFIX, max_tokens=12, temperature=0,
                                    extra_body={"ignore_eos": True})
    ref = fim_server.post("/infill", {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 12,
                                      "temperature": 0.0, "samplers": ["temperature"], "ignore_eos": True}).json()
    assert out.choices[0].text == ref["content"] and out.usage.prompt_tokens == ref["tokens_evaluated"]


def test_a_suffix_for_a_model_without_fim_tokens_is_a_400(no_fim_server):
    r = no_fim_server.post("/v1/completions", {"prompt": "the cat", "suffix": "on the mat", "max_tokens": 4})
    assert r.status_code == 400 and r.json()["error"]["param"] == "suffix", r.text


@pytest.mark.real_pair
@pytest.mark.slow
def test_the_editor_preset_serves_the_qwen_pair_with_llama_cpps_fim_settings(qwen_pair):
    """--fim-qwen-1.5b-spec: the Qwen2.5-Coder pair, and -b 1024, so that a long prefix keeps its
    last 768 tokens (and the port 8012, unless --port is given, as here)."""
    with running(["--fim-qwen-1.5b-spec", "-t", "2"]) as s:
        assert any("Qwen2.5-Coder-1.5B-Instruct" in line and "Qwen2.5-Coder-0.5B" in line for line in s.lines)
        out = s.post("/infill", {"input_prefix": _lines("line", 400), "input_suffix": "", "n_predict": 1,
                                 "temperature": 0.0, "samplers": ["temperature"]}).json()
    # the repo-level header (<|repo_name|>myproject\n<|file_sep|>filename\n: 7 tokens), FIM_PRE, the
    # prefix's last 768 tokens, FIM_SUF, FIM_MID
    assert out["tokens_evaluated"] == 7 + 1 + 768 + 1 + 1, out["prompt"][:200]


def test_props_and_apply_template_as_llama_vscode_reads_them(fim_server, fim_tiny):
    """llama.vscode reads default_generation_settings.n_ctx from /props
    (src/language-model-token-limits.ts:151-155) and the rendered prompt from /apply-template
    (src/llama-server.ts:684-700)."""
    props = fim_server.http.get("/props").json()
    assert props["default_generation_settings"]["n_ctx"] == 1024 and props["total_slots"] == 1
    messages = [{"role": "user", "content": "the cat"}]
    r = fim_server.post("/apply-template", {"messages": messages, "model": ""})
    assert r.status_code == 200
    with specllama.SpeculativeDecoder(fim_tiny[0], n_ctx=64) as dec:
        assert r.json()["prompt"] == dec.apply_chat_template(messages)
    bad = fim_server.post("/apply-template", {"messages": []})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"
