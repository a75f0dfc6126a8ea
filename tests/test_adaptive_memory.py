"""The adaptive memory: what a decoder's adaptive draft length learned, written to a file and
resumed by the next decoder of the same models, machine and settings (specllama.adaptive_memory)."""

from __future__ import annotations

import json
import random
import warnings

import pytest
from click.testing import CliRunner

import specllama
from specllama import _core
from specllama.adaptive_memory import default_path
from specllama.cli import main

N_MAX = 8


def _events(seed: int, n: int) -> tuple:
    """n things that happen to an adaptive rule and questions asked of it, as functions of a
    DraftLengthModel returning what it answered; the same list applied to two models in the same
    state must get the same answers. Steps come as the decoding loop makes them (draft_this_step,
    then the step it decided), in spells of 60 where drafting pays, where a draft decode costs a
    plain step (drafting does not pay: pauses and probes), or where little is kept, mixed with new
    generations, prompts, kinds of sampling and questions of every kind. Also returned: each
    model's drafts in its last step, by id (what its next step's prev_n is)."""
    rng = random.Random(seed)
    out = []
    prev: dict = {}  # each model's last step's drafts (prev_n)
    for i in range(n):
        if i % 60 == 0:
            draft_price, keep = rng.choice([(1.0, 0.85), (12.0, 0.8), (1.5, 0.2)])
        r = rng.random()
        if r < 0.5:
            n_model = rng.choice([1, 2, 3, 5, 8])
            n_lookup = rng.choice([0, 0, 0, 1, 2])
            kept = 0
            while kept < n_model + n_lookup and rng.random() < keep:
                kept += 1
            conf = [rng.random() for _ in range(n_model)]
            first = rng.random() < 0.04
            args = dict(n=n_lookup, n_accepted=min(kept, n_lookup), probe=rng.choice([-1, -1, 0, 1]),
                        catch_up_ms=draft_price * rng.uniform(0.8, 1.6), plain_ms=rng.uniform(9.0, 11.0),
                        n_prompt=40 if first and rng.random() < 0.5 else 0, resumed=rng.random() < 0.05)

            def step(m, a=args, n_model=n_model, kept=kept, conf=conf, first=first, dp=draft_price):
                drafts = not m.pricing(True) and m.draft_this_step()
                k = n_model if drafts else 0
                n_all = k + (a["n"] if drafts else 0)
                prev_n = -1 if first else prev.get(id(m), -1)
                m.observe(n_model=k, n=n_all, n_accepted=min(kept, n_all), conf=conf[:k], probe=a["probe"],
                          catch_up_ms=a["catch_up_ms"] if k else 0.0, draft_ms=dp * k + (a["catch_up_ms"] if k else 0),
                          verify_ms=a["plain_ms"] + 1.5 * n_all, prev_n=prev_n, n_prompt=a["n_prompt"],
                          resumed=a["resumed"] and k > 0)
                prev[id(m)] = n_all
                return drafts, m.probing, m.paused(), m.skipped_steps

            out.append(step)
        elif r < 0.53:
            out.append(lambda m, s=rng.random() < 0.5: m.set_sampled(s))
        elif r < 0.57:
            out.append(lambda m, k=rng.randint(1, 300): m.observe_generation(k))
        elif r < 0.59:
            out.append(lambda m, k=rng.randint(1, 100): m.observe_sat_out(k))
        elif r < 0.62:
            out.append(lambda m, k=rng.randint(8, 200), ms=rng.uniform(20, 300): m.observe_prompt(k, ms))
        elif r < 0.64:
            out.append(lambda m, k=rng.randint(8, 200), ms=rng.uniform(5, 100): m.observe_draft_prompt(k, ms))
        elif r < 0.65:
            out.append(lambda m, ms=rng.uniform(0.1, 2.0): m.observe_checkpoint(ms))
        elif r < 0.67:
            out.append(lambda m, ms=rng.uniform(-1.0, 3.0): m.observe_leave(ms))
        else:
            n_done, conf, p = rng.randint(1, 6), rng.random(), rng.random()
            n_prompt, n_gen = rng.randint(1, 2000), rng.randint(1, 400)
            out.append(lambda m, a=(n_done, conf, p, n_prompt, n_gen): (
                m.pricing(True), m.keep_drafting(a[0], a[1], a[2], N_MAX),
                m.keep_going_p(a[0], a[2], a[1], True, N_MAX),
                m.draft_prompt_after(a[3], a[4]), m.probe_window(a[3], a[4]), m.probe_gap(), m.padded_length(N_MAX),
                m.typical_length, [m.verify_ms(k) for k in range(1, 12)], m.rate, m.acceptance, m.accept_prob(a[1]),
                m.priced_excess_ms(), m.pays_at_prices(), m.knows_draft_prices, m.draft_ms, m.catch_up_ms,
                m.leave_ms, m.draft_pays(), m.paused(), m.probing, m.skipped_steps, m.sampled, m.lookup_accept_prob))
    return out, prev


