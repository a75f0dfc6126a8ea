"""Grammars (llama.cpp's GBNF; JSON schemas and OpenAI's response_format through llama-cpp-python's
converter): the tokens a grammar rejects are masked out of the draft's q and the target's p alike
at every position, in the grammar's state after the tokens before it, so the output follows the
constrained target's distribution exactly: chi-square against llama.cpp's own grammar sampler
applied before the chain, with a negative control (the same samples against the unconstrained
target); greedy output with the draft equals plain decoding; the server
returns JSON that parses, and refuses what it cannot follow."""

from __future__ import annotations

import ctypes
import os
import json
import re

import llama_cpp
import numpy as np
import pytest

import specllama
from grammar_text import GrammarText
from test_sampling_end_to_end import _pvalue, first_two_tokens, pvalue_or_zero
from test_server import ROOT, _client, running
from tiny_models import vocab

CHAIN = dict(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0)
WORDS = 'root ::= (" the" | " cat" | " is" | " on" | " a" | " mat")+ "."'
N = 2000


class _LlamaGrammar:
    """llama.cpp's own grammar sampler on the tiny vocabulary, through llama-cpp-python."""

    def __init__(self, path, gbnf, triggers=()):
        self.text = GrammarText(path)  # (its model holds the vocabulary)
        self.root = self.text.sampler(gbnf, triggers)

    def masked(self, state, logits):
        n = len(logits)
        data = (llama_cpp.llama_token_data * n)()
        for i, v in enumerate(logits):
            data[i].id, data[i].logit, data[i].p = i, float(v), 0.0
        arr = llama_cpp.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(state, ctypes.byref(arr))
        return np.array([data[i].logit for i in range(n)], dtype=np.float32)

    def after(self, state, token):
        s = llama_cpp.llama_sampler_clone(state)
        llama_cpp.llama_sampler_accept(s, token)
        return s


def _marginals(path, prompt, constrained=True, chain=CHAIN, gbnf=WORDS, controls=None, triggers=()):
    """p1 and the second token's marginal sum_x p1(x) p2(. | x), under the grammar (llama.cpp's
    own sampler, before the chain; lazy with triggers) or (the negative control) without it; with
    controls (logit bias and penalties, sampling_distribution's arguments), with each position's
    history."""
    g = _LlamaGrammar(path, gbnf, triggers)
    model = specllama.Model(path)
    logits_after = lambda toks: specllama.Context(model, n_ctx=128).decode(toks, all_logits=False)[-1]  # noqa: E731

    def dist(state, toks):
        logits = logits_after(toks)
        masked = g.masked(state, logits) if constrained else logits
        extra = dict(controls, history=toks) if controls else {}
        return specllama.sampling_distribution(masked, **chain, **extra).astype(np.float64)

    p1 = dist(g.root, prompt)
    p2 = np.zeros_like(p1)
    for x in np.flatnonzero(p1):
        p2 += p1[x] * dist(g.after(g.root, int(x)) if constrained else None, prompt + [int(x)])
    return p1, p2


@pytest.mark.slow
@pytest.mark.parametrize("chain", [CHAIN, dict(CHAIN, top_k=40, top_p=0.8, min_p=0.1)], ids=["top-k", "all filters"])
def test_speculative_sampling_follows_the_constrained_target(tiny, chain):
    """With top-p and min-p, the loop checks the vocabulary only until the tokens further down
    cannot change what they keep: the samples must still follow the full check's distribution."""
    prompt = specllama.Model(tiny.target).tokenize("the cat")
    p1, p2 = _marginals(tiny.target, prompt, chain=chain)
    firsts, seconds, n_rejected = first_two_tokens(tiny.target, tiny.far_draft, prompt, chain, N, grammar=WORDS)
    assert n_rejected > N // 10, "the pair must disagree for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    assert pvalue_or_zero(seconds, _marginals(tiny.target, prompt, constrained=False, chain=chain)[1]) < 1e-6


