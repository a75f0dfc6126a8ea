"""The Python API's promises: bad input raises a named exception with a useful message and
crashes nothing; streaming equals non-streaming; stats add up; stops; Ctrl-C; threads."""

from __future__ import annotations

import linecache
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
from conftest import in_threads, interrupt_at_step, load_benchmark


@pytest.fixture()
def dec(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=512) as d:
        yield d


# -- bad input -------------------------------------------------------------------------------

def test_missing_path(tiny, tmp_path):
    with pytest.raises(FileNotFoundError, match="model file not found: .*nope.gguf"):
        specllama.SpeculativeDecoder(str(tmp_path / "nope.gguf"))
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        specllama.SpeculativeDecoder(tiny.target, str(tmp_path / "nope.gguf"))


def test_not_gguf(tmp_path):
    f = tmp_path / "model.gguf"
    f.write_text("this is not a model\n")
    with pytest.raises(ValueError, match="not a GGUF file"):
        specllama.SpeculativeDecoder(str(f))
    with pytest.raises(ValueError, match="not a regular file"):
        specllama.Model(str(tmp_path))  # a directory
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="not a GGUF file"):
        specllama.Model(str(empty))


@pytest.mark.parametrize("fraction", [0.0001, 0.01, 0.5, 0.999])
def test_truncated_gguf(tiny, tmp_path, fraction):
    from pathlib import Path

    data = Path(tiny.target).read_bytes()
    f = tmp_path / "truncated.gguf"
    f.write_bytes(data[: max(8, int(len(data) * fraction))])
    with pytest.raises(ValueError, match="failed to load model"):
        specllama.Model(str(f))


def test_draft_of_another_vocabulary_is_paired(tiny):
    """A draft whose vocabulary differs (size, or one token's text) drafts through the tokens both
    share; test_cross_vocab.py checks the output."""
    for draft in (tiny.bigger_vocab, tiny.other_vocab):
        with specllama.SpeculativeDecoder(tiny.target, draft) as d:
            assert d.cross_vocab["draft_share"] > 0.9
            assert d.generate("the cat", max_tokens=4, temperature=0).stats.vocab == "intersection"
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft) as d:
        assert d.cross_vocab is None
        assert d.generate("the cat", max_tokens=4, temperature=0).stats.vocab == "same"


def test_prompt_longer_than_context(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256) as d:
        assert d.n_ctx == 256
        with pytest.raises(ValueError, match=r"the prompt has \d+ tokens but the context holds 256"):
            d.generate("the " * 300, max_tokens=4)
        assert d.generate("the cat", max_tokens=4, temperature=0).tokens  # still usable


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_draft=0), "n_draft must be in"),
    (dict(n_draft=-3), "n_draft must be in"),
    (dict(n_draft=65), "n_draft must be in"),
    (dict(temperature=-0.1), "temperature must be >= 0"),
    (dict(temperature=float("nan")), "temperature must be >= 0"),
    (dict(top_p=0.0), r"top_p must be in \(0, 1\]"),
    (dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
    (dict(top_k=-1), "top_k must be >= 0"),
    (dict(min_p=1.0), r"min_p must be in \[0, 1\)"),
    (dict(max_tokens=0), "max_tokens must be >= 1"),
    (dict(seed=-1), "seed must be"),
])
def test_invalid_parameters(dec, kwargs, match):
    with pytest.raises(ValueError, match=match):
        dec.generate("the cat", **kwargs)
    with pytest.raises(ValueError, match=match):
        list(dec.stream("the cat", **kwargs))


def test_invalid_constructor_parameters(tiny):
    with pytest.raises(ValueError, match="n_draft must be in"):
        specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_draft=0)
    with pytest.raises(ValueError, match="n_batch must be >= 11"):
        specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_batch=4)
    with pytest.raises(TypeError, match="n_ctx must be an int"):
        specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx="big")


def test_bad_token_ids(dec):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        dec.generate([1, 5, 100000], max_tokens=2)
    with pytest.raises(ValueError, match="prompt is empty"):
        dec.generate([], max_tokens=2)