def _events_only(seed: int, n: int) -> list:
    return _events(seed, n)[0]


def _model(settle: int = 2, decodes_again: bool = False) -> _core.DraftLengthModel:
    m = _core.DraftLengthModel()
    m.set_settle_steps(settle)
    m.set_decodes_again(decodes_again)
    return m


@pytest.mark.parametrize("seed", range(8))
def test_a_resumed_model_answers_every_later_question_as_the_one_it_came_from(seed):
    """Every field the rule learns is in its state: a model given another's state answers each
    later event as that one does (and their states stay equal), the state taken at every 23rd
    event (in a pause, in a probe, mid-generation, at a generation's start)."""
    events, prev = _events(seed, 700)
    settle, again = seed % 3, seed % 2 == 1
    a = _model(settle, again)
    differs = 0
    for cut in range(len(events)):
        if cut % 23 == 22:
            b, fresh = _model(settle, again), _model(settle, again)
            b.set_sampled(a.sampled)  # (the kind of the generations is the decoder's setting, as the others)
            fresh.set_sampled(a.sampled)
            b.set_state(a.state())
            assert b.state() == a.state()
            twin = _model(settle, again)  # (a goes on; twin replays a's past, to be compared with b)
            twin_prev = dict(prev)
            for ev in events[:cut]:
                ev(twin)
            assert twin.state() == a.state()
            for m in (b, fresh):
                prev[id(m)] = prev.get(id(twin), -1)
            for i, ev in enumerate(events[cut:cut + 120]):
                want = ev(twin)
                assert ev(b) == want, f"event {cut + i} of seed {seed}, state taken at {cut}"
                differs += ev(fresh) != want
            assert b.state() == twin.state()
            prev.clear()
            prev.update(twin_prev)
        events[cut](a)
    assert differs > 0  # (the events do reach what was learned: a fresh model answers otherwise)


def test_a_state_carries_no_settings():
    a = _model(settle=0)
    a.set_padded(5)
    for ev in _events_only(1, 200):
        ev(a)
    b = _model(settle=2)
    b.set_state(a.state())
    assert b.settle_steps == 2 and b.padded == 0 and a.padded == 5


def test_a_resumed_model_prices_no_plain_steps_first():
    """A new rule's first steps price plain decoding; one resumed from a rule that priced them
    drafts from its first step."""
    a = _model(settle=0)
    for _ in range(3):
        a.observe(n_model=0, n=0, n_accepted=0, conf=[], probe=-1, catch_up_ms=0, draft_ms=0, verify_ms=10.0,
                  prev_n=0)
    assert not a.pricing(True)
    b = _model(settle=0)
    assert b.pricing(True)
    b.set_state(a.state())
    assert not b.pricing(True)


@pytest.mark.parametrize("edit, why", [
    (lambda s: [2.0] + s[1:], "format"),
    (lambda s: [], "format"),
    (lambda s: s[:-1], "ends after"),
    (lambda s: s + [0.0], "were expected"),
    (lambda s: s[:3] + [float("nan")] + s[4:], "not finite"),
    (lambda s: s[:3] + [float("inf")] + s[4:], "not finite"),
])
def test_a_state_not_of_this_format_is_refused_and_changes_nothing(edit, why):
    a = _model()
    for ev in _events_only(2, 300):
        ev(a)
    b = _model()
    for ev in _events_only(3, 100):
        ev(b)
    before = b.state()
    with pytest.raises(ValueError, match=why):
        b.set_state(edit(a.state()))
    assert b.state() == before


