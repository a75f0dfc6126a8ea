"""The draft takes the prompt's keys and values from the target (share_prefill) when it is the
target in another number format: same output, one prompt pass instead of two.

The strongest check uses a model as its own draft: on the batch-invariant Q4_1 tiny model the draft
then proposes exactly the target's greedy tokens, so every draft is kept only if the copied keys
and values sit at the right positions with the right tokens recorded.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import specllama
from specllama.cli import main


def _gen(dec, prompt, n=40, **kw):
    return dec.generate(prompt, max_tokens=n, temperature=0, ignore_eos=True, n_draft=4, adaptive=False, **kw)


def test_copied_prompt_is_the_drafts_own(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q, n_ctx=512) as dec:
        assert dec.shares_prefill
        prompt = dec.tokenize("she was out with the one that was hot and they were all there")
        r = _gen(dec, prompt)
        # (every prompt token: the draft reads the prompt after the first step, whose plain
        # verification decoded the prompt's last token in the target)
        assert r.stats.n_prompt_shared == len(prompt)
        assert r.stats.n_drafted > 0 and r.stats.n_accepted == r.stats.n_drafted
        plain = _gen(dec, prompt, speculative=False)
        assert plain.stats.n_prompt_shared == 0  # no draft model runs, nothing to copy
        assert r.tokens == plain.tokens


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_same_output_with_and_without_sharing(tiny, temperature):
    outs = {}
    for share in (True, False):
        with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512, share_prefill=share) as dec:
            assert dec.shares_prefill == share
            prompt = dec.tokenize("what some of the")
            r = dec.generate(prompt, max_tokens=48, temperature=temperature, seed=7, ignore_eos=True, n_draft=4,
                             adaptive=False)
            again = dec.generate(prompt, max_tokens=48, temperature=temperature, seed=7, ignore_eos=True,
                                 n_draft=4, adaptive=False)
            assert r.stats.n_prompt_shared == (len(prompt) if share else 0)
            assert again.tokens == r.tokens  # seeded runs stay reproducible
            outs[share] = r.tokens
    if temperature == 0:
        # batch-invariant pair: greedy output is the target's either way
        assert outs[True] == outs[False]


def test_a_later_turn_copies_only_where_that_beats_decoding(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q, n_ctx=1024) as dec:
        first = dec.tokenize("the cat is on the")
        r1 = _gen(dec, first, n=300)
        history = first + r1.tokens
        # two new tokens (the reply's last, never decoded, and one more): the draft decodes them
        # rather than copy 300 tokens' keys and values
        r2 = _gen(dec, history + first[-1:], n=8)
        assert r2.stats.n_prompt_cached == len(history) - 1 and r2.stats.n_prompt_shared == 0
        assert r2.stats.n_accepted == r2.stats.n_drafted > 0
        # a long new message: copied
        more = history + r2.tokens + dec.tokenize(" the one" * 40, add_special=False)
        r3 = _gen(dec, more, n=8)
        assert r3.stats.n_prompt_shared == len(more)
        assert r3.stats.n_accepted == r3.stats.n_drafted > 0


def test_draft_of_another_shape_processes_the_prompt_itself(tiny, slow):
    # slow.target has 32 layers, its draft (the tiny target) 2
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=512) as dec:
        assert not dec.shares_prefill
        r = _gen(dec, "the cat is", n=8)
        assert r.stats.n_prompt_shared == 0 and r.stats.n_drafted > 0


def test_cli_says_when_the_prompt_was_copied(tiny):
    # a fixed draft length: the adaptive rule, timed on this machine and resuming what earlier CLI
    # runs of this pair learned, may leave the draft out until its catch-up is cheaper to decode than to copy
    args = ["generate", "the cat is", "-m", tiny.target_q, "-d", tiny.draft_q, "-c", "512", "-n", "12", "--temp", "0",
            "--fixed-draft", "--n-draft", "4"]
    runner = CliRunner()
    shared = runner.invoke(main, args)
    unshared = runner.invoke(main, args + ["--no-share-prefill"])
    assert shared.exit_code == 0 and unshared.exit_code == 0, shared.output + unshared.output
    assert "copied from the target" in shared.stderr
    assert "copied from the target" not in unshared.stderr
    assert shared.stdout == unshared.stdout


def test_a_probe_in_a_new_generation_copies_its_prompt_from_the_target(tiny):
    """A draft paused in one generation still holds that generation's text (305 prompt tokens and
    more); in the next, whose prompt is far shorter, its probe lacks that prompt and the steps since:
    it copies them from the target's cache (it does not read the last 32 tokens alone), and the
    output is unchanged."""
    prices = specllama.StepPrices(draft_ms=2.0, verify_ms=1.0, verify_token_ms=0.02)
    kw = dict(temperature=0, ignore_eos=True, prices=prices, record_steps=True, drafter="model")
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q, n_ctx=1024) as dec:
        first = dec.generate(" ".join(["she was out with the one that was hot"] * 8), max_tokens=60, **kw)
        new = dec.generate("the cat is", max_tokens=150, **kw)
        plain = _gen(dec, dec.tokenize("the cat is"), n=150, speculative=False)
    assert new.tokens == plain.tokens
    probes = [i for i, t in enumerate(new.stats.steps) if t.probe]
    assert new.stats.n_prompt + probes[0] < first.stats.n_prompt  # (the probe's seq is the shorter)
    assert new.stats.steps[probes[0]].resumed
    assert new.stats.n_resume_shared > new.stats.n_prompt and new.stats.n_window_catch_ups == 0


def test_the_draft_resumes_from_the_targets_cache_after_a_pause(tiny):
    """When the adaptive rule has left the model out of steps, the draft lacks every token since:
    it copies the target's keys and values instead of decoding them, at the right positions (the
    model as its own draft then keeps every draft), and the output is unchanged. Never without
    sharing, and never without a pause (fixed draft lengths), so a draft's measured acceptance is
    its own. Injected prices (a draft decode costs two target steps) make the pauses certain."""
    prompt_text = "she was out with the one that was hot and they were all there"
    prices = specllama.StepPrices(draft_ms=2.0, verify_ms=1.0, verify_token_ms=0.02)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q, n_ctx=512) as dec:
        prompt = dec.tokenize(prompt_text)
        plain = _gen(dec, prompt, n=60, speculative=False)
        resumed = 0
        for n_draft in (1, 2, 4, 8):
            r = dec.generate(prompt, max_tokens=60, temperature=0, ignore_eos=True, n_draft=n_draft,
                             drafter="model", prices=prices)
            assert r.tokens == plain.tokens
            assert r.stats.n_accepted == r.stats.n_drafted
            # what it lacked: tokens generated since a pause (and the prompt's last)
            assert r.stats.n_resume_shared <= r.stats.n_generated + 1
            resumed += r.stats.n_resume_shared
        assert resumed > 0
        fixed = _gen(dec, prompt, n=60, drafter="model")
        assert fixed.stats.n_resume_shared == 0 and fixed.tokens == plain.tokens
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q, n_ctx=512, share_prefill=False) as dec:
        for n_draft in (1, 2, 4, 8):
            r = dec.generate(prompt, max_tokens=60, temperature=0, ignore_eos=True, n_draft=n_draft,
                             drafter="model")
            assert r.stats.n_resume_shared == 0 and r.tokens == plain.tokens
