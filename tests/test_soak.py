"""Many generations on one decoder (plain and streamed, sampled and greedy, cancelled, reset, chat
turns, DSI): resident memory stays flat; interrupts during prefill leave the decoder usable."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import specllama
from specllama.chat import ChatSession, ContextFull


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.slow
def test_memory_flat_over_hundreds_of_generations(tiny):
    prompts = ["the cat is", "she was out with", "what some of the", "they were all there and"]
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=512) as dec:
        chat = ChatSession(dec)

        def round_(i):
            p = prompts[i % len(prompts)]
            kind = i % 7
            if kind == 5:  # a chat turn; every third one starts over
                if i % 3 == 0:
                    chat.reset()
                try:
                    for _ in chat.send(p, max_tokens=12, temperature=0):
                        pass
                except ContextFull:
                    chat.reset()
                return
            if kind == 6:  # DSI, sometimes cancelled after its first step
                stream = dec.stream(p, max_tokens=24, temperature=0, ignore_eos=True, mode="dsi", sp=2, lookahead=3)
                for k, _ in enumerate(stream):
                    if k == 0 and i % 2:
                        stream.close()
                        break
                return
            if kind == 0:
                dec.generate(p, max_tokens=24, temperature=0.8, seed=i, ignore_eos=True)
            elif kind == 1:
                for _ in dec.stream(p, max_tokens=24, temperature=0, ignore_eos=True):
                    pass
            elif kind == 2:  # cancelled mid-generation
                stream = dec.stream(p, max_tokens=400, temperature=0, ignore_eos=True)
                next(stream)
                stream.close()
            elif kind == 3:
                dec.generate(p, max_tokens=16, on_step=lambda *a: True)  # stops after one step
            else:
                dec.reset()
                dec.generate(p + " the", max_tokens=24, temperature=0, drafter="model+lookup", ignore_eos=True)

        for i in range(60):  # warm up allocator pools and caches
            round_(i)
        before = _rss_mb()
        for i in range(60, 360):
            round_(i)
        growth = _rss_mb() - before
    print(f"RSS growth over 300 generations: {growth:.2f} MB")
    assert growth < 4.0, f"resident memory grew {growth:.1f} MB over 300 generations"


@pytest.mark.default_pair
@pytest.mark.slow
def test_ctrl_c_during_prefill(default_pair):
    target, draft = default_pair
    with specllama.SpeculativeDecoder(target, draft, n_ctx=4096, n_batch=256) as dec:
        long_prompt = dec.tokenize("the quick brown fox jumps over the lazy dog. " * 300)[:3000]
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            dec.generate(long_prompt, max_tokens=4, temperature=0)
        timer.join()
        # stopped between prompt chunks: part of the prompt is cached, none of it is wrong
        assert len(dec.cached_tokens()) < len(long_prompt)
        assert dec.cached_tokens() == long_prompt[: len(dec.cached_tokens())]
        short = dec.tokenize("Hello")
        again = dec.generate(short, max_tokens=8, temperature=0).tokens
    with specllama.SpeculativeDecoder(target, draft, n_ctx=4096) as fresh:
        assert fresh.generate(short, max_tokens=8, temperature=0).tokens == again
