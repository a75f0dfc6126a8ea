"""Seeded differential fuzzing of exactness: random decoder settings, drafting options and sampling
controls, each generation compared with plain decoding of the same request.

Each case makes a decoder on tiny models (or two slots of one) with random settings (context and
batch sizes, draft length, catch-up and verification shapes, settling steps, probe reads, the
shared prefill), then runs one to three generations with random requests: greedy, or sampled with a
seed (keyed draws: plain decoding's sample whatever is drafted), with top-k, top-p, min-p,
penalties, logit bias, a grammar, stop strings, log-probabilities; drafted by the draft model,
prompt lookup or both, adaptive or fixed, drafting while verifying, sampling on the device, DSI,
and a prediction of the output (the reference's tokens with random edits, or unrelated tokens).
The reference is the same request with speculative=False. Prices for the adaptive rule are given
(StepPrices), so a case replays exactly. Every generation must give the reference's tokens, text,
finish reason and log-probabilities.

llama.cpp's CPU kernels do not always give a position's logits bitwise alike in a one-token decode
and in a batch (on a 2-core AMD EPYC with AVX2, the Q4_1 tiny target's differ by up to 0.06 at
some positions), so a greedy reply can part from plain decoding's at a near-tie without any fault
of the loop. The models run with an F32 cache and without flash attention, which makes such
positions rare; where a difference appears, the target's logits up to it are computed both ways,
and a difference at a position where they differ is counted as unjudged, not as a failure.

    python scripts/fuzz_exactness.py                    # 200 cases, seed 1: what the suite runs
    python scripts/fuzz_exactness.py --cases 5000 -s 7  # longer, by hand
    python scripts/fuzz_exactness.py --replay 7:123    # one case, with what each generation asked

Exit status 0: every judged generation equal to its reference, no error beyond a clear refusal
(ValueError or TypeError) of a combination the decoder does not run; prints the counts.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import specllama  # noqa: E402
from tiny_models import perturbed, random_weights, vocab, write_model  # noqa: E402

WORDS = ("the a of and to in is it that was for on are with as he she they be at one have this from by hot "
         "word").split()
GRAMMARS = ['root ::= ("the" | " a" | " hot" | " word")+', "root ::= [a-z ]*", 'root ::= "the hot word" [a-z ]* "."']
EXACT_CACHE = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")


def build_models(d: Path) -> dict:
    """The tiny target (Q4_1), a draft that agrees often (its weights plus noise), an unrelated
    one, and a draft of a larger vocabulary (drafts only the tokens both share)."""
    toks = vocab()
    w = random_weights(len(toks), seed=1)
    write_model(d / "target.gguf", toks, w)
    write_model(d / "draft.gguf", toks, perturbed(w, seed=2, noise=0.15))
    write_model(d / "far.gguf", toks, random_weights(len(toks), seed=3))
    big = vocab(extra_words=10)
    write_model(d / "bigger_vocab.gguf", big, random_weights(len(big), seed=4))
    paths = {}
    for name in ("target", "draft", "far"):
        paths[name] = str(d / f"{name}_q4_1.gguf")
        specllama.quantize(str(d / f"{name}.gguf"), paths[name], "q4_1")
    paths["bigger_vocab"] = str(d / "bigger_vocab.gguf")
    return paths


def decoder_settings(rng: random.Random) -> dict:
    s = dict(EXACT_CACHE, n_ctx=rng.choice([256, 512]), n_batch=rng.choice([8, 16, 33, 512]))
    s["n_draft"] = rng.choice([2, 4, 7]) if s["n_batch"] <= 16 else rng.choice([4, 10])
    for name, values in (("draft_catch_up", ["batch", "tokens"]), ("verify_shape", ["exact", "padded"]),
                         ("settle_steps", [0, 1, 2]), ("probe_reads", [False]), ("share_prefill", [False])):
        if rng.random() < 0.4:
            s[name] = rng.choice(values)
    return s


def prompt_text(rng: random.Random) -> str:
    n = rng.randint(1, 40)
    if rng.random() < 0.3:  # a text that repeats itself: prompt lookup drafts from it
        base = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
        return " ".join((base * 20)[:n])
    return " ".join(rng.choice(WORDS) for _ in range(n))


def request(rng: random.Random, n_ctx: int) -> dict:
    """What a generation asks, the same for the reference: sampling and its controls."""
    r = dict(max_tokens=min(rng.randint(1, 120), n_ctx - 100), ignore_eos=rng.random() < 0.7, temperature=0.0)
    if rng.random() < 0.5:
        r.update(temperature=rng.choice([0.5, 0.8, 1.0, 1.5]), seed=rng.randrange(2**32))
        for name, values in (("top_k", [0, 1, 2, 5, 40, 400]), ("top_p", [0.5, 0.9, 1.0]), ("min_p", [0.0, 0.05, 0.2])):
            if rng.random() < 0.5:
                r[name] = rng.choice(values)
    if rng.random() < 0.2:
        r["stop"] = [rng.choice(WORDS)] if rng.random() < 0.7 else [" the hot", "a"]
    if rng.random() < 0.15:
        r.update(repeat_penalty=rng.choice([1.1, 1.5]), repeat_last_n=rng.choice([8, 64]))
    if rng.random() < 0.1:
        r["frequency_penalty"] = 0.5
    if rng.random() < 0.1:
        r["presence_penalty"] = 0.7
    if rng.random() < 0.15:
        r["logit_bias"] = {rng.randrange(325): rng.choice([-100.0, -2.0, 3.0]) for _ in range(3)}
    if rng.random() < 0.1:
        r["grammar"] = rng.choice(GRAMMARS)
    if rng.random() < 0.15:
        r["logprobs"] = rng.choice([0, 3])
    return r


def drafting(rng: random.Random, req: dict, slot: bool, n_batch: int) -> dict:
    """How the speculative generation drafts (what the reference leaves out)."""
    prices = specllama.StepPrices(draft_ms=rng.choice([0.5, 2.0, 8.0]), verify_ms=rng.choice([5.0, 10.0]),
                                  verify_token_ms=rng.choice([0.2, 1.0]))
    d = dict(drafter=rng.choice(["auto", "model", "lookup", "model+lookup"]), prices=prices)
    for name, values in (("n_draft", [1, 2, 3, 5, 8, 16]), ("adaptive", [True, False]),
                         ("device_sampling", [True, False]), ("forced_drafts", [False])):
        if rng.random() < 0.5:
            d[name] = rng.choice(values)
    if "n_draft" in d:  # (a verification is one batch)
        d["n_draft"] = min(d["n_draft"], n_batch - 1)
    if (rng.random() < 0.25 and d.get("adaptive") is False and d["drafter"] == "model" and not slot
            and "grammar" not in req):
        d["draft_ahead"] = rng.choice([1, 3])
    if rng.random() < 0.1 and req["temperature"] == 0 and not slot and "grammar" not in req:
        d = dict(mode="dsi", sp=rng.choice([1, 2, 3]), lookahead=rng.choice([1, 3, 5]))
    return d


def prediction(rng: random.Random, tokens: list) -> list:
    """A prediction of the output: the reference's own tokens with random edits (cut, inserted and
    replaced runs), or unrelated tokens."""
    if rng.random() < 0.15:
        return [rng.randrange(325) for _ in range(rng.randint(1, 40))]
    out = list(tokens)
    for _ in range(rng.randint(0, 3)):
        at, n = rng.randint(0, len(out)), rng.randint(1, 8)
        edit = rng.choice(["cut", "insert", "replace"])
        new = [rng.randrange(325) for _ in range(n)] if edit != "cut" else []
        out[at:at + (0 if edit == "insert" else n)] = new
    return out


def first_difference(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def numerics_at(model, settings: dict, tokens, upto: int) -> bool:
    """Whether the target's logits for tokens[:upto + 1] differ between one batch and one-token
    decodes: llama.cpp's kernels, which can part a reply from plain decoding's at a near-tie."""
    ctx_kw = dict(n_ctx=settings["n_ctx"], n_batch=settings["n_batch"], **EXACT_CACHE)
    seq = list(tokens[:upto + 1])
    batched = specllama.Context(model, **ctx_kw).decode(seq, all_logits=True)
    one = specllama.Context(model, **ctx_kw)
    singles = np.stack([one.decode([t], all_logits=True)[0] for t in seq])
    return not np.array_equal(batched, singles)


def compare(out, ref) -> int:
    """The first generated position where out parts from ref (-1: none), tokens, text, finish
    reason and log-probabilities alike."""
    n = first_difference(out.tokens, ref.tokens)
    if n < max(len(out.tokens), len(ref.tokens)):
        return n
    if (ref.logprobs is None) != (out.logprobs is None):
        return 0
    for i, (a, b) in enumerate(zip(out.logprobs or [], ref.logprobs or [])):
        if a.token != b.token or abs(a.logprob - b.logprob) > 1e-4:
            return i
    if out.text != ref.text or out.finish_reason != ref.finish_reason:
        return len(out.tokens)
    return -1


def run_case(models: dict, seed: int, case: int, verbose: bool, counts: dict) -> list:
    """One case; returns its failures (strings)."""
    rng = random.Random(seed * 1_000_003 + case)
    target = models["target"]
    draft = models[rng.choice(["draft", "draft", "far", "target", "bigger_vocab"])]
    settings = decoder_settings(rng)
    slot = rng.random() < 0.2
    failures = []
    with specllama.SpeculativeDecoder(target, draft, **settings) as dec:
        # the reference: plain decoding in the same slot, or in a sibling (the loaded models, caches of its own)
        runner = dec.slots(2)[rng.randrange(2)] if slot else dec
        reference = runner if slot else dec.sibling()
        for g in range(rng.randint(1, 3)):
            prompt, req = prompt_text(rng), request(rng, settings["n_ctx"])
            spec = drafting(rng, req, slot, settings["n_batch"])
            what = f"case {seed}:{case} generation {g}: draft {Path(draft).name}, decoder {settings}, " \
                   f"{'a slot, ' if slot else ''}request {req}, drafting {spec}, prompt {prompt!r}"
            if verbose:
                print(what)
            ref = reference.generate(prompt, speculative=False, **req)
            if rng.random() < 0.3 and spec.get("mode") != "dsi" and "draft_ahead" not in spec:
                spec["prediction"] = prediction(rng, list(ref.tokens))
            try:
                out = runner.generate(prompt, **req, **spec)
            except (ValueError, TypeError) as exc:
                counts["refused"] += 1
                reason = str(exc).split(";")[0][:100]
                counts["reasons"][reason] = counts["reasons"].get(reason, 0) + 1
                if verbose:
                    print(f"  refused: {exc}")
                continue
            except Exception:  # noqa: BLE001 (any other error is a finding)
                failures.append(f"{what}\n  raised:\n{traceback.format_exc()}")
                continue
            counts["generations"] += 1
            n = compare(out, ref)
            if n < 0:
                continue
            tokens = dec.target_model.tokenize(prompt, True, True) + list(ref.tokens)
            n_prompt = len(tokens) - len(ref.tokens)
            if numerics_at(dec.target_model, settings, tokens, n_prompt - 1 + n):
                counts["unjudged"] += 1
                if verbose:
                    print(f"  parts from plain decoding at token {n}, where the target's batched and one-token "
                          f"logits differ: unjudged")
                continue
            failures.append(f"{what}\n  parts from plain decoding at generated token {n}: "
                            f"{list(out.tokens[n:n + 5])} against {list(ref.tokens[n:n + 5])} "
                            f"({out.finish_reason!r}/{ref.finish_reason!r}, "
                            f"{len(out.tokens)}/{len(ref.tokens)} tokens)")
        if reference is not runner:
            reference.close()
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("-s", "--seed", type=int, default=1)
    ap.add_argument("--replay", metavar="SEED:CASE", help="run one case, saying what each generation asks")
    args = ap.parse_args()
    counts = {"generations": 0, "refused": 0, "unjudged": 0, "reasons": {}}
    failures = []
    with tempfile.TemporaryDirectory() as d:
        models = build_models(Path(d))
        if args.replay:
            seed, case = (int(x) for x in args.replay.split(":"))
            failures += run_case(models, seed, case, True, counts)
        else:
            for case in range(args.cases):
                print(f"fuzz: case {args.seed}:{case}", flush=True)  # (the last one printed, where a case crashes)
                failures += run_case(models, args.seed, case, False, counts)
    for f in failures:
        print("FAIL", f)
    print(f"{counts['generations']} generations compared with plain decoding, {len(failures)} failed, "
          f"{counts['unjudged']} unjudged (llama.cpp's batched logits differ there), {counts['refused']} refused")
    for reason, n in sorted(counts["reasons"].items(), key=lambda kv: -kv[1]):
        print(f"  refused {n}x: {reason}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