LAZY = dict(grammar='root ::= " the" (" cat" | " is" | " on")+ "."', grammar_trigger_patterns=["^ the"])


@pytest.mark.slow
def test_speculative_sampling_follows_a_lazy_grammar(tiny):
    """A lazy grammar (tool calls' with tool_choice "auto"): the first token is free, and where it
    is the trigger (" the", made likely by a logit bias), the second follows the grammar from it on.
    The first two tokens follow the target's distribution under the lazy grammar; the negative
    controls are the target without the grammar and under the grammar from the start."""
    the = vocab().index("\u2581the")
    controls = dict(logit_bias={the: 17.0})
    prompt = specllama.Model(tiny.target).tokenize("the cat")
    p1, p2 = _marginals(tiny.target, prompt, gbnf=LAZY["grammar"], controls=controls,
                        triggers=LAZY["grammar_trigger_patterns"])
    assert 0.2 < p1[the] < 0.8, "the trigger must fire in some generations and not in others"
    firsts, seconds, n_rejected = first_two_tokens(tiny.target, tiny.far_draft, prompt, CHAIN, N, **LAZY, **controls)
    assert n_rejected > N // 10, "the pair must disagree for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    free = _marginals(tiny.target, prompt, constrained=False, controls=controls)[1]
    assert pvalue_or_zero(seconds, free) < 1e-6
    assert pvalue_or_zero(firsts, _marginals(tiny.target, prompt, gbnf=LAZY["grammar"], controls=controls)[0]) < 1e-6


FORCING = 'root ::= ("a" | "o") " the cat is" (" on" | " a" | " mat")+ "."'


@pytest.mark.slow
def test_forced_drafts_with_every_control_follow_the_controlled_target(tiny):
    """The text a grammar forces after the first token (" the cat is") is drafted with q = 1 as the
    vocabulary tokenizes it (" the", " cat"), while the target may spell it otherwise (" ", "t",
    ...): the rule must keep each forced draft with probability p and otherwise draw from p without
    it. With a logit bias that makes " the" likely, and every penalty, all applied alike: the first
    two tokens follow the controlled, constrained target. Negative controls: forced drafts kept
    unchecked (the second token always " the"), and the target without the controls."""
    the = vocab().index("\u2581the")
    controls = dict(logit_bias={the: 1.0}, repeat_penalty=1.3, repeat_last_n=8, presence_penalty=0.4,
                    frequency_penalty=0.3)
    prompt = specllama.Model(tiny.target).tokenize("the cat")
    p1, p2 = _marginals(tiny.target, prompt, gbnf=FORCING, controls=controls)
    assert 0.2 < p2[the] < 0.8, "the forced draft must be kept sometimes and rejected sometimes"
    firsts, seconds, forced, kept = [], [], 0, 0
    with specllama.SpeculativeDecoder(tiny.target, tiny.far_draft, n_ctx=128) as dec:
        for seed in range(N):
            r = dec.generate(prompt, max_tokens=3, n_draft=2, seed=seed, ignore_eos=True, adaptive=False, **CHAIN,
                             grammar=FORCING, **controls)
            firsts.append(r.tokens[0])
            seconds.append(r.tokens[1])
            forced += r.stats.n_forced_drafted
            kept += r.stats.n_forced_accepted
    firsts, seconds = np.array(firsts), np.array(seconds)
    assert 0 < kept < forced
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    unchecked = np.zeros_like(p1)
    unchecked[the] = 1.0
    assert pvalue_or_zero(seconds, unchecked) < 1e-6
    assert pvalue_or_zero(seconds, _marginals(tiny.target, prompt, gbnf=FORCING)[1]) < 1e-6