def test_closed_decoder(tiny):
    d = specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=128)
    d.close()
    with pytest.raises(RuntimeError, match="closed"):
        d.generate("the cat")


# -- results and stats -----------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_stream_equals_generate(dec, temperature):
    kw = dict(max_tokens=60, temperature=temperature, seed=42, n_draft=4, ignore_eos=True)
    full = dec.generate("she was out with", **kw)
    chunks = list(dec.stream("she was out with", **kw))
    assert chunks[-1].finish_reason == full.finish_reason == "length"
    assert chunks[-1].stats.n_generated == full.stats.n_generated
    assert "".join(c.text for c in chunks) == full.text
    assert [t for c in chunks for t in c.tokens] == full.tokens
    assert len(chunks) - 1 == chunks[-1].stats.n_steps  # one chunk per verification step, then the end


def test_seed_reproducible(dec):
    a = dec.generate("the cat", max_tokens=30, temperature=1.0, seed=3)
    b = dec.generate("the cat", max_tokens=30, temperature=1.0, seed=3)
    c = dec.generate("the cat", max_tokens=30, temperature=1.0, seed=4)
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_stats_add_up(dec, temperature):
    # at given prices where drafting pays (measured, this draft costs what its target does)
    r = dec.generate("what some of the", max_tokens=80, temperature=temperature, seed=1, n_draft=5,
                     ignore_eos=True, prices=specllama.StepPrices(draft_ms=0.1, verify_ms=1.0, verify_token_ms=0.02))
    s = r.stats
    assert s.n_generated == len(r.tokens) == 80
    assert 0 <= s.n_accepted <= s.n_drafted <= 5 * s.n_steps
    assert sum(s.accepted_hist) == s.n_steps
    assert sum(k * n for k, n in enumerate(s.accepted_hist)) == s.n_accepted
    assert s.n_accepted + s.n_steps >= s.n_generated  # each step emits accepted + 1, the last may be cut
    assert s.acceptance_rate == pytest.approx(s.n_accepted / s.n_drafted)
    assert s.t_total_ms >= s.t_prefill_ms + s.t_draft_ms + s.t_verify_ms + s.t_accept_ms - 1e-6
    # the host's share: outside llama_decode, of which choosing the drafts and the acceptance step
    assert 0 < s.t_draft_sample_ms <= s.t_draft_ms
    assert 0 < s.t_decode_ms <= s.t_total_ms - s.t_prefill_ms
    assert s.t_host_ms == pytest.approx(s.t_total_ms - s.t_prefill_ms - s.t_decode_ms)
    assert s.t_host_ms >= s.t_draft_sample_ms + s.t_accept_ms - 1e-6
    assert s.tokens_per_second > 0
    d = s.as_dict()
    assert d["mean_accepted_length"] == pytest.approx(s.n_generated / s.n_steps)
    # sampling on the host (by default, on a CPU), logits written out for it: a row per verified
    # position (drafts + 1 a step) and per position the draft decoded, at least
    row = 4 * dec.target_model.n_vocab
    assert s.sampling == "host" and s.logits_bytes % row == 0 and s.logits_bytes >= (s.n_drafted + s.n_steps) * row
    assert s.logits_bytes_per_token == pytest.approx(s.logits_bytes / s.n_generated)
    # what the device chains returned: at least a token id and its logit per verified position
    s = dec.generate("what some of the", max_tokens=80, temperature=temperature, seed=1, n_draft=5,
                     ignore_eos=True, prices=specllama.StepPrices(draft_ms=0.1, verify_ms=1.0, verify_token_ms=0.02),
                     device_sampling=True).stats
    assert s.sampling == "device" and 8 * (s.n_drafted + s.n_steps) <= s.logits_bytes < row * (s.n_drafted + s.n_steps)


def test_plain_decoding_writes_one_row_of_logits_per_token(dec):
    s = dec.generate("what some of the", max_tokens=12, ignore_eos=True, speculative=False,
                     device_sampling=False).stats
    assert s.n_steps == s.n_generated == 12
    assert s.logits_bytes == 12 * 4 * dec.target_model.n_vocab


