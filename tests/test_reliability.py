"""Reliability: several decoders in several threads, Ctrl-C in each phase of a generation (in the
API and in `specllama chat`), conversations that fill the context, and a bounded fuzzing run of
the loading path."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import specllama
from conftest import in_threads, interrupt_at_step
from conftest import wait_until_waiting_for_input
from specllama.chat import ChatSession, ContextFull
from tiny_models import parts_only_at_near_ties

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ["the cat is", "she was out with", "what some of the", "they were all there and"]


def test_slots_in_several_threads_share_decodes(tiny, slow):
    """Slots (slots(): the same models, caches as sequences of one context per model, decodes
    merged by one native thread) generating at once in four threads, streaming or not, with a
    cancellation, seeded sampling and a DSI run among them: each slot alone gives exactly what a
    decoder of its own gives; together, their decodes were merged (fewer llama_decode calls than
    the slots sent) and every greedy output equals the one alone, or parts from it only where the
    target's two best tokens are within 1% (merged decodes change the logits by llama.cpp's batch
    numerics: attention over a shared cache)."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as first:
        slots = first.slots(4, max_wait_ms=2_000)  # a decode waits for every generating slot
        assert all(s.target_model is first.target_model and s.n_ctx == 512 for s in slots)
        assert first.slots(1, n_ctx=256)[0].n_ctx == 256
        assert first.slot_batching is None and slots[0].slot_batching == {"decodes": 0, "chunks": 0}
        kinds = [dict(temperature=0, n_draft=4), dict(temperature=0, speculative=False),
                 dict(temperature=0.9, seed=3, adaptive=False), dict(temperature=0, mode="dsi", sp=2, lookahead=3)]
        prompts = [first.tokenize(p) for p in PROMPTS]
        all_in = threading.Barrier(4)

        def run(i, together=False):
            slot, kw = slots[i], kinds[i]
            out = []
            if together:  # the four generate at once from here: each waits for the others' first step
                first_step = [True]

                def meet(*_):
                    if first_step.pop() if first_step else False:
                        all_in.wait(60)

                slot.generate(prompts[i], max_tokens=12, ignore_eos=True, speculative=False, on_step=meet)
            for p in prompts:
                if i == 1:  # streamed, and one stream closed after its first step
                    chunks = slot.stream(p, max_tokens=40, ignore_eos=True, **kw)
                    out.append([t for c in chunks for t in c.tokens])
                    stopped = slot.stream(p, max_tokens=40, ignore_eos=True, **kw)
                    next(stopped)
                    stopped.close()
                else:
                    out.append(slot.generate(p, max_tokens=40, ignore_eos=True, **kw).tokens)
            return out

        alone = [run(i) for i in range(4)]
        own = [[first.generate(p, max_tokens=40, ignore_eos=True, **kinds[i]).tokens for p in prompts]
               for i in range(4)]
        assert alone == own
        before = slots[0].slot_batching
        assert before["chunks"] == before["decodes"] > 0  # one slot at a time: nothing to merge
        for s in slots:
            s.reset()
        together = in_threads(run, [(k, True) for k in range(4)])
        after = slots[0].slot_batching
        assert after["chunks"] - before["chunks"] > after["decodes"] - before["decodes"]
        for k in (0, 1, 3):  # greedy
            for p, a, b in zip(prompts, alone[k], together[k]):
                assert parts_only_at_near_ties(tiny.target_q, p, a, b), (k, a, b)
        assert [len(t) for t in together[2]] == [40] * 4  # sampled: complete