def test_counts_and_flags_out_of_their_range_are_refused():
    """Each count and flag of a state refuses a fraction, a negative number and (flags) anything
    but 0 and 1; the model stays as it was."""
    a = _model()
    for ev in _events_only(4, 400):
        ev(a)
    state = a.state()
    refused = 0
    for i in range(1, len(state)):
        for bad in (0.5, -1.0, 2.0):
            edited = list(state)
            edited[i] = bad
            b = _model()
            try:
                b.set_state(edited)
            except ValueError as exc:
                assert any(why in str(exc) for why in ("not a whole number in its range", "unpriced", "ends after",
                                                       "were expected"))
                assert b.state() == _model().state()
                refused += 1
    assert refused >= 30  # (the counts, flags and unpriced steps of two kinds of outcomes, at least)


# --- a decoder's memory ---------------------------------------------------------------------------

PROMPT = "the cat is"


def _decoder(tiny, memory, **kw):
    return specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, adaptive_memory=memory, **{"n_ctx": 512, **kw})


def test_a_decoder_resumes_what_the_last_one_learned(tiny, tmp_path):
    path = tmp_path / "memory.json"
    with _decoder(tiny, path) as dec:
        assert not dec.adaptive_memory.resumed and dec.adaptive_memory.note == "nothing learned yet"
        dec.generate(PROMPT, max_tokens=40, temperature=0.8, seed=1)
        dec.generate(PROMPT, max_tokens=40, temperature=0)  # (greedy last: a new decoder's kind until it generates)
        learned = dec._native().adaptive_state()
        learned_costs = dec._native().cost_model()
    saved = json.loads(path.read_text())
    assert saved["state"] == learned and saved["format"] == specllama.adaptive_memory.FORMAT
    assert saved["generations"] == 2
    with _decoder(tiny, path) as again:
        assert again._native().adaptive_state() == learned
        assert again._native().cost_model() == learned_costs
    with _decoder(tiny, False) as fresh:
        assert fresh.adaptive_memory is None
        assert fresh._native().adaptive_state() != learned
    with _decoder(tiny, path) as again:
        assert again.adaptive_memory.generations == 2
        again.generate(PROMPT, max_tokens=8, temperature=0)
    assert json.loads(path.read_text())["generations"] == 3  # (every run that kept it)


def test_a_resumed_decoder_gives_the_same_output(tiny, tmp_path):
    """Greedy and seeded (keyed draws: plain decoding's sample) outputs of a decoder that resumed a
    memory are plain decoding's, as a new decoder's are."""
    path = tmp_path / "memory.json"
    with _decoder(tiny, False) as plain_dec:
        greedy = plain_dec.generate(PROMPT, max_tokens=48, temperature=0, speculative=False).tokens
        seeded = plain_dec.generate(PROMPT, max_tokens=48, temperature=0.9, seed=5, speculative=False).tokens
    for _ in range(3):
        with _decoder(tiny, path) as dec:
            assert dec.generate(PROMPT, max_tokens=48, temperature=0).tokens == greedy
            assert dec.generate(PROMPT, max_tokens=48, temperature=0.9, seed=5).tokens == seeded
    assert dec.adaptive_memory.resumed


def test_generations_priced_by_given_prices_are_not_written(tiny, tmp_path):
    path = tmp_path / "memory.json"
    with _decoder(tiny, path) as dec:
        dec.generate(PROMPT, max_tokens=8, temperature=0)
        first = path.read_text()
        dec.generate(PROMPT, max_tokens=8, temperature=0, prices=specllama.StepPrices(1.0, 10.0, 1.0))
        assert dec.adaptive_memory.note.startswith("not written")
        assert not dec.save_adaptive_memory()
    assert path.read_text() == first