def test_plain_mode_drafts_nothing(dec):
    s = dec.generate("the cat", max_tokens=20, temperature=0, speculative=False, ignore_eos=True).stats
    assert s.n_drafted == 0 and s.n_steps == 20 and s.accepted_hist[0] == 20


def test_target_only_decoder(tiny):
    with specllama.SpeculativeDecoder(tiny.target, n_ctx=128) as d:
        assert not d.has_draft
        r = d.generate("the cat", max_tokens=10, temperature=0, ignore_eos=True)
        assert r.stats.n_drafted == 0 and len(r.tokens) == 10


def test_stop_string(dec):
    full = dec.generate("the cat is", max_tokens=60, temperature=0, ignore_eos=True)
    text = full.text
    # a stop string that first appears somewhere in the middle of the output
    stop = next(text[i:i + 3] for i in range(len(text) // 3, len(text) - 3)
                if "\ufffd" not in text[i:i + 3] and text.find(text[i:i + 3]) == i)
    r = dec.generate("the cat is", max_tokens=60, temperature=0, ignore_eos=True, stop=[stop, "zzzzzz"])
    assert r.finish_reason == "stop"
    assert r.text == text[: text.find(stop)]
    streamed = "".join(c.text for c in dec.stream("the cat is", max_tokens=60, temperature=0, ignore_eos=True,
                                                   stop=stop))
    assert streamed == r.text


def test_end_tokens_the_loop_stops_at_are_llama_cpps(tiny):
    """The loop's list of end-of-generation tokens is exactly the tokens llama.cpp's is_eog counts."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as d:
        for model in (d.target_model, d.draft_model):
            counted = [t for t in range(model.n_vocab) if model.is_eog(t)]
            assert counted, "the test model has no end-of-generation token"
            assert model.eog_ids == counted


def test_end_of_generation(tiny):
    """A model that ends its reply stops with finish_reason "stop" and no end token in the output."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=2048) as d:
        model = d.target_model
        seen = False
        for seed in range(40):
            r = d.generate("the", max_tokens=300, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
            assert not any(model.is_eog(t) for t in r.tokens)
            if r.finish_reason == "stop":
                seen = True
                break
        assert seen, "no generation ended with an end token in 40 tries"


def test_context_full(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256) as d:
        prompt = d.tokenize("the cat is on")
        r = d.generate(prompt, max_tokens=500, temperature=0, ignore_eos=True)
        assert r.finish_reason == "length" and r.context_full
        assert len(prompt) + len(r.tokens) == d.n_ctx + 1  # the last token needs no cache slot
        r2 = d.generate("the cat", max_tokens=5, temperature=0, ignore_eos=True)
        assert len(r2.tokens) == 5 and not r2.context_full


def test_chat_template(dec):
    text = dec.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    toks = dec.tokenize(text)
    assert toks.count(3) == 2  # <|im_start|> parsed as a special token


# -- callbacks, interrupts, threads ----------------------------------------------------------

def test_on_step_can_stop(dec):
    steps = []

    def on_step(tokens, text, n_drafted, n_accepted):
        steps.append(tokens)
        return len(steps) == 3

    r = dec.generate("the cat", max_tokens=100, temperature=0, on_step=on_step, ignore_eos=True)
    assert r.finish_reason == "cancelled" and len(steps) == 3
    assert r.tokens == [t for s in steps for t in s]


def test_the_first_token_does_not_wait_for_the_drafts_prompt_pass(tiny):
    """The first step is plain, and the draft model reads the prompt just before the first step it
    drafts in: a generation stopped at its first reported token leaves the prompt unread by the
    draft; one that goes on drafts (after reading it) and keeps plain decoding's greedy output."""
    kw = dict(temperature=0, ignore_eos=True, n_draft=4, adaptive=False)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as d:
        native = d._native()
        prompt = d.tokenize("she was out with the one that was")
        r = d.generate(prompt, max_tokens=40, on_step=lambda *_: True, **kw)
        assert r.finish_reason == "cancelled" and len(r.tokens) == 1 and r.stats.n_drafted == 0
        assert native.draft_cached_tokens() == []
        assert native.cached_tokens()[:len(prompt)] == prompt
        r = d.generate(prompt, max_tokens=40, **kw)
        assert r.stats.n_drafted > 0
        assert native.draft_cached_tokens()[:len(prompt)] == prompt
        assert r.tokens == d.generate(prompt, max_tokens=40, speculative=False, **kw).tokens


def test_the_first_token_comes_out_of_the_prompts_own_pass(tiny):
    """The first step's verification decodes the part of the prompt the cache lacks together with
    the prompt's last token, in one llama_decode: its trace says how many prompt tokens it took in
    (none where the cache held the prompt, none as StepPrices price it), a slot's one-token reply
    costs its group one llama_decode, and the output is plain decoding's (the batch-invariant Q4_1
    target: the same tokens whether or not the prompt was cached)."""
    kw = dict(temperature=0, ignore_eos=True, n_draft=4, adaptive=False, record_steps=True)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as d:
        prompt = d.tokenize("she was out with the one that was")
        r = d.generate(prompt, max_tokens=12, **kw)
        first = r.stats.steps[0]
        assert (first.n_prompt, first.n_verified, first.n_drafted) == (len(prompt) - 1, 1, 0)
        assert r.stats.n_drafted > 0 and all(s.n_prompt == 0 for s in r.stats.steps[1:])
        again = d.generate(prompt, max_tokens=12, **kw)
        assert again.stats.n_prompt_cached == len(prompt) - 1 and again.stats.steps[0].n_prompt == 0
        assert again.tokens == r.tokens
        d.reset()
        prices = specllama.StepPrices(draft_ms=1.0, verify_ms=5.0, verify_token_ms=0.5)
        priced = d.generate(prompt, max_tokens=12, prices=prices, **kw)
        assert priced.stats.steps[0].n_prompt == 0 and priced.tokens == r.tokens
        (slot,) = d.slots(1)
        with slot:
            before = slot.slot_batching["decodes"]
            one = slot.generate(prompt, max_tokens=1, temperature=0, speculative=False)
            assert slot.slot_batching["decodes"] - before == 1
            assert one.tokens == r.tokens[:1]


def test_the_first_token_benchmark_times_what_it_says(tiny):
    """benchmarks/first_token.py's run: the time to the first reported token, and the draft model's
    drafts (with fixed lengths it drafts; with speculation off it does not), in modes si and dsi."""
    bench = load_benchmark("first_token.py")
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as d:
        prompt = d.tokenize("she was out with the one that was")
        ms, tps, drafted = bench.one_run(d, prompt, 24, True, 4)
        assert ms > 0 and tps > 0 and drafted > 0
        assert bench.one_run(d, prompt, 24, False, 4)[2] == 0
        # (wait_for_drafts: every token waits for a draft, so the drafter drafts however busy the machine)
        ms, tps, drafted = bench.one_run(d, prompt, 24, True, 4, dict(sp=2, wait_for_drafts=True))
        assert ms > 0 and tps > 0 and drafted >= 23
        assert bench.one_run(d, prompt, 24, False, 4, dict(sp=2))[2] == 0


def test_callback_exception_propagates(dec):
    def on_step(*_):
        raise ZeroDivisionError("from the callback")

    with pytest.raises(ZeroDivisionError, match="from the callback"):
        dec.generate("the cat", max_tokens=50, on_step=on_step)
    assert len(dec.generate("the cat", max_tokens=5, temperature=0, ignore_eos=True).tokens) == 5


def test_generate_inside_callback_is_refused(dec):
    def on_step(*_):
        dec.generate("the", max_tokens=2)

    with pytest.raises(RuntimeError, match="already generating"):
        dec.generate("the cat", max_tokens=5, on_step=on_step)


def test_waiting_calls_inside_callback_are_refused(tiny):
    """reset(), cached_tokens() and slots() wait for a running generation; called from that
    generation's own on_step they would wait for ever, so they raise there, and the generation
    goes on. (The generation runs in a thread here, and the decoder is closed only once it ended,
    so that a wait for ever fails the test instead of hanging it.)"""
    dec = specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256)
    errors, done = [], {}

    def on_step(*_):
        for call in (dec.reset, dec.cached_tokens, lambda: dec.slots(2)):
            try:
                call()
            except RuntimeError as exc:
                errors.append(str(exc))
        return False

    def run():
        done["out"] = dec.generate("the cat", max_tokens=6, temperature=0, ignore_eos=True, on_step=on_step)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(300)
    assert "out" in done, "a call from inside on_step waited for the generation it was called from"
    with dec:
        assert len(errors) == 3 * done["out"].stats.n_steps
        assert all("inside this decoder's own generation" in e for e in errors), errors
        dec.reset()
        assert done["out"].tokens == dec.generate("the cat", max_tokens=6, temperature=0, ignore_eos=True).tokens


def test_ctrl_c_interrupts_and_decoder_stays_usable(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=4096) as d:
        expected = d.generate("the cat", max_tokens=30, temperature=0, ignore_eos=True).tokens
        with pytest.raises(KeyboardInterrupt):
            d.generate("the dog", max_tokens=4000, temperature=0, ignore_eos=True, n_draft=2,
                       on_step=interrupt_at_step(5))
        assert d.generate("the cat", max_tokens=30, temperature=0, ignore_eos=True).tokens == expected


def test_ctrl_c_reaches_a_generation_that_runs_no_python(tiny):
    """Without on_step no Python runs between the steps: the signal still stops the native loop
    within a step. A thread sends it once the main thread sits in the native call (its Python frame
    on the line that makes it); the target's cache then holds the interrupted prompt and part of
    its reply: the signal landed inside the loop, not before it began, and the loop stopped well short
    (Python would raise the signal once the call returned, too)."""
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=4096) as d:
        expected = d.generate("the cat", max_tokens=30, temperature=0, ignore_eos=True).tokens
        prompt = d.tokenize("the dog")
        main = threading.main_thread().ident
        assert threading.get_ident() == main

        def in_native_call() -> bool:
            frame = sys._current_frames().get(main)
            return frame is not None and "native.generate(" in linecache.getline(frame.f_code.co_filename,
                                                                                     frame.f_lineno)

        over = threading.Event()  # (no signal for a later test, whatever happens here)

        def interrupt() -> None:
            seen = 0
            while seen < 3 and not over.is_set():  # (three looks 50 ms apart: the call has released the GIL)
                seen = seen + 1 if in_native_call() else 0
                time.sleep(0.05)
            if not over.is_set():
                os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        try:
            with pytest.raises(KeyboardInterrupt):
                d.generate(prompt, max_tokens=4000, temperature=0, ignore_eos=True, n_draft=2)
        finally:
            over.set()
        cached = d.cached_tokens()
        assert cached[:len(prompt)] == prompt and len(cached) < len(prompt) + 2000  # (of 4000)
        assert d.generate("the cat", max_tokens=30, temperature=0, ignore_eos=True).tokens == expected