def test_the_slots_benchmark_runs_its_rounds_on_the_same_slots(tiny, tmp_path):
    """benchmarks/slots_bench.py --rounds 2: speculative and plain in turn twice on one set of slots,
    each round's tokens generated as asked and drafts only where speculation is on."""
    out = tmp_path / "slots.json"
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "slots_bench.py"
    run = subprocess.run([sys.executable, str(script), "-m", tiny.target_q, "-d", tiny.draft_q, "--slots", "2",
                          "-n", "6", "--requests-per-slot", "1", "--rounds", "2", "--out", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [(r["round"], r["mode"]) for r in runs] == [(1, "speculative"), (1, "plain"), (2, "speculative"),
                                                        (2, "plain")]
    assert all(r["tokens_per_s"] > 0 and r["slots"] == 2 for r in runs)
    assert runs[1]["drafted"] == runs[3]["drafted"] == 0


def test_several_decoders_in_several_threads_match_running_alone(tiny, slow):
    """Four decoders (plain, speculative greedy, seeded sampling, DSI) generating at once in four
    threads, twice over, give exactly what each gives alone."""
    jobs = [
        (tiny.target_q, tiny.draft_q, dict(temperature=0, speculative=False)),
        (tiny.target_q, tiny.draft_q, dict(temperature=0, n_draft=4)),
        (tiny.target, tiny.draft, dict(temperature=0.9, seed=5, adaptive=False)),
        (slow.target, slow.draft, dict(temperature=0, mode="dsi", sp=2, lookahead=3)),
    ]
    decs = [specllama.SpeculativeDecoder(t, d, n_ctx=512) for t, d, _ in jobs]
    try:
        def run(i):
            dec, kw = decs[i], jobs[i][2]
            return [dec.generate(p, max_tokens=40, ignore_eos=True, **kw).tokens for p in PROMPTS]

        alone = [run(i) for i in range(len(jobs))]
        # two threads per decoder: each decoder also serializes its own callers
        together = in_threads(run, [(k % len(jobs),) for k in range(2 * len(jobs))])
        for k, out in enumerate(together):
            assert out == alone[k % len(jobs)], f"decoder {k % len(jobs)}"
    finally:
        for d in decs:
            d.close()


@pytest.mark.parametrize("phase", ["drafting", "verification"])
def test_ctrl_c_during_a_phase_leaves_decoder_usable(tiny, slow, phase):
    """Ctrl-C while the draft model (resp. the target) is computing: a pair is chosen where that
    phase takes most of the time (checked on a reference run), and the signal is sent after a
    given step, so that it lands while that phase computes a later one. It must raise
    KeyboardInterrupt, and the next generation must equal a fresh decoder's."""
    if phase == "drafting":  # an expensive draft in front of a cheap target
        target, draft, kw = tiny.target_q, slow.target, dict(n_draft=8, adaptive=False)
    else:  # a cheap draft in front of an expensive target, one draft per step
        target, draft, kw = slow.target, slow.far, dict(n_draft=1, adaptive=False)
    with specllama.SpeculativeDecoder(target, draft, n_ctx=4096) as dec:
        ref = dec.generate(PROMPTS[0], max_tokens=64, temperature=0, ignore_eos=True, **kw)
        s = ref.stats
        share = (s.t_draft_ms if phase == "drafting" else s.t_verify_ms) / (s.t_total_ms - s.t_prefill_ms)
        assert share > 0.6, f"{phase} is only {share:.0%} of the time: the test would not target it"
        for step in (2, 5, 9):
            with pytest.raises(KeyboardInterrupt):
                dec.generate(PROMPTS[1], max_tokens=4000, temperature=0, ignore_eos=True,
                             on_step=interrupt_at_step(step), **kw)
            assert dec.generate(PROMPTS[0], max_tokens=64, temperature=0, ignore_eos=True, **kw).tokens == ref.tokens


def test_chat_session_that_fills_the_context(slow):
    """A reply that fills the context ends with finish_reason 'length' and context_full; the next
    turn raises ContextFull (the CLI then offers to start over); after reset it works again."""
    gen = dict(max_tokens=1000, temperature=0, ignore_eos=True)
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=256) as dec:
        session = ChatSession(dec)
        chunks = list(session.send("the cat is on the hot word", **gen))
        final = chunks[-1]
        assert final.finish_reason == "length" and final.context_full
        with pytest.raises(ContextFull):
            list(session.send("and then", **gen))
        session.reset()
        again = "".join(c.text for c in session.send("and then", max_tokens=8, temperature=0))
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=256) as fresh:
        assert again == "".join(c.text for c in ChatSession(fresh).send("and then", max_tokens=8, temperature=0))


