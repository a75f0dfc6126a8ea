"""`specllama serve` as users run it: a real server process on a free loopback port, driven by the
official openai client and by httpx. Loops are bounded in count and time; traffic stays on
loopback."""

import contextlib
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

import specllama
from conftest import load_benchmark
from tiny_models import parts_only_at_near_ties

ROOT = Path(specllama.__file__).parent.parent
CHAT = "/v1/chat/completions"


class Server:
    def __init__(self, proc, url, lines):
        self.proc, self.url, self.lines = proc, url, lines
        # (a guard against a hang: on two cores running other work, the Qwen pair takes minutes over a
        # prompt of a few thousand tokens)
        self.http = httpx.Client(base_url=url, timeout=600)

    def post(self, path, body=None, **kw):
        return self.http.post(path, json=body, **kw) if body is not None else self.http.post(path, **kw)

    def health(self):
        r = self.http.get("/health")
        assert r.status_code == 200
        return r.json()

    def wait_for(self, pred, what):
        """Poll /health until pred(health) holds: at most 600 times, 50 ms apart."""
        for _ in range(600):
            h = self.health()
            if pred(h):
                return h
            time.sleep(0.05)
        raise AssertionError(f"the server never reached: {what} (last: {h})")

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@contextlib.contextmanager
def running(args, env=None):
    """specllama serve ARGS on a free loopback port; stops it with SIGINT (as Ctrl-C) afterwards."""
    proc = subprocess.Popen([sys.executable, "-m", "specllama", "serve", "--port", "0", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
                            cwd=tempfile.gettempdir())  # not the repository's root: its source tree has no extension
    lines: "queue.Queue[str]" = queue.Queue()
    log = []

    def pump():
        for line in proc.stderr:
            log.append(line)
            lines.put(line)
        lines.put(None)

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()
    url = None
    deadline = time.monotonic() + 180
    while url is None and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        if "http://" in line:
            url = line.split("http://", 1)[1].split("/v1", 1)[0]
    if url is None:
        proc.kill()
        proc.wait()
        pumping.join(timeout=30)
        proc.stderr.close()
        raise AssertionError("the server did not start:\n" + "".join(log))
    server = Server(proc, "http://" + url, log)
    try:
        yield server
    finally:
        server.http.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        pumping.join(timeout=30)
        proc.stderr.close()


def _pair(tiny):
    return ["-m", tiny.target_q, "-d", tiny.draft_q]


@pytest.fixture(scope="module")
def server(tiny):
    # a fixed draft length: every step drafts, so each reply reports drafts whatever the adaptive
    # rule would have learned from this machine's timings
    with running([*_pair(tiny), "-c", "512", "-np", "2", "--alias", "tiny", "--fixed-draft", "--n-draft", "3"]) as s:
        yield s


def _client(server, key="none"):
    return OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=120)


MESSAGES = [{"role": "user", "content": "the cat is on"}]


# -- the API ------------------------------------------------------------------------------------

def test_chat_and_completions_streamed_and_not(server):
    """With the openai client: chat and completions, streamed and not; the streamed text equals
    the whole one at temperature 0; usage and timings add up."""
    client = _client(server)
    assert [m.id for m in client.models.list()] == ["tiny"]
    whole = client.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0, max_tokens=12)
    text = whole.choices[0].message.content
    assert whole.object == "chat.completion" and text and whole.choices[0].finish_reason in ("stop", "length")
    chunks = list(client.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0, max_tokens=12,
                                                 stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens

    raw = server.post(CHAT, {"messages": MESSAGES, "temperature": 0, "max_tokens": 12}).json()
    u, t = raw["usage"], raw["timings"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert t["predicted_n"] == u["completion_tokens"] and t["prompt_n"] + t["cache_n"] == u["prompt_tokens"]
    assert t["cache_n"] == u["prompt_tokens_details"]["cached_tokens"]
    assert 0 <= t["draft_n_accepted"] <= t["draft_n"] and t["draft_n"] > 0
    assert t["prompt_n"] >= 1  # the last prompt token is always processed

    comp = client.completions.create(model="tiny", prompt="the cat is on", temperature=0, max_tokens=10)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="tiny", prompt="the cat is on", temperature=0, max_tokens=10, stream=True))
    assert comp.object == "text_completion" and comp.choices[0].text == streamed