def test_forced_drafts_leave_greedy_output_unchanged(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        plain = dec.generate("the cat", max_tokens=30, temperature=0, speculative=False, grammar=FORCING)
        runs = [dec.generate("the cat", max_tokens=30, temperature=0, grammar=FORCING, n_draft=4, adaptive=False,
                             forced_drafts=forced) for forced in (True, False)]
    assert runs[0].tokens == runs[1].tokens == plain.tokens
    assert runs[0].stats.n_forced_drafted > 0 and runs[1].stats.n_forced_drafted == 0


def test_a_lazy_grammar_holds_from_its_trigger_on(tiny):
    """llama.cpp's lazy grammar: free text until a trigger (a pattern or a token), then the grammar;
    greedy with the draft equals plain decoding, and sampled output follows the grammar after it."""
    lazy = dict(grammar='root ::= " hot" (" is" | " on")+ "."', grammar_trigger_patterns=[" hot"])
    hot = vocab().index("\u2581hot")
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        plain = dec.generate("the cat", max_tokens=30, temperature=0, speculative=False, **lazy)
        spec = dec.generate("the cat", max_tokens=30, temperature=0, n_draft=4, adaptive=False, **lazy)
        assert spec.tokens == plain.tokens and spec.stats.n_drafted > 0
        triggered = 0
        for seed in range(20):
            for trigger in (lazy, dict(lazy, grammar_trigger_patterns=[], grammar_trigger_tokens=[hot])):
                r = dec.generate("the cat", max_tokens=40, seed=seed, n_draft=4, logit_bias={hot: 3.0}, **trigger)
                triggered += " hot" in r.text
                if " hot" in r.text:
                    tail = r.text[r.text.index(" hot") + 4:]
                    words = tail.rstrip(".").split()[:-1 if r.finish_reason == "length" else None]  # (a cut word)
                    assert set(words) <= {"is", "on"}, r.text
                    assert r.finish_reason == "length" or tail.endswith("."), r.text
        assert triggered >= 10
        with pytest.raises(ValueError, match="trigger"):
            dec.generate("the cat", max_tokens=2, grammar_trigger_patterns=["x"])
        with pytest.raises(ValueError, match="regular expression"):
            dec.generate("the cat", max_tokens=2, grammar=lazy["grammar"], grammar_trigger_patterns=["(x"])


def test_greedy_with_a_grammar_is_plain_greedy_decoding(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        plain = dec.generate("the cat", max_tokens=30, temperature=0, speculative=False, grammar=WORDS)
        spec = dec.generate("the cat", max_tokens=30, temperature=0, grammar=WORDS, n_draft=4, adaptive=False)
        sampled = dec.generate("the cat", max_tokens=30, seed=5, grammar=WORDS, n_draft=4, adaptive=False)
    assert spec.tokens == plain.tokens and spec.stats.n_drafted > 0
    for r in (plain, sampled):
        words = r.text.rstrip(".").split()
        assert words and set(words) <= {"the", "cat", "is", "on", "a", "mat"} or r.finish_reason == "length", r.text


def _nested(depth: int) -> str:
    return "root ::= " + "(" * depth + '"a"' + ")" * depth


def test_a_grammar_that_does_not_parse_is_refused(tiny):
    """A grammar llama.cpp cannot parse, or one that nests groups deeper than 256 (its parser descends once
    per group on the thread's stack: 30,000 ended the process), is refused; parentheses in literals, classes,
    comments and tokens are no groups."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=128) as dec:
        with pytest.raises(ValueError, match="grammar"):
            dec.generate("the cat", max_tokens=2, grammar='root ::= ("a"')
        for depth in (257, 30000):
            with pytest.raises(ValueError, match=f"the grammar nests groups {depth} deep; at most 256"):
                dec.generate("the cat", max_tokens=2, grammar=_nested(depth))
        assert dec.generate("the cat", max_tokens=2, temperature=0, grammar=_nested(256)).text == "a"
        quoted = "((((" * 100
        text = 'root ::= "\\"' + quoted + '" [\\]' + quoted + '] ( "b" ) # ' + quoted + "\n"  # (escaped ends too)
        assert dec.generate("the cat", max_tokens=2, temperature=0, grammar=text).text.startswith('"(')
        with pytest.raises(ValueError, match="does not parse"):  # (tokens: this vocabulary has no "(" to name)
            dec.generate("the cat", max_tokens=2, grammar='root ::= "a" | ' + "<(>" * 300)
        assert dec.generate("the cat", max_tokens=2, temperature=0).tokens


ENUM = {"type": "object", "properties": {"pet": {"enum": ["cat", "dog"]}, "legs": {"enum": [3, 4]}},
        "required": ["pet", "legs"]}


def test_keywords_the_converter_would_pass_over_are_refused():
    """A schema keyword the converter skips without a word would leave the output free of it: each
    is refused, named with its place; annotations and what the converter follows are fine."""
    from specllama import schemas

    for schema, where in [({"type": "number", "minimum": 0}, "'minimum' (at schema) is supported on integers only"),
                          ({"type": "integer", "multipleOf": 2}, "'multipleOf' (at schema)"),
                          ({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}},
                           "'uniqueItems' (at schema.properties.tags)"),
                          ({"anyOf": [{"type": "number"}, {"type": "string", "format": "email"}]},
                           "'email' (at schema.anyOf[1])"),
                          ({"$defs": {"p": {"not": {"type": "null"}}}, "$ref": "#/$defs/p"}, "'not' (at schema.$defs.p)"),
                          ({"type": "integer", "minimum": 0, "enum": [1, 2]}, "beside 'enum' (at schema)"),
                          ({"type": "integer", "maximum": "9"}, "'maximum' (at schema) must be a number"),
                          ({"type": "integer", "minimum": True}, "'minimum' (at schema) must be a number"),
                          ({"items": {"type": "integer", "minimum": 3, "exclusiveMaximum": 3}},
                           "no integer meets the bounds at schema.items")]:
        with pytest.raises(ValueError, match=re.escape(where)):
            schemas.to_grammar(schema)
    fine = {"title": "P", "description": "d", "type": "object", "additionalProperties": False,
            "properties": {"minimum": {"type": "string", "format": "date", "default": "x", "minLength": 1}}}
    assert "minimum" in schemas.to_grammar(fine)  # (a property named like a keyword is a property)


INT_RANGES = [(0, None), (1, None), (3, None), (10, None), (17, None), (100, None), (2001, None), (10 ** 12, None),
              (-5, None), (-123, None), (-100, None), (None, 0), (None, 9), (None, 123), (None, -1), (None, -40),
              (None, -100), (None, -2001), (None, -10 ** 12), (-12, 207), (12, 207), (5, 5), (0, 0), (-3, 3),
              (99, 1000), (-1000, -10), (-7, -7), (100, 199), (1, 1000000), (10 ** 16 - 5, None),
              (None, 3 - 10 ** 16), (5, 2 ** 63 - 1), (-2 ** 63, 2 ** 63 - 1)]


def _near(lo, hi, rng):
    """Integers about the bounds, at the lengths where the rules change, and at random."""
    edges = [b + d for b in (lo, hi) if b is not None for d in (-11, -10, -2, -1, 0, 1, 2, 9, 10)]
    powers = [s * (10 ** k + d) for k in range(0, 18) for d in (-1, 0, 1) for s in (1, -1)]
    return sorted(set(edges + powers + list(range(-130, 130)) + [int(x) for x in rng.integers(-10 ** 7, 10 ** 7, 300)]))


def test_integer_bounds_hold_the_output_to_their_range(default_pair):
    """minimum / maximum (and the exclusive two) on an integer: llama.cpp's own grammar engine admits
    exactly the integers in the range of at most 16 digits (as the plain integer rule, the control
    that shows the check can fail, admits any of them), and no leading zero; a range between two
    bounds in llama.cpp's rule text; bounds that leave no such integer are refused."""
    from specllama import schemas

    g = GrammarText(default_pair[0])
    rng = np.random.default_rng(0)
    ranges = INT_RANGES + [tuple(sorted(int(x) for x in rng.integers(-10 ** int(rng.integers(1, 8)),
                                                                     10 ** int(rng.integers(1, 8)), 2)))
                           for _ in range(30)]
    try:
        for lo, hi in ranges:
            schema = {"type": "integer", **({"minimum": lo} if lo is not None else {}),
                      **({"maximum": hi} if hi is not None else {})}
            gbnf = schemas.to_grammar(schema)
            for x in _near(lo, hi, rng):
                inside = (lo is None or x >= lo) and (hi is None or x <= hi) and abs(x) < 10 ** 16
                assert g.admits(gbnf, str(x)) == inside, (schema, x)
                if x != 0:
                    assert not g.admits(gbnf, str(x).replace("-", "-0") if x < 0 else "0" + str(x)), (schema, x)
        exclusive = schemas.to_grammar({"type": "integer", "exclusiveMinimum": -2.5, "exclusiveMaximum": 4})
        assert [x for x in range(-9, 9) if g.admits(exclusive, str(x))] == [-2, -1, 0, 1, 2, 3]
        plain = schemas.to_grammar({"type": "integer"})
        assert g.admits(plain, "-13") and g.admits(plain, "208") and g.admits(plain, "100")  # the control
        assert schemas.integer_rule(-12, 207) == ('"-" ([0-9] | "1" [0-2]) | [0-9] | ([1-8] [0-9] | [9] [0-9]) | '
                                                  '([1] [0-9]{2} | [2] "0" [0-7])')  # llama.cpp's test, verbatim
        for beyond in ({"minimum": 10 ** 16}, {"maximum": -10 ** 16}):
            with pytest.raises(ValueError, match="no integer of at most 16 digits"):
                schemas.to_grammar({"type": "integer", **beyond})
    finally:
        g.close()


def test_json_may_be_laid_out_over_lines_where_asked(default_pair):
    """By default a schema's JSON has at most one space between tokens; with lines=True (tool calls
    a model lays out itself), also a line break and an indentation, as llama.cpp's converter allows,
    before a closing brace after an enum value too."""
    from specllama import schemas

    g = GrammarText(default_pair[0])
    try:
        compact, lines = schemas.to_grammar(ENUM), schemas.to_grammar(ENUM, lines=True)
        for gbnf in (compact, lines):
            assert g.admits(gbnf, '{"pet": "cat", "legs": 4}')
            assert not g.admits(gbnf, '{"pet": "cat",' + " " * 3 + '"legs": 4}')  # (one space at most)
        laid_out = '{\n  "pet": "dog",\n  "legs": 3\n}'
        assert g.admits(lines, laid_out) and not g.admits(compact, laid_out)
        assert not g.admits(lines, laid_out.replace("dog", "cow"))
    finally:
        g.close()


def test_the_server_follows_schemas_and_refuses_what_it_cannot(tiny):
    with running(["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "512"]) as s:
        msgs = [{"role": "user", "content": "a pet"}]
        for body in [{"response_format": {"type": "json_schema", "json_schema": {"name": "pet", "schema": ENUM}}},
                     {"json_schema": ENUM}]:
            r = s.post("/v1/chat/completions", dict(body, messages=msgs, max_tokens=40, temperature=0)).json()
            out = json.loads(r["choices"][0]["message"]["content"])
            assert out["pet"] in ("cat", "dog") and out["legs"] in (3, 4)
        r = s.post("/completion", {"prompt": "a pet", "json_schema": ENUM, "n_predict": 40, "temperature": 0}).json()
        assert set(json.loads(r["content"])) == {"pet", "legs"}
        for body, param in [({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "strin"}}}},
                             "response_format"),
                            ({"grammar": 'root ::= ("a"'}, "grammar"),
                            ({"grammar": _nested(30000)}, "grammar"),
                            ({"json_schema": {"type": "object", "properties": {"age": {"type": "number",
                                                                                      "minimum": 0}}}}, "json_schema"),
                            ({"json_schema": ENUM, "grammar": 'root ::= "a"'}, "grammar"),
                            ({"response_format": {"type": "yaml"}}, "response_format")]:
            r = s.post("/v1/chat/completions", dict(body, messages=msgs, max_tokens=4))
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        assert s.health()["status"] == "ok"


@pytest.mark.real_pair
@pytest.mark.slow
def test_structured_output_with_the_openai_client(qwen_pair):
    """client.chat.completions.parse with a Pydantic model, on the Qwen2.5-Coder pair."""
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str
        population_millions: float

    target, draft = qwen_pair
    with running(["-m", target, "-d", draft, "-c", "2048", "-t", "2", "--alias", "qwen"]) as s, _client(s) as client:
        r = client.chat.completions.parse(
            model="qwen", temperature=0, max_tokens=80, response_format=City,
            messages=[{"role": "user", "content": "The capital of France, as JSON."}])
    city = r.choices[0].message.parsed
    assert isinstance(city, City) and city.name == "Paris" and city.country == "France"


def test_the_cli_takes_a_json_schema_and_a_grammar_file(tiny, tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    (tmp_path / "pet.json").write_text(json.dumps(ENUM))
    (tmp_path / "words.gbnf").write_text(WORDS)
    base = [sys.executable, "-m", "specllama", "generate", "a pet", "-m", tiny.target_q, "-d", tiny.draft_q,
            "--temp", "0", "-n", "40", "-c", "256", "--json"]
    out = subprocess.run(base + ["--json-schema", "@" + str(tmp_path / "pet.json")], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert set(json.loads(json.loads(out.stdout)["text"])) == {"pet", "legs"}
    out = subprocess.run(base + ["--grammar-file", str(tmp_path / "words.gbnf")], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0 and set(json.loads(out.stdout)["text"].rstrip(".").split()) <= {
        "the", "cat", "is", "on", "a", "mat"}, out.stdout
    out = subprocess.run(base + ["--json-schema", '{"type": "strin"}'], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert out.returncode == 2 and "json-schema" in out.stderr and "Traceback" not in out.stderr


_LOG_SCRIPT = """
import sys
import specllama
dec = specllama.SpeculativeDecoder(sys.argv[1], sys.argv[2], n_ctx=256)
if sys.argv[3] == "converter":
    from specllama import schemas
    schemas.convert({"type": "object", "properties": {"a": {"type": "integer"}}})
else:
    import llama_cpp  # noqa: F401
    if sys.argv[3] == "reclaimed":
        specllama.log_reclaim()
assert "llama_cpp" in sys.modules
for slot in dec.slots(2):  # (new contexts and a state copy: llama.cpp logs each, at debug level)
    slot.generate("the cat is on the hot word", max_tokens=4)
dec.slots(2)[1].generate("the cat is on the hot word", max_tokens=4)
print("done")
"""


@pytest.mark.parametrize("way", ["converter", "reclaimed", "llama_cpp"])
def test_the_schema_converter_leaves_llama_cpps_log_silent(tiny, way, tmp_path):
    """Converting a JSON schema imports llama-cpp-python, whose import sets its own callback for llama.cpp's log,
    one that prints every message to stderr: after the converter, specllama's silent one is back, and a decoder's
    later contexts print nothing; so after specllama.log_reclaim() where a program imports llama_cpp itself (the
    control: llama_cpp imported directly, after the models loaded, prints their debug lines)."""
    import subprocess
    import sys

    # (the specllama under test, from a directory that holds no other copy of it)
    env = dict(os.environ, SPECLLAMA_LOG="none", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _LOG_SCRIPT, tiny.target_q, tiny.draft_q, way], capture_output=True,
                       text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr[-2000:]
    printed = [line for line in r.stderr.splitlines() if re.match(r"(llama|sched|state_|~llama)\w*", line)]
    if way != "llama_cpp":
        assert printed == [], printed[:5]
    else:
        assert len(printed) > 10, r.stderr[-2000:]