def test_cli_chat_reply_that_fills_the_context(slow, tmp_path):
    """The same in `specllama chat`: it says the reply filled the context, offers to start over,
    and the next turn after 'y' is a fresh conversation's."""
    args = ["-m", slow.target, "-d", slow.draft, "-c", "256", "-n", "1000", "--temp", "0"]
    first = " ".join(["the cat is on the hot word"] * 7)
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=256) as dec:
        # precondition: this first turn's reply runs into the end of the context
        assert list(ChatSession(dec).send(first, max_tokens=1000, temperature=0))[-1].context_full
        fresh_reply = "".join(c.text for c in ChatSession(dec).send("hi", max_tokens=1000, temperature=0))
    r = subprocess.run([sys.executable, "-m", "specllama", "chat", *args], input=f"{first}\ny\nhi\n/exit\n".encode(),
                       capture_output=True, timeout=120, cwd=tmp_path, env=_env())
    out, err = r.stdout.decode(), r.stderr.decode()  # bytes: the tiny models' text holds bare \r
    assert r.returncode == 0, err
    assert "filled the context" in err and "conversation cleared" in err
    assert out.endswith(fresh_reply + "\n")


def _env():
    # the specllama under test (installed, or the source tree with its built extension), from a
    # directory that holds no other copy of it
    return dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(Path(specllama.__file__).parent.parent))


def _chat_process(args, tmp_path):
    # bytes, not text: the tiny models' text holds bare \r, which text mode would translate
    return subprocess.Popen([sys.executable, "-m", "specllama", "chat", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), cwd=tmp_path)


def _talk(p, lines: str) -> None:
    p.stdin.write(lines.encode())
    p.stdin.flush()


def _wait_for_prompt(p, prompt: bytes = b">>> ") -> None:
    """Read stderr until the chat's next prompt (the first: the models are loaded)."""
    seen = b""
    while prompt not in seen:
        byte = p.stderr.read(1)
        assert byte, "the chat exited before its prompt: " + seen.decode(errors="replace")
        seen += byte


def test_cli_chat_ctrl_c_mid_reply(slow, tmp_path):
    """Ctrl-C while a reply streams stops that reply only: the chat goes on, and after /reset the
    next reply is a fresh conversation's."""
    # a fixed draft length, so that both replies verify the same batches: adaptive lengths follow
    # timing, so where a one-token batch falls near the end varies, and past about 380 positions
    # this pair's one-token and batched logits differ (conftest.slow); once the two replies
    # differed in their last tokens
    args = ["-m", slow.target, "-d", slow.draft, "-c", "2048", "-n", "1000", "--temp", "0", "--n-draft", "6",
            "--fixed-draft"]
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=2048) as dec:
        fresh_reply = "".join(c.text for c in ChatSession(dec).send("hi", max_tokens=1000, temperature=0,
                                                                     n_draft=6, adaptive=False))
    with _chat_process(args, tmp_path) as p:
        _talk(p, "the cat is on the hot word\n")
        # the reply has started streaming; 1000 tokens take this pair about 3 s, time enough for the
        # signal to land mid-reply even when this process waits for a core
        first = p.stdout.read(1)
        p.send_signal(signal.SIGINT)
        _talk(p, "/reset\nhi\n/exit\n")
        out_b, err_b = p.communicate(timeout=120)
    out, err = (first + out_b).decode(), err_b.decode()
    assert p.returncode == 0, err
    assert "(reply stopped)" in err and "conversation cleared" in err, err
    assert out.endswith(fresh_reply + "\n"), (repr(out[-400:]), repr(fresh_reply[-400:]), err)