def test_greedy_reply_equals_plain_decoding_of_generate(server, tiny, tmp_path):
    """At temperature 0 the server's reply equals `specllama generate --no-draft` on the same
    prompt (the tiny Q4_1 pair's batched and one-token logits are bitwise equal)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for body, args in [({"messages": MESSAGES}, ["--chat", MESSAGES[0]["content"]]),
                       ({"prompt": "she was out with"}, ["she was out with"])]:
        path = CHAT if "messages" in body else "/v1/completions"
        r = server.post(path, dict(body, temperature=0, max_tokens=20)).json()
        text = r["choices"][0]["message"]["content"] if "messages" in body else r["choices"][0]["text"]
        out = subprocess.run([sys.executable, "-m", "specllama", "generate", *args, "-m", tiny.target_q, "--no-draft",
                              "-n", "20", "--temp", "0", "-c", "512", "--json"], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=300)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["text"] == text


def test_penalties_and_logit_bias_as_generate_applies_them(server, tiny, tmp_path):
    """OpenAI's presence_penalty, frequency_penalty and logit_bias and llama-server's
    repeat_penalty, with the draft: the greedy reply equals `specllama generate --no-draft` with
    llama.cpp's flags for the same controls."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # token 10 lifted to the top, until the penalties on its repeats bring it down again
    body = {"prompt": "she was out with", "temperature": 0, "max_tokens": 24, "presence_penalty": 0.8,
            "frequency_penalty": 2.0, "repeat_penalty": 1.3, "repeat_last_n": 16, "logit_bias": {"10": 25, "11": -100}}
    r = _client(server).completions.create(model="tiny", **{k: v for k, v in body.items()
                                                             if k not in ("repeat_penalty", "repeat_last_n")},
                                           extra_body={"repeat_penalty": 1.3, "repeat_last_n": 16})
    text = r.choices[0].text
    assert (r.model_extra or {}).get("timings", {}).get("draft_n", 0) > 0
    out = subprocess.run([sys.executable, "-m", "specllama", "generate", body["prompt"], "-m", tiny.target_q,
                          "--no-draft", "-n", "24", "--temp", "0", "-c", "512", "--json", "--presence-penalty", "0.8",
                          "--frequency-penalty", "2", "--repeat-penalty", "1.3", "--repeat-last-n", "16",
                          "-l", "10+25", "-l", "11-100"], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["text"] == text
    assert 1 < got["tokens"].count(10) < 24  # the bias lifted token 10, and the penalties brought it down


def test_specllama_extensions_and_tokenize(server):
    r = server.post(CHAT, {"messages": MESSAGES, "temperature": 0, "max_tokens": 8, "speculative": False}).json()
    assert r["timings"]["draft_n"] == 0
    r = server.post(CHAT, {"messages": MESSAGES, "temperature": 0, "max_tokens": 8, "n_draft": 2,
                           "drafter": "model"}).json()
    assert r["timings"]["draft_n"] <= 2 * r["usage"]["completion_tokens"]
    toks = server.post("/tokenize", {"content": "the cat\x00 is"}).json()["tokens"]
    assert server.post("/detokenize", {"tokens": toks}).json()["content"] == " the cat\x00 is"
    pieces = server.post("/tokenize", {"content": "the cat", "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == server.post("/tokenize", {"content": "the cat"}).json()["tokens"]


def test_a_conversation_returns_to_the_slot_holding_its_history(server):
    """With two slots, a chat's next turn goes to the slot whose cache holds its earlier turns
    (the longest shared prefix), even after another conversation used the other slot."""
    def turn(messages):
        r = server.post(CHAT, {"messages": messages, "temperature": 0, "max_tokens": 6}).json()
        return r["choices"][0]["message"]["content"], r["usage"]

    a = [{"role": "user", "content": "the cat is on the hot word and " * 4}]
    b = [{"role": "user", "content": "what some of the they were all there " * 4}]
    reply_a, usage_a = turn(a)
    turn(b)
    turn(b + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and then"}])
    _, usage = turn(a + [{"role": "assistant", "content": reply_a}, {"role": "user", "content": "and then"}])
    assert usage["prompt_tokens_details"]["cached_tokens"] >= usage_a["prompt_tokens"] - 1


def test_metrics_count_what_was_served(server):
    before = _metrics(server)
    r = server.post(CHAT, {"messages": MESSAGES, "temperature": 0, "max_tokens": 6}).json()
    after = _metrics(server)
    assert after["specllama_generated_tokens_total"] - before["specllama_generated_tokens_total"] == \
        r["usage"]["completion_tokens"]
    assert after["specllama_drafted_tokens_total"] - before["specllama_drafted_tokens_total"] == r["timings"]["draft_n"]
    assert after['specllama_requests_total{endpoint="/v1/chat/completions",status="200"}'] == \
        before.get('specllama_requests_total{endpoint="/v1/chat/completions",status="200"}', 0) + 1
    for name in ("specllama_acceptance_rate", "specllama_tokens_per_second", "specllama_queue_depth",
                 "specllama_slots_busy", "specllama_slots_total"):
        assert name in after
    assert after["specllama_slots_total"] == 2
    assert after["specllama_slots_per_decode"] >= 1.0  # one request at a time: nothing merged, yet a ratio


def _metrics(server):
    out = {}
    for line in server.http.get("/metrics").text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


# -- bad input ----------------------------------------------------------------------------------

BAD = [
    ("malformed JSON", dict(content=b'{"messages": [', headers={"content-type": "application/json"}), 400,
     "invalid_json", None),
    ("bytes that are not UTF-8", dict(content=b'{"messages": [{"role": "user", "content": "caf\xe9"}]}'), 400,
     "invalid_json", None),
    ("a body nested deeper than Python recurses", dict(content=b"[" * 100_000 + b"]" * 100_000), 400,
     "invalid_json", None),
    ("a schema nested 150 levels deep", dict(json={"messages": MESSAGES, "response_format": {
        "type": "json_schema", "json_schema": {"schema": json.loads('{"items": ' * 150 + "{}" + "}" * 150)}}}),
     400, "invalid_json", None),
    ("a lone surrogate", dict(content=b'{"messages": [{"role": "user", "content": "x\\udcff"}]}'), 400,
     "invalid_value", "messages"),
    ("a field of the wrong type", dict(json={"messages": MESSAGES, "temperature": "hot"}), 400, "invalid_type",
     "temperature"),
    ("an empty messages", dict(json={"messages": []}), 400, "invalid_value", "messages"),
    ("a sampling value out of range", dict(json={"messages": MESSAGES, "top_p": 0}), 400, "invalid_value", "top_p"),
    ("no messages", dict(json={"prompt": "x"}), 400, "unsupported_field", "prompt"),
    ("n of 0", dict(json={"messages": MESSAGES, "n": 0}), 400, "invalid_value", "n"),
    ("n over 128", dict(json={"messages": MESSAGES, "n": 129}), 400, "invalid_value", "n"),
    ("a field it cannot honour", dict(json={"messages": MESSAGES, "echo": True}), 400, "unsupported_field", "echo"),
    ("a deprecated field", dict(json={"messages": MESSAGES, "functions": [{"name": "f"}]}), 400, "unsupported_field",
     "functions"),
    ("a logit_bias keyed by text", dict(json={"messages": MESSAGES, "logit_bias": {"cat": 1}}), 400, "invalid_value",
     "logit_bias"),
    ("a logit_bias token outside the vocabulary", dict(json={"messages": MESSAGES, "logit_bias": {"99999": 1}}), 400,
     "invalid_value", "logit_bias"),
    ("a repeat_penalty of 0", dict(json={"messages": MESSAGES, "repeat_penalty": 0}), 400, "invalid_value",
     "repeat_penalty"),
    ("an unknown field", dict(json={"messages": MESSAGES, "chat_template": "/etc/passwd"}), 400, "unsupported_field",
     "chat_template"),
    ("a prompt longer than the slot's context", dict(json={"messages": [{"role": "user", "content": "the cat " * 400}]}),
     400, "context_length_exceeded", "messages"),
    ("a max_tokens beyond what fits", dict(json={"messages": MESSAGES, "max_tokens": 100000}), 400,
     "context_length_exceeded", "max_tokens"),
    ("a body over the size limit", dict(json={"messages": [{"role": "user", "content": "x" * (9 << 20)}]}), 413,
     "body_too_large", None),
    ("an unknown model", dict(json={"messages": MESSAGES, "model": "/etc/passwd"}), 404, "model_not_found", "model"),
    ("a bad drafter", dict(json={"messages": MESSAGES, "drafter": "psychic"}), 400, "invalid_value", None),
    ("n_predict 0", dict(json={"messages": MESSAGES, "n_predict": 0}), 400, "invalid_value", "n_predict"),
    ("a message without content", dict(json={"messages": [{"role": "user"}]}), 400, "invalid_value", "messages"),
]


@pytest.mark.parametrize("what, request_kw, status, code, param", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_openai_errors_and_the_server_goes_on(server, what, request_kw, status, code, param):
    r = server.http.post(CHAT, **request_kw)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["code"] == code and (param is None or err["param"] == param), err
    assert server.health()["status"] == "ok"


def test_unknown_routes_and_methods(server):
    r = server.http.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = server.http.get(CHAT)
    assert r.status_code == 405 and "error" in r.json()


def test_python_api_shares_the_layer(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        r = dec.create_chat_completion(MESSAGES, temperature=0, max_tokens=10)
        chunks = list(dec.create_chat_completion(MESSAGES, temperature=0, max_tokens=10, stream=True))
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == \
            r["choices"][0]["message"]["content"]
        assert dec.create_completion("the cat", temperature=0, max_tokens=4)["object"] == "text_completion"
        three = dec.create_chat_completion(MESSAGES, temperature=0, max_tokens=10, n=3)
        assert [c["index"] for c in three["choices"]] == [0, 1, 2]
        assert {c["message"]["content"] for c in three["choices"]} == {r["choices"][0]["message"]["content"]}
        assert three["usage"]["completion_tokens"] == 3 * r["usage"]["completion_tokens"]
        assert three["usage"]["prompt_tokens"] == r["usage"]["prompt_tokens"]
        with pytest.raises(specllama.RequestError, match="'n' must be at most 128") as err:
            dec.create_chat_completion(MESSAGES, n=129)
        assert err.value.param == "n" and err.value.status == 400


def test_a_seeded_reply_is_plain_decodings_with_that_seed(server):
    """A request with a seed draws keyed by position (acceptance 'keyed'): its reply is the one
    the same request with speculation off gives, and the drafts still run; without a seed the
    replies differ from request to request."""
    with _client(server) as client:
        for seed in range(3):
            kw = dict(model="tiny", messages=MESSAGES, max_tokens=16, temperature=1.0, seed=seed)
            spec = client.chat.completions.create(**kw)
            plain = client.chat.completions.create(**kw, extra_body={"speculative": False})
            assert spec.choices[0].message.content == plain.choices[0].message.content, seed
            assert spec.model_extra["timings"]["draft_n"] > 0 and plain.model_extra["timings"]["draft_n"] == 0
        unseeded = {client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=16,
                                                   temperature=1.0).choices[0].message.content for _ in range(4)}
        assert len(unseeded) > 1


@pytest.mark.parametrize("kind", ["chat", "text"])
def test_n_choices_are_the_requests_with_the_seeds_after_the_first(server, kind):
    """n choices with a seed: choice c is what the request alone gives with seed + c, streamed or
    not (chunks by their index, one finish each, usage over all); greedy choices are alike."""
    with _client(server) as client:
        if kind == "chat":
            ask = lambda **kw: client.chat.completions.create(model="tiny", messages=MESSAGES, **kw)  # noqa: E731
            text = lambda choice: choice.message.content  # noqa: E731
        else:
            ask = lambda **kw: client.completions.create(model="tiny", prompt="the cat is on", **kw)  # noqa: E731
            text = lambda choice: choice.text  # noqa: E731
        kw = dict(max_tokens=12, temperature=1.0, seed=7)
        alone = [ask(**dict(kw, seed=7 + c)) for c in range(3)]
        r = ask(n=3, **kw)
        assert [c.index for c in r.choices] == [0, 1, 2]
        assert [text(c) for c in r.choices] == [text(a.choices[0]) for a in alone]
        assert len({text(c) for c in r.choices}) > 1, "seeds 7, 8 and 9 drew the same text"
        assert r.usage.completion_tokens == sum(a.usage.completion_tokens for a in alone)
        assert r.usage.prompt_tokens == alone[0].usage.prompt_tokens
        texts, finishes, usages = {}, {}, []
        for chunk in ask(n=3, stream=True, stream_options={"include_usage": True}, **kw):
            for ch in chunk.choices:
                piece = ch.delta.content if kind == "chat" else ch.text
                texts[ch.index] = texts.get(ch.index, "") + (piece or "")
                if ch.finish_reason:
                    finishes[ch.index] = finishes.get(ch.index, []) + [ch.finish_reason]
            if chunk.usage is not None:
                usages.append(chunk.usage)
        assert [texts[c] for c in range(3)] == [text(c) for c in r.choices]
        assert finishes == {c: [r.choices[c].finish_reason] for c in range(3)}
        assert len(usages) == 1 and usages[0].completion_tokens == r.usage.completion_tokens
        greedy = ask(n=2, max_tokens=12, temperature=0)
        assert text(greedy.choices[0]) == text(greedy.choices[1])


# -- several users --------------------------------------------------------------------------------

def test_the_server_benchmark_reports_every_requests_first_token(server):
    """benchmarks/serve_bench.py's round against a running server: the requests and tokens asked
    for, each request's time to its first token, and their median and mean."""
    bench = load_benchmark("serve_bench.py")
    res = bench.run_level(server.url, 2, 2, 6, 0.0)
    assert res["requests"] == 4 and res["tokens"] == 4 * 6 and res["drafted"] > 0
    assert len(res["ttft_s"]) == 4 and res["ttft_s"] == sorted(res["ttft_s"]) and res["ttft_s"][0] > 0
    assert res["ttft_median_s"] == statistics.median(res["ttft_s"])
    assert res["ttft_mean_s"] == pytest.approx(statistics.mean(res["ttft_s"]))


def test_eight_clients_two_hundred_requests(tiny):
    """8 concurrent clients, 200 requests: none lost or mixed up, each greedy reply equal to the
    same request sent alone (or parting from it only where the target's two best tokens are
    within 1%: the slots' merged decodes change the logits by llama.cpp's batch numerics), and
    the server's resident memory flat over the run."""
    prompts = [f"{a} {b}" for a in ("the cat", "she was", "what some", "they were", "the hot word")
               for b in ("is on", "out with", "of the", "all there")]
    with running([*_pair(tiny), "-c", "512", "-np", "4", "--queue-size", "16"]) as server:
        def ask(i):
            p = prompts[i % len(prompts)]
            if i % 2:
                body = {"prompt": p, "temperature": 0, "max_tokens": 8, "return_tokens": True}
                return p, "text", server.http.post("/v1/completions", json=body)
            body = {"messages": [{"role": "user", "content": p}], "temperature": 0, "max_tokens": 8,
                    "return_tokens": True}
            return p, "chat", server.http.post(CHAT, json=body)

        def text_of(kind, r):
            assert r.status_code == 200, r.text
            c = r.json()["choices"][0]
            return c["message"]["content"] if kind == "chat" else c["text"], c["tokens"]

        alone = {}
        for i in range(2 * len(prompts)):
            p, kind, r = ask(i)
            alone[(p, kind)] = text_of(kind, r)
        rss_start = server.rss_kib()
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(ask, range(200)))
        assert len(results) == 200
        with specllama.SpeculativeDecoder(tiny.target_q, n_ctx=512) as ref:
            for p, kind, r in results:
                (text, toks), (first, first_toks) = text_of(kind, r), alone[(p, kind)]
                if text != first:
                    prompt = (ref.chat_tokens([{"role": "user", "content": p}]) if kind == "chat"
                              else ref.tokenize(p))
                    assert parts_only_at_near_ties(tiny.target_q, prompt, first_toks, toks), (p, kind, first, text)
        growth_mib = (server.rss_kib() - rss_start) / 1024
        assert growth_mib < 16, f"resident memory grew by {growth_mib:.1f} MiB over 200 requests"
        assert server.health()["slots_processing"] == 0


def _hold_slot(server, n_ctx):
    """Open a streamed generation that runs until the context is full and return its response,
    once its first text has arrived (the slot is then busy)."""
    body = {"messages": MESSAGES, "max_tokens": n_ctx - 64, "ignore_eos": True, "stream": True, "speculative": False}
    cm = server.http.stream("POST", CHAT, json=body)
    response = cm.__enter__()
    assert response.status_code == 200
    lines = response.iter_lines()
    for line in lines:
        if line.startswith("data: ") and '"content": "' in line and '"content": ""' not in line:
            break
    return cm, lines


def test_queue_full_is_503_and_a_disconnected_client_frees_its_slot(slow):
    """One slot, a queue of one: a second request waits, a third gets 503 with Retry-After. When
    the first client goes away mid-stream its generation stops and the waiting request runs."""
    with running(["-m", slow.target, "--no-draft", "-c", "4096", "-np", "1", "--queue-size", "1"]) as server:
        holder, _ = _hold_slot(server, 4096)
        assert server.health()["slots_processing"] == 1
        waiting = ThreadPoolExecutor(max_workers=1).submit(
            server.post, CHAT, {"messages": MESSAGES, "temperature": 0, "max_tokens": 4})
        server.wait_for(lambda h: h["requests_queued"] == 1, "one request queued")
        r = server.post(CHAT, {"messages": MESSAGES, "max_tokens": 4})
        assert r.status_code == 503 and r.headers.get("retry-after") == "1"
        assert r.json()["error"]["code"] == "server_busy"
        holder.__exit__(None, None, None)  # the client goes away mid-stream
        assert waiting.result(timeout=120).status_code == 200
        server.wait_for(lambda h: h["slots_processing"] == 0 and h["requests_queued"] == 0, "all slots free")


def test_a_client_that_gives_up_on_a_whole_answer_stops_its_generation(slow):
    """A non-streamed request whose client goes away while it generates stops within a step: the
    tokens counted are far fewer than it asked for, and its slot is free again."""
    import socket
    from urllib.parse import urlparse

    with running(["-m", slow.target, "--no-draft", "-c", "4096", "-np", "1"]) as server:
        body = json.dumps({"messages": MESSAGES, "max_tokens": 4000, "ignore_eos": True}).encode()
        where = urlparse(server.url)
        with socket.create_connection((where.hostname, where.port)) as conn:
            conn.sendall(b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            server.wait_for(lambda h: h["slots_processing"] == 1, "the request generating")
        server.wait_for(lambda h: h["slots_processing"] == 0, "the slot free again")
        assert _metrics(server)["specllama_generated_tokens_total"] < 4000


def test_ctrl_c_ends_streams_with_their_final_event(slow):
    with running(["-m", slow.target, "--no-draft", "-c", "4096"]) as server:
        r = server.post(CHAT, {"messages": MESSAGES, "drafter": "model", "max_tokens": 2})  # no draft model here
        assert r.status_code == 400 and r.json()["error"]["param"] == "drafter", r.text
        holder, lines = _hold_slot(server, 4096)
        server.proc.send_signal(signal.SIGINT)
        tail = list(lines)  # the stream ends: the generation stopped within a step
        holder.__exit__(None, None, None)
        events = [line[6:] for line in tail if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["choices"][0]["finish_reason"] == "stop"
        assert server.proc.wait(timeout=60) == 0
        assert any("stopped" in line for line in server.lines)


# -- security -------------------------------------------------------------------------------------

def test_api_key(tiny):
    with running([*_pair(tiny), "-c", "256"], env={"SPECLLAMA_API_KEY": "s3cret"}) as server:
        assert any("http://127.0.0.1:" in line for line in server.lines)  # loopback unless told otherwise
        assert server.http.get("/health").status_code == 200  # for load balancers
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = server.http.post(CHAT, json={"messages": MESSAGES, "max_tokens": 2}, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            assert server.http.get("/v1/models", headers=headers).status_code == 401
        ok = _client(server, "s3cret").chat.completions.create(model="target_q4_1", messages=MESSAGES, max_tokens=2)
        assert ok.choices[0].message.content is not None


def test_the_announced_url_accepts_connections_at_once(tiny):
    """A script that starts the server and connects as soon as the URL is printed must not be refused."""
    import socket

    from specllama.server import ServerConfig, serve

    class Announced(Exception):
        pass

    def announce(line):
        host, port = line.split("http://", 1)[1].split("/v1", 1)[0].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30):
            pass  # the kernel completes the handshake only on a listening socket
        raise Announced(line)

    dec = specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256)
    try:
        with pytest.raises(Announced):
            serve(dec, ServerConfig(port=0), announce=announce)
    finally:
        dec.close()


def test_the_announcement_says_what_is_on_the_gpu(tiny, monkeypatch):
    """Nothing on a machine without a GPU; with one (its free memory set here) every layer of both."""
    from specllama.server import ServerConfig, serve

    class Announced(Exception):
        pass

    def announce(line):
        raise Announced(line)

    lines = []
    for gpus in ([], [("GPU0", 8 << 30)]):
        monkeypatch.setattr(specllama._core, "default_devices", lambda: gpus)
        with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
            with pytest.raises(Announced) as said:
                serve(dec, ServerConfig(port=0), announce=announce)
            lines.append(str(said.value))
    assert "GPU" not in lines[0] and lines[0].endswith("slot(s) of 256 tokens)")
    assert lines[1].endswith("slot(s) of 256 tokens; on the GPU: target: every layer, draft: every layer)")


def test_cors_is_off_unless_an_origin_is_named(tiny, server):
    pre = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
    assert "access-control-allow-origin" not in server.http.options(CHAT, headers=pre).headers
    with running([*_pair(tiny), "-c", "256", "--cors-origin", "http://app.example"]) as s:
        r = s.http.options(CHAT, headers=pre)
        assert r.headers.get("access-control-allow-origin") == "http://app.example"
        r = s.http.options(CHAT, headers=dict(pre, Origin="http://evil.example"))
        assert r.headers.get("access-control-allow-origin") is None


@pytest.mark.default_pair
def test_slots_share_one_copy_of_the_weights(default_pair):
    """Three slots on the default pair add their caches, not three more copies of the 538 MB
    target."""
    target, draft = default_pair

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    with specllama.SpeculativeDecoder(target, draft, n_ctx=1024) as dec:
        dec.generate("hello", max_tokens=2, temperature=0)  # the weights are touched
        before = rss()
        slots = dec.slots(3)
        for s in slots:
            assert s.target_model is dec.target_model
            s.generate("hello", max_tokens=2, temperature=0)
        assert rss() - before < dec.target_model.size


def test_a_generation_that_fails_mid_stream_ends_the_stream_with_its_error():
    """A generation that raises after its first text (a fault in the native loop, say) ends its
    stream with an error event in OpenAI's shape, as a whole answer gets a 500, not with a stream
    cut off; a /v1/responses stream turns it into error and response.failed."""
    import asyncio
    from types import SimpleNamespace

    from specllama import completions
    from specllama.server.generation import _choice_chunks
    from specllama.server.responses import Response

    async def chunks():
        loop = asyncio.get_running_loop()
        run = SimpleNamespace(texts=asyncio.Queue(), future=loop.create_future())
        run.texts.put_nowait(("the cat", None))
        run.texts.put_nowait(None)
        run.future.set_exception(RuntimeError("Unexpected empty grammar stack after accepting piece: ,{"))
        req = completions.parse({"messages": MESSAGES, "stream": True}, "chat")
        writer = completions.ChunkWriter(req, "tiny")
        all_stats = []
        out = [c async for c in _choice_chunks(req, writer, run, None, all_stats)]
        return out, all_stats

    out, all_stats = asyncio.run(chunks())
    assert not all_stats  # (the caller ends the stream there, without [DONE])
    assert [c["choices"][0]["delta"].get("content") for c in out[:-1]] == ["", "the cat"]
    err = out[-1]["error"]
    assert err["type"] == "server_error" and err["code"] == "internal_error"
    assert "Unexpected empty grammar stack" in err["message"]
    resp = Response({"input": "x"}, "tiny")
    resp.start()
    events = [json.loads(e["data"]) for c in out for e in resp.events(c)]
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