def test_closing_a_stream_stops_it(dec):
    stream = dec.stream("the cat", max_tokens=2000, temperature=0, ignore_eos=True)
    first = next(stream)
    assert first.tokens
    stream.close()  # GeneratorExit: the worker stops within a step and releases the decoder
    assert len(dec.generate("the", max_tokens=3, temperature=0, ignore_eos=True).tokens) == 3


def test_threads_share_one_decoder(dec):
    prompts = ["the cat", "she was", "what some", "they were all"]
    want = {p: dec.generate(p, max_tokens=40, temperature=0.7, seed=9, ignore_eos=True).tokens for p in prompts}
    got = {}

    def run(p):
        got[p] = dec.generate(p, max_tokens=40, temperature=0.7, seed=9, ignore_eos=True).tokens

    threads = [threading.Thread(target=run, args=(p,)) for p in prompts * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want


def test_a_sibling_shares_the_models_and_keeps_its_own_caches_and_rule(dec):
    """sibling(): the same loaded models, its own settings, KV caches and adaptive draft length;
    the same output as its parent; usable after the parent is closed."""
    sib = dec.sibling(n_draft=4, n_ctx=256)
    assert sib.target_model is dec.target_model and sib.draft_model is dec.draft_model
    assert (sib.n_draft, sib.n_ctx, dec.n_draft, dec.n_ctx) == (4, 256, 10, 512)
    before = dec._native().cost_model()
    want = dec.generate("the cat", max_tokens=40, temperature=0, ignore_eos=True)
    after_parent = dec._native().cost_model()
    # (fixed lengths, so that it drafts whatever this machine's timings teach a new rule)
    got = sib.generate("the cat", max_tokens=40, temperature=0, ignore_eos=True, adaptive=False)
    assert got.tokens == want.tokens and got.stats.n_drafted > 0
    assert dec._native().cost_model() == after_parent != before  # the sibling's steps taught only its own rule
    assert sib.cached_tokens()[-len(got.tokens) + 1:] == got.tokens[:-1]
    dec.reset()
    assert dec.cached_tokens() == [] and sib.cached_tokens() != []
    a = dec.generate("she was", max_tokens=30, temperature=1.0, seed=5, ignore_eos=True)
    b = sib.generate("she was", max_tokens=30, temperature=1.0, seed=5, ignore_eos=True, n_draft=10)
    assert a.tokens == b.tokens  # a seed draws the same generation on either
    dec.close()
    assert sib.generate("the cat", max_tokens=40, temperature=0, ignore_eos=True).tokens == want.tokens
    sib.close()


def test_siblings_generate_at_once_from_threads(dec):
    sibs = [dec, dec.sibling(), dec.sibling(n_draft=3)]
    prompts = ["the cat", "she was", "what some"]
    want = {p: dec.generate(p, max_tokens=40, temperature=0.7, seed=9, ignore_eos=True).tokens for p in prompts}
    jobs = [(i, p) for i in range(3) for p in prompts]
    got = in_threads(lambda i, p: sibs[i].generate(p, max_tokens=40, temperature=0.7, seed=9, ignore_eos=True,
                                                   n_draft=10).tokens, jobs)
    assert got == [want[p] for _, p in jobs]


def test_a_sibling_takes_settings_only(dec):
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_gpu_layers'.*placement"):
        dec.sibling(n_gpu_layers=1)
    with pytest.raises(TypeError, match="n_draft must be an int"):
        dec.sibling(n_draft="4")
    with pytest.raises(ValueError, match="n_draft must be in"):
        dec.sibling(n_draft=0)
    with pytest.raises(ValueError, match="n_ctx is out of range, got 1099511627776"):
        dec.sibling(n_ctx=2**40)
    with pytest.raises(ValueError, match="verify_shape must be"):
        dec.sibling(verify_shape="wide")
    with pytest.raises(ValueError, match="not for a slot"):
        dec.slots(1)[0].sibling()


def test_one_libllama_per_process(tmp_path):
    """Whichever of specllama and llama_cpp is imported first, one libllama is mapped."""
    code = (
        "import {first}, {second}\n"
        "maps = open('/proc/self/maps').read().split('\\n')\n"
        "libs = {{l.split()[-1] for l in maps if 'libllama.so' in l}}\n"
        "print(len(libs), sorted(libs))\n"
        "assert len(libs) == 1, libs\n"
    )
    for first, second in (("specllama", "llama_cpp"), ("llama_cpp", "specllama")):
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(specllama.__file__)))
        out = subprocess.run([sys.executable, "-c", code.format(first=first, second=second)],
                             capture_output=True, text=True, cwd=tmp_path, env=env)
        assert out.returncode == 0, out.stdout + out.stderr