def test_writes_wait_for_the_interval_and_close(tiny, tmp_path, monkeypatch):
    path = tmp_path / "memory.json"
    monkeypatch.setattr(specllama.adaptive_memory, "SAVE_INTERVAL_S", 3600.0)
    with _decoder(tiny, path) as dec:
        dec.generate(PROMPT, max_tokens=8, temperature=0)  # (the first is written at once)
        assert dec.adaptive_memory.n_saves == 1
        for chunk in dec.stream(PROMPT, max_tokens=8, temperature=0):
            pass
        assert dec.adaptive_memory.n_saves == 1
        state = dec._native().adaptive_state()
        assert json.loads(path.read_text())["state"] != state
        assert dec.save_adaptive_memory() and not dec.save_adaptive_memory()  # (nothing new the second time)
        assert json.loads(path.read_text())["state"] == state
        dec.generate(PROMPT, max_tokens=8, temperature=0)
    assert dec.adaptive_memory.n_saves == 3  # (close wrote the last)
    with pytest.raises(RuntimeError, match="closed"):
        dec.save_adaptive_memory()


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b"[]", b'{"state": "x"}', b'{"state": [1, 2]}'])
def test_a_file_that_is_not_a_memory_warns_and_is_replaced(tiny, tmp_path, content):
    path = tmp_path / "memory.json"
    path.write_bytes(content)
    with pytest.warns(RuntimeWarning, match="starting afresh"):
        dec = _decoder(tiny, path)
    with dec:
        assert not dec.adaptive_memory.resumed and dec.adaptive_memory.note.startswith("ignored")
        want = dec._native().adaptive_state()
        with _decoder(tiny, False) as fresh:
            assert want == fresh._native().adaptive_state()
        dec.generate(PROMPT, max_tokens=8, temperature=0)
        learned = dec._native().adaptive_state()
    assert json.loads(path.read_text())["state"] == learned


def test_a_state_of_other_models_or_settings_is_not_resumed(tiny, tmp_path):
    path = tmp_path / "memory.json"
    with _decoder(tiny, path) as dec:
        dec.generate(PROMPT, max_tokens=8, temperature=0)
    with pytest.warns(RuntimeWarning, match="another pair, machine, version or settings"):
        other = specllama.SpeculativeDecoder(tiny.target_q, tiny.far_draft, n_ctx=512, adaptive_memory=path)
    with other:
        assert not other.adaptive_memory.resumed
    with pytest.warns(RuntimeWarning, match="another pair"):
        threads = _decoder(tiny, path, n_threads=1)
    threads.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with _decoder(tiny, path, n_ctx=256, n_draft=4) as same:  # (neither changes what a decode costs)
            assert same.adaptive_memory.resumed