def test_cli_chat_ctrl_c_at_the_prompt(tiny, tmp_path):
    """Ctrl-C while a message is being typed discards it and asks again; the chat goes on."""
    with _chat_process(["-m", tiny.target_q, "-d", tiny.draft_q, "-n", "4", "--temp", "0"], tmp_path) as p:
        _wait_for_prompt(p)
        _talk(p, '"""\nhalf a message\n')
        _wait_for_prompt(p, b"... ")
        _wait_for_prompt(p, b"... ")  # both lines read: it waits for the rest
        wait_until_waiting_for_input(p.pid)
        p.send_signal(signal.SIGINT)
        _wait_for_prompt(p, b"(input discarded; /exit or Ctrl-D quits)\n>>> ")
        _talk(p, "/stats\n/exit\n")
        err = p.communicate(timeout=60)[1].decode()
    assert p.returncode == 0, err
    assert "no replies yet" in err and "unknown command" not in err, err


@pytest.mark.default_pair
@pytest.mark.slow
def test_cli_chat_ctrl_c_during_prefill(default_pair, tmp_path):
    """Ctrl-C while a long message is being processed (the default pair takes seconds over it)."""
    target, draft = default_pair
    with specllama.SpeculativeDecoder(target, draft, n_ctx=4096) as dec:
        fresh_reply = "".join(c.text for c in ChatSession(dec).send("Hello", max_tokens=24, temperature=0))
    with _chat_process(["-n", "24", "--temp", "0"], tmp_path) as p:
        _wait_for_prompt(p)  # a signal before the models are loaded would just end the program
        _talk(p, "Summarize this: " + "the quick brown fox jumps over the lazy dog. " * 250 + "\n")
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        _talk(p, "/reset\nHello\n/exit\n")
        out, err = (x.decode() for x in p.communicate(timeout=300))
    assert p.returncode == 0, err
    assert "(reply stopped)" in err
    assert out.endswith(fresh_reply + "\n")


def test_fuzz_loading_path_bounded(tmp_path):
    """scripts/fuzz_gguf.py for a bounded time: mutated GGUF files load or raise, never crash or
    hang (a crash kills the subprocess; its output names the mutant to replay)."""
    seconds = float(os.environ.get("SPECLLAMA_FUZZ_SECONDS", "20"))
    seed = os.environ.get("SPECLLAMA_FUZZ_SEED", "1")  # fixed here; longer clock-seeded runs by hand
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_gguf.py"), "--seconds", str(seconds),
                        "--seed", seed], capture_output=True, text=True,
                       timeout=seconds + 120, cwd=tmp_path, env=_env())
    # the mutant being loaded when it died; llama.cpp's abort handler prints a long backtrace after it
    last = re.findall(r"fuzz: seed \d+ iteration \d+", r.stdout)
    assert r.returncode == 0, (f"fuzzing failed (exit {r.returncode}) at {last[-1] if last else '?'} "
                               f"(replay: scripts/fuzz_gguf.py --replay SEED:ITERATION):\n"
                               f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    assert "no crash or hang" in r.stdout


def test_fuzz_exactness(tmp_path):
    """scripts/fuzz_exactness.py's 200 seeded cases: random decoder settings, drafting options and
    sampling controls, every generation plain decoding's (greedy, or keyed by its seed), or unjudged
    where llama.cpp's batched and one-token logits differ before the first difference (few)."""
    seed = os.environ.get("SPECLLAMA_FUZZ_SEED", "1")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_exactness.py"), "--seed", seed],
                       capture_output=True, text=True, timeout=1200, cwd=tmp_path, env=_env())
    last = re.findall(r"fuzz: case \d+:\d+", r.stdout)
    assert r.returncode == 0, (f"exactness fuzzing failed (exit {r.returncode}), last {last[-1] if last else '?'} "
                               f"(replay: scripts/fuzz_exactness.py --replay SEED:CASE):\n"
                               f"{r.stdout[-3000:]}\n{r.stderr[-2000:]}")
    judged, failed, unjudged = (int(x) for x in re.search(
        r"(\d+) generations compared with plain decoding, (\d+) failed, (\d+) unjudged", r.stdout).groups())
    # the comparison must have happened: most cases run (few combinations are refused) and are judged
    assert failed == 0 and judged >= 300 and unjudged <= judged // 20, r.stdout[-2000:]