def test_submodules_do_not_shadow_exports():
    """Importing every submodule leaves the package's exported names intact (a submodule named
    like an export, e.g. specllama.quantize, would replace the function with the module)."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(specllama.__path__):
        if info.name != "__main__":  # that one runs the CLI
            importlib.import_module(f"specllama.{info.name}")
    for name in specllama.__all__:
        assert not isinstance(getattr(specllama, name), type(specllama)), name


# -- one options path, nothing silent ------------------------------------------------------------

def test_options_have_one_set_of_defaults_and_reject_unknown_fields(dec):
    opts = specllama.GenerateOptions()
    assert (opts.max_tokens, opts.n_draft, opts.drafter, opts.adaptive, opts.mode) == (256, None, "auto", None, "si")
    assert dec.n_draft == specllama._core.DECODER_DEFAULTS["n_draft"]
    with pytest.raises(TypeError, match="unknown generation option 'temprature'"):
        dec.generate("the cat", temprature=0)
    with pytest.raises(TypeError, match="unknown generation option"):
        specllama.GenerateOptions(temprature=0)
    with pytest.raises(TypeError, match="max_tokens must be an int, got str"):
        dec.generate("the cat", max_tokens="5")
    # an options object and keywords: keywords win, the object is not changed
    base = specllama.GenerateOptions(max_tokens=3, temperature=0)
    assert len(dec.generate("the cat", base, max_tokens=5, ignore_eos=True).tokens) == 5
    assert base.max_tokens == 3 and len(dec.generate("the cat", base, ignore_eos=True).tokens) == 3


def test_a_drafter_that_needs_a_draft_model_is_an_error_without_one(tiny):
    with specllama.SpeculativeDecoder(tiny.target, n_ctx=256) as plain_only:
        for drafter in ("model", "model+lookup"):
            with pytest.raises(ValueError, match=re.escape(f"drafter '{drafter}' needs a draft model")):
                plain_only.generate("the cat", max_tokens=4, drafter=drafter)
        r = plain_only.generate("the cat", max_tokens=4, temperature=0)  # auto: plain decoding
        assert r.stats.drafter == "none" and r.stats.n_drafted == 0
        assert plain_only.drafter_name() == "none" and plain_only.drafter_name(drafter="lookup") == "lookup"


def test_stats_say_who_drafted(dec):
    assert dec.generate("the cat", max_tokens=8, temperature=0).stats.drafter == "model+lookup"
    assert dec.generate("the cat", max_tokens=8, temperature=0, drafter="model").stats.drafter == "model"
    assert dec.generate("the cat", max_tokens=8, temperature=0, speculative=False).stats.drafter == "none"
    assert dec.generate("the cat", max_tokens=8, temperature=0, mode="dsi").stats.drafter == "model"


@pytest.mark.skipif(specllama.supports_gpu_offload(), reason="this build offloads: the warning does not apply")
def test_gpu_layers_on_a_build_without_offload_warn(tiny):
    with pytest.warns(RuntimeWarning, match="n_gpu_layers has no effect"):
        specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256, n_gpu_layers=-1).close()


def test_dsi_on_step_reports_what_each_round_judged(tiny):
    seen = []
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=512) as d:
        r = d.generate("the cat", max_tokens=40, temperature=0, ignore_eos=True, mode="dsi", wait_for_drafts=True,
                       on_step=lambda tokens, text, n_drafted, n_accepted: seen.append((n_drafted, n_accepted)))
    assert sum(n for n, _ in seen) == r.dsi.n_checked > 0
    assert sum(a for _, a in seen) == r.dsi.n_accepted
    assert all(0 <= a <= n for n, a in seen)


def test_importing_a_source_tree_without_the_extension_says_what_to_do(tmp_path):
    """`python -c "import specllama"` in the repository's root imports the source tree, which has no
    built extension: the error says so and how to install for development."""
    src = Path(specllama.__file__).resolve().parent
    (tmp_path / "specllama").mkdir()
    for f in src.glob("*.py"):
        (tmp_path / "specllama" / f.name).write_text(f.read_text())
    # (an editable install's import hook would find the real package first: set it aside)
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'ScikitBuild' not in type(f).__name__]; "
            "import specllama")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1
    assert "ImportError: specllama's native extension (specllama._core) is not in" in r.stderr
    assert "pip install --no-build-isolation -e ." in r.stderr