def test_the_default_file_is_per_identity(tiny, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECLLAMA_STATE", str(tmp_path / "state"))
    with _decoder(tiny, True) as a, _decoder(tiny, True, n_threads=1) as b:
        assert a.adaptive_memory.path.parent == tmp_path / "state" / "adaptive"
        assert a.adaptive_memory.path != b.adaptive_memory.path
        assert a.adaptive_memory.path == default_path(a.adaptive_memory.identity)
        a.generate(PROMPT, max_tokens=8, temperature=0)
    with _decoder(tiny, True) as again:
        assert again.adaptive_memory.resumed
    assert sorted(p.name for p in (tmp_path / "state" / "adaptive").iterdir()) == [a.adaptive_memory.path.name]


def test_a_memory_that_cannot_be_written_warns_once_and_loses_nothing(tiny, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = blocker / "memory.json"  # (its directory is a file)
    with _decoder(tiny, path) as dec:
        with pytest.warns(RuntimeWarning, match="cannot be written"):
            out = dec.generate(PROMPT, max_tokens=8, temperature=0)
        assert out.stats.n_generated == 8
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dec.save_adaptive_memory()
            dec.generate(PROMPT, max_tokens=8, temperature=0)
    with pytest.raises(TypeError, match="adaptive_memory"):
        _decoder(tiny, 3)


def test_slots_keep_a_memory_of_their_own(tiny, tmp_path):
    path = tmp_path / "memory.json"
    with _decoder(tiny, path) as dec:
        slots = dec.slots(2)
        assert all(s.adaptive_memory.path == tmp_path / "memory-slots2.json" for s in slots)
        assert all(s.adaptive_memory.identity["settings"]["slots"] == 2 for s in slots)
        slots[0].generate(PROMPT, max_tokens=8, temperature=0)
        learned = slots[0]._native().adaptive_state()
        for s in slots:
            s.close()
    assert not path.exists()
    with _decoder(tiny, path) as dec:
        again = dec.slots(2)
        assert all(s.adaptive_memory.resumed for s in again)
        assert again[1]._native().adaptive_state() == learned
        assert not dec.adaptive_memory.resumed
        for s in again:
            s.close()
        assert dec.sibling().adaptive_memory is None


# --- the command line ------------------------------------------------------------------------------

def test_the_command_line_resumes_by_default_and_bench_never(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_STATE", str(tmp_path / "state"))
    runner = CliRunner()
    args = ["generate", PROMPT, "-m", tiny.target_q, "-d", tiny.draft_q, "-c", "512", "-n", "8", "--temp", "0"]
    first = runner.invoke(main, args)
    assert first.exit_code == 0, first.output
    assert "resumes what earlier runs learned" not in first.stderr
    files = list((tmp_path / "state" / "adaptive").iterdir())
    assert len(files) == 1
    second = runner.invoke(main, args)
    assert second.exit_code == 0 and "resumes what earlier runs learned" in second.stderr
    assert second.stdout == first.stdout
    fixed = runner.invoke(main, [*args, "--fixed-draft"])
    assert fixed.exit_code == 0 and "resumes" not in fixed.stderr
    before = files[0].read_text()
    off = runner.invoke(main, [*args, "--no-adaptive-memory"])
    assert off.exit_code == 0 and "resumes" not in off.stderr
    off_env = runner.invoke(main, args, env={"SPECLLAMA_ADAPTIVE_MEMORY": "0"})
    assert off_env.exit_code == 0 and "resumes" not in off_env.stderr
    bench = runner.invoke(main, ["bench", "-m", tiny.target_q, "-d", tiny.draft_q, "-c", "512", "-n", "4",
                                 "--prompts", "chat", "--repeats", "1", "--out-dir", str(tmp_path / "bench")])
    assert bench.exit_code == 0, bench.output
    assert [p.read_text() for p in (tmp_path / "state" / "adaptive").iterdir()] == [before]


def test_the_server_keeps_its_slots_memory_from_one_run_to_the_next(tiny, tmp_path):
    """A real server with two slots: they start afresh though a one-slot memory of the same models
    exists (their decodes merge: another identity), write what they learned when the server stops
    (Ctrl-C), not only after the first request, and the next such server says it resumes it."""
    from openai import OpenAI
    from test_server import running

    env = {"SPECLLAMA_STATE": str(tmp_path / "state")}
    pair = ["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "512"]
    one = CliRunner().invoke(main, ["generate", PROMPT, *pair, "-n", "8", "--temp", "0"], env=env)
    assert one.exit_code == 0, one.output
    args = [*pair, "-np", "2", "--alias", "tiny"]
    with running(args, env=env) as server:
        assert "resumes" not in "".join(server.lines)
        client = OpenAI(base_url=server.url + "/v1", api_key="none")
        for _ in range(4):  # (one slot takes them all: each shares the last one's prompt)
            client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8, temperature=0)
    states = [json.loads(p.read_text()) for p in (tmp_path / "state" / "adaptive").iterdir()]
    assert sorted(s["identity"]["settings"]["slots"] for s in states) == [1, 2]
    slots = next(s for s in states if s["identity"]["settings"]["slots"] == 2)
    assert slots["generations"] == 4  # (written at the stop: the write after the first request held one)
    assert slots["state"] != _core.DraftLengthModel().state()
    with running(args, env=env) as server:
        assert "the adaptive rule resumes what earlier runs learned" in "".join(server.lines)
