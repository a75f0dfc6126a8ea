"""specllama against plain decoding and its peers: one program, one run, one machine.

What it runs, on the same pair (default: the default pair; --pair and --target-type name another),
the same prompts, the same number of new tokens (end-of-text ignored so every run emits exactly
--n-predict tokens), greedy or at --temp T (every program with its default filters: top-k 40,
top-p 0.95, min-p 0.05), with the same thread count:

  specllama   plain decoding (the baseline: same engine, speculative=False)
  specllama   speculative: the default (the draft model with prompt lookup filling in where it
              stops short, adaptive draft length; the draft copies the prompt's keys and values
              from the target where it is the target in another number format), the same with
              the draft processing the prompt itself, the draft model alone (adaptive, and fixed
              n_draft), and prompt lookup alone
  llama-cpp-python   Llama.create_completion on the target, and with its prompt-lookup drafter
  llama.cpp   llama-speculative-simple at several --spec-draft-n-max values, and llama-server with
              the draft at several --spec-draft-n-max values, one client, its /completion endpoint
              timed by the server's own timings; both built from the llama-cpp-python 0.3.36 sdist by
              benchmarks/build_llama_cpp.sh (skipped with --no-llama-cpp)

Throughput is end-to-end: new tokens over the time from the prompt to the last token (prompt
processing included), since that is what every peer reports or can be timed on. specllama's
decode-only figure is reported beside it. A second part compares, at temperature 1 and a fixed
draft length, the acceptance of the papers' rejection rule with llama.cpp's sample-and-match.

On a CPU with AMX, every program loads its models without llama.cpp's extra CPU buffer types (the
AMX repacking, which crashes this llama.cpp: ggml-org/llama.cpp#20824), as specllama does:
--no-repack for llama.cpp's programs, use_extra_bufts off for llama-cpp-python.

    python benchmarks/compare.py --repeats 2      # greedy; about 17 minutes on 2 cores
    python benchmarks/compare.py --temp 0.8 --out bench-out/t08   # a chat temperature
    python benchmarks/compare.py --pair qwen2.5-coder --target-type f16 --prompts chat,code,code-edit \
        --no-extra --peer-n-max 3,6,10,16 --server-n-max 3,6 -n 96 --repeats 2   # about 35 minutes
    python benchmarks/compare.py --quick          # 64 tokens, one prompt of each kind

Writes compare.json and compare.png to --out (default bench-out/).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

import specllama
from specllama.bench import PROMPTS
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance
from serve_bench import free_port, wait_healthy  # (this directory is on sys.path)

HERE = Path(__file__).resolve().parent

# prompts that quote their input, where prompt lookup should shine
QUOTING = {
    "code-edit": ("Rewrite this function with the variable `total` renamed to `result`, changing nothing else:\n\n"
                  "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
                  "    if not values:\n        return 0\n    return total / len(values)\n"),
    "quote": ("Repeat the following sentence exactly, then say what it means: 'The quick brown fox jumps over "
              "the lazy dog, and the dog does not mind at all because it is asleep in the warm sun.'"),
}


def _repack_flags():
    return ["--no-repack"] if has_amx() else []


def named_prompts(ap, names: str, prompts: dict) -> dict:
    """The prompts named in names (comma-separated), in that order; an unknown name is a usage error."""
    wanted = names.split(",")
    unknown = [k for k in wanted if k not in prompts]
    if unknown:
        ap.error(f"unknown prompts {unknown}; there are: {', '.join(prompts)}")
    return {k: prompts[k] for k in wanted}


def chat_text(dec, text):
    return dec.apply_chat_template([{"role": "user", "content": text}])


def step_summary(steps) -> dict:
    """Where a generation's steps went (GenerateOptions.record_steps): how many drafted, the
    median draft length, catch-up, draft decode (after the catch-up) and verification in ms, and
    the steps one character each (step_pattern) with the drafts the target kept in each
    (kept_pattern: whether acceptance comes in runs), and the drafting steps' verification
    lengths in order, a run of equal ones once (one length per generation where verification is
    padded; a padded generation that began before the rule had its prices: the first batch's,
    then one more); and per step, in the pattern's order, the model's drafts, the tokens verified,
    and its catch-up, its further draft decodes, its verification and its read in ms (step_ms:
    what graph_sim.py --replay prices step by step)."""
    drafting = [t for t in steps if t.n_model > 0]
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    return {"n_steps": len(steps), "n_drafting": len(drafting), "n_paused": sum(t.paused for t in steps),
            "drafted": med([t.n_model for t in drafting]),
            "catch_up_ms": med([t.catch_up_ms for t in drafting]),
            "draft_decode_ms": med([(t.draft_ms - t.catch_up_ms) / (t.n_model - 1) for t in drafting if t.n_model > 1]),
            "verify_ms": med([t.verify_ms for t in drafting]),
            "plain_step_ms": med([t.verify_ms for t in steps if t.n_drafted == 0]),
            "step_ms_sum": sum(t.draft_ms + t.verify_ms for t in steps),
            "pattern": step_pattern(steps),
            "kept": kept_pattern(steps),
            "reads": [[t.read_n, round(t.read_foretold, 2), round(t.read_ms, 2)] for t in steps if t.read],
            "verified": [n for n, _ in itertools.groupby(t.n_verified for t in drafting)],
            "step_ms": [[t.n_model, t.n_verified, round(t.catch_up_ms, 3), round(t.draft_ms - t.catch_up_ms, 3),
                         round(t.verify_ms, 3), round(t.read_ms, 3)] for t in steps]}


def step_pattern(steps) -> str:
    """One character a step: the model's draft count (1-9, + for more), P a probe of the paused
    model (R one that began with a read), r a read that called its probe off, L a step that prompt
    lookup alone drafted, . a plain step (p where the model was paused)."""
    def mark(t):
        if t.n_model > 0:
            return ("R" if t.read else "P") if t.probe else str(t.n_model) if t.n_model < 10 else "+"
        if t.n_drafted > 0:
            return "L"
        return "r" if t.read else "p" if t.paused else "."
    return "".join(mark(t) for t in steps)


def kept_pattern(steps) -> str:
    """One character a step, aligned with step_pattern's: the drafts the target kept (0-9, + for
    more), . for a step without drafts."""
    def mark(t):
        if t.n_drafted == 0:
            return "."
        return str(t.n_accepted) if t.n_accepted < 10 else "+"
    return "".join(mark(t) for t in steps)


def run_specllama(dec, prompt_text, n, temp, **kw):
    dec.reset()
    out = dec.generate(prompt_text, max_tokens=n, temperature=temp, ignore_eos=True, **kw)
    s = out.stats
    steps = {"steps": step_summary(s.steps), "decode_ms": s.t_total_ms - s.t_prefill_ms} if s.steps else {}
    return {**steps, "draft_calls_per_token": s.n_draft_calls / max(1, s.n_generated),
            "tokens_per_second": s.n_generated * 1000.0 / s.t_total_ms,
            "decode_tokens_per_second": s.tokens_per_second,
            "prefill_ms": s.t_prefill_ms,
            "lookup_drafted": s.n_lookup_drafted,
            "lookup_accepted": s.n_lookup_accepted,
            "acceptance_rate": s.acceptance_rate if s.n_drafted else None,
            "tokens_per_pass": s.mean_accepted_length,
            "loop_overhead_share": s.t_other_ms / (s.t_total_ms - s.t_prefill_ms),
            "host_ms_per_token": s.t_host_ms / max(1, s.n_generated),
            "logits_bytes_per_token": s.logits_bytes_per_token, "sampling": s.sampling,
            "tokens": out.tokens}


def run_llama_cpp_python(llm, prompt_text, n, temp):
    toks = llm.tokenize(prompt_text.encode(), add_bos=False, special=True)
    llm.reset()
    eos = llm.token_eos()
    t = time.perf_counter()
    sampling = dict(temperature=0.0, top_k=1) if temp == 0 else dict(temperature=temp, top_k=40, top_p=0.95,
                                                                       min_p=0.05)
    out = llm.create_completion(toks, max_tokens=n, logit_bias={eos: -1e9}, **sampling)
    dt = time.perf_counter() - t
    n_out = out["usage"]["completion_tokens"]
    return {"tokens_per_second": n_out / dt, "n_generated": n_out}


def run_speculative_simple(binary, target, draft, prompt_text, n, n_max, threads, temp, ngl=0):
    sampling = ["--temp", "0", "--top-k", "1"] if temp == 0 else ["--temp", str(temp)]
    cmd = [str(binary), "-m", target, "-md", draft, "-p", prompt_text, "-n", str(n), "--spec-type", "draft-simple",
           "--spec-draft-n-max", str(n_max), "-t", str(threads), "-td", str(threads), *sampling,
           "--ignore-eos", "-c", "2048", "-ngl", str(ngl), "-ngld", str(ngl), *_repack_flags()]
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")  # sampled text may cut a character
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"llama-speculative-simple failed ({proc.returncode}): {log[-800:]}")
    enc = re.search(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)
    dec = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)
    acc = re.search(r"accept\s+=\s+([\d.]+)%", log)
    n_dec, t_dec = int(dec.group(1)), float(dec.group(2))
    t_enc = float(enc.group(2))
    return {"tokens_per_second": n_dec / (t_enc + t_dec), "decode_tokens_per_second": n_dec / t_dec,
            "acceptance_rate": float(acc.group(1)) / 100 if acc else None, "n_generated": n_dec}


@functools.lru_cache(maxsize=None)
def has_amx() -> bool:
    """Whether this CPU has AMX: llama.cpp's AMX repacking crashes this llama.cpp there."""
    try:
        return "amx_int8" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def llama_cpp_python_model(target, threads, **kw):
    """llama-cpp-python's Llama on the target; on an AMX CPU without extra buffer types, as specllama loads."""
    from llama_cpp import Llama
    import llama_cpp.llama as llama_module

    default_params = llama_module.llama_cpp.llama_model_default_params

    def params_without_extra_bufts():
        params = default_params()
        params.use_extra_bufts = False
        return params

    if has_amx():
        llama_module.llama_cpp.llama_model_default_params = params_without_extra_bufts
    try:
        return Llama(model_path=target, n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False, **kw)
    finally:
        llama_module.llama_cpp.llama_model_default_params = default_params


def start_llama_server(bindir, target, draft, n_max, threads, ngl=0):
    """llama-server with the draft at --spec-draft-n-max n_max, one slot, ngl layers of each model
    offloaded; (process, url)."""
    port = free_port()
    cmd = [str(Path(bindir) / "llama-server"), "-m", target, "-md", draft, "--spec-type", "draft-simple",
           "--spec-draft-n-max", str(n_max), "-np", "1", "-c", "2048", "-t", str(threads), "-td", str(threads),
           "-ngl", str(ngl), "-ngld", str(ngl), "--port", str(port), "--host", "127.0.0.1", *_repack_flags()]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
    except RuntimeError:
        proc.kill()
        raise
    return proc, url


def run_llama_server(url, prompt_text, n, temp, seed=0):
    """One /completion request (prompt not cached), timed by the server's own timings."""
    sampling = {"temperature": 0.0, "top_k": 1} if temp == 0 else {"temperature": temp}
    body = {"prompt": prompt_text, "n_predict": n, "ignore_eos": True, "cache_prompt": False, "seed": seed,
            "stream": False, **sampling}
    r = httpx.post(url + "/completion", json=body, timeout=900)
    r.raise_for_status()
    t = r.json()["timings"]
    drafted = t.get("draft_n") or 0
    return {"tokens_per_second": t["predicted_n"] * 1000.0 / (t["prompt_ms"] + t["predicted_ms"]),
            "decode_tokens_per_second": t["predicted_per_second"],
            "acceptance_rate": t.get("draft_n_accepted", 0) / drafted if drafted else None,
            "n_generated": t["predicted_n"]}


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def median_runs(results):
    keys = results[0].keys()
    out = {}
    for k in keys:
        vals = [r[k] for r in results if isinstance(r.get(k), (int, float)) and r.get(k) is not None]
        out[k] = statistics.median(vals) if vals else results[0][k]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_pair_options(ap)
    ap.add_argument("--prompts", help="comma-separated prompt names (default: all: "
                    + ", ".join([*PROMPTS, *QUOTING]) + ")")
    ap.add_argument("-n", "--n-predict", type=int, default=256)
    ap.add_argument("--temp", type=float, default=0.0, help="temperature (0: greedy)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--n-draft", type=int, default=10, help="specllama's n_draft (adaptive: at most)")
    ap.add_argument("--fixed", default="8", help="specllama fixed n_draft values to run, comma-separated")
    ap.add_argument("--peer-n-max", default="3,6,8", help="llama-speculative-simple --spec-draft-n-max values")
    ap.add_argument("--server-n-max", default="3,6,8", help="llama-server --spec-draft-n-max values ('' for none)")
    ap.add_argument("--repeats", type=int, default=1, help="runs per configuration and prompt (median kept)")
    ap.add_argument("--no-llama-cpp", action="store_true", help="skip llama-speculative-simple and llama-server")
    ap.add_argument("--quick", action="store_true", help="64 tokens, fewer prompts: a smoke test")
    ap.add_argument("--no-extra", action="store_true",
                    help="specllama's plain and default modes only (no draft-model-only, fixed, lookup-only or "
                         "unshared-prefill runs), and no temperature-1 comparison of acceptance rules")
    ap.add_argument("--out", default="bench-out", help="directory for compare.json and compare.png")
    args = ap.parse_args()

    target, draft = pair_from_options(args)
    n = 64 if args.quick else args.n_predict
    prompts = dict(PROMPTS)
    prompts.update(QUOTING)
    if args.quick:
        prompts = {k: prompts[k] for k in ("chat", "code-edit")}
    if args.prompts:
        prompts = named_prompts(ap, args.prompts, prompts)
    fixed = [int(x) for x in args.fixed.split(",") if x]
    peer_n = [int(x) for x in args.peer_n_max.split(",") if x]
    server_n = [int(x) for x in args.server_n_max.split(",") if x]

    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    dec = specllama.SpeculativeDecoder(target, draft, n_ctx=2048, n_threads=args.threads, n_draft=args.n_draft)
    # the same, except that the draft processes the prompt itself rather than copy the target's keys
    # and values (only where the default copies them)
    dec_unshared = (specllama.SpeculativeDecoder(target, draft, n_ctx=2048, n_threads=args.threads,
                                                 n_draft=args.n_draft, share_prefill=False)
                    if dec.shares_prefill else None)
    texts = {name: chat_text(dec, p) for name, p in prompts.items()}
    binary = bindir = None
    if not args.no_llama_cpp:
        print("building llama-speculative-simple and llama-server (once; several minutes)...", file=sys.stderr,
              flush=True)
        bindir = subprocess.run(["bash", str(HERE / "build_llama_cpp.sh")], capture_output=True, text=True,
                                check=True).stdout.strip().splitlines()[-1]
        binary = Path(bindir) / "llama-speculative-simple"

    extra = [] if args.no_extra else [
        *([("specllama default, draft prefills itself", "specllama-unshared", dict())] if dec_unshared else []),
        (f"specllama draft model only <= {args.n_draft}", "specllama", dict(drafter="model")),
        *[(f"specllama fixed {k}", "specllama", dict(n_draft=k, adaptive=False, drafter="model")) for k in fixed],
        ("specllama lookup only", "specllama", dict(drafter="lookup"))]
    configs = [("specllama plain", "specllama", dict(speculative=False)),
               (f"specllama default (model+lookup <= {args.n_draft})", "specllama", dict()),
               *extra,
               ("llama-cpp-python", "llcp", None),
               ("llama-cpp-python prompt lookup", "llcp-lookup", None),
               *([(f"llama-speculative-simple n_max {k}", "llama.cpp", k) for k in peer_n] if binary else []),
               *([(f"llama-server n_max {k}", "llama-server", k) for k in server_n] if bindir else [])]

    llcp = llama_cpp_python_model(target, args.threads)
    llcp_lookup = llama_cpp_python_model(target, args.threads,
                                         draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))
    servers = {k: start_llama_server(bindir, target, draft, k, args.threads) for k in server_n} if bindir else {}
    # warm-up: page in both models and teach the adaptive model this machine's costs
    warm = texts[next(iter(texts))]
    temp = args.temp
    run_specllama(dec, warm, 32, temp)
    run_specllama(dec, warm, 32, temp, speculative=False)
    if dec_unshared:
        run_specllama(dec_unshared, warm, 32, temp)
    run_llama_cpp_python(llcp, warm, 16, temp)
    for _, url in servers.values():
        run_llama_server(url, warm, 16, temp)

    results = {label: {} for label, _, _ in configs}
    all_runs = {(label, name): [] for label, _, _ in configs for name in texts}
    started = time.time()
    source = provenance({"target": target, "draft": draft}, args.threads)  # the code as it starts
    def run_one(kind, kw, text, rep):
        if kind == "specllama":
            return run_specllama(dec, text, n, temp, **kw)
        if kind == "specllama-unshared":
            return run_specllama(dec_unshared, text, n, temp, **kw)
        if kind == "llcp":
            return run_llama_cpp_python(llcp, text, n, temp)
        if kind == "llcp-lookup":
            return run_llama_cpp_python(llcp_lookup, text, n, temp)
        if kind == "llama-server":
            return run_llama_server(servers[kw][1], text, n, temp, seed=rep)
        return run_speculative_simple(binary, target, draft, text, n, kw, args.threads, temp)

    try:
        for rep in range(args.repeats):  # interleaved, so that a slow spell of the machine hits every configuration
            for name, text in texts.items():
                for label, kind, kw in configs:
                    r = run_one(kind, kw, text, rep)
                    all_runs[(label, name)].append(r)
                    print(f"run {rep + 1}/{args.repeats} {name:<10} {label:<40} {r['tokens_per_second']:7.1f} "
                          "tokens/s", file=sys.stderr, flush=True)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
    for name in texts:
        for label, _, _ in configs:
            runs = all_runs[(label, name)]
            tokens = runs[0].pop("tokens", None)
            for r in runs[1:]:
                r.pop("tokens", None)
            results[label][name] = median_runs(runs)
            if tokens is not None:
                results[label][name]["tokens"] = tokens

    plain_tokens = {p: results["specllama plain"][p]["tokens"] for p in texts}
    summary = []
    base = results["specllama plain"]
    for label, kind, _ in configs:
        rows = results[label]
        tps = statistics.fmean(rows[p]["tokens_per_second"] for p in texts)
        speedups = {p: rows[p]["tokens_per_second"] / base[p]["tokens_per_second"] for p in texts}
        accs = [rows[p].get("acceptance_rate") for p in texts if rows[p].get("acceptance_rate") is not None]
        entry = {"config": label, "tokens_per_second": tps,
                 "speedup_over_plain": statistics.fmean(speedups.values()),
                 "speedup_by_prompt": speedups,
                 "acceptance_rate": statistics.fmean(accs) if accs else None}
        if kind.startswith("specllama") and temp == 0:  # sampled outputs agree in distribution only
            entry["identical_to_plain"] = sum(rows[p]["tokens"] == plain_tokens[p] for p in texts)
            # greedy outputs may differ only at a near-tie of the target's top two logits (README, Tests)
            entry["differs_from_plain"] = {p: first_difference(rows[p]["tokens"], plain_tokens[p])
                                           for p in texts if rows[p]["tokens"] != plain_tokens[p]}
        if kind.startswith("specllama"):
            entry["loop_overhead_share"] = statistics.fmean(rows[p]["loop_overhead_share"] for p in texts)
            entry["decode_tokens_per_second"] = statistics.fmean(rows[p]["decode_tokens_per_second"] for p in texts)
        summary.append(entry)
    for rows in results.values():
        for r in rows.values():
            r.pop("tokens", None)

    # temperature 1: rejection rule vs sample-and-match, same draft length and seeds
    t1 = {}
    for rule in () if args.no_extra else ("rejection", "match"):
        drafted = accepted = 0
        tps = []
        for i, text in enumerate(texts.values()):
            dec.reset()
            s = dec.generate(text, max_tokens=n, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=100 + i,
                             n_draft=6, adaptive=False, acceptance=rule, ignore_eos=True).stats
            drafted += s.n_drafted
            accepted += s.n_accepted
            tps.append(s.tokens_per_second)
        t1[rule] = {"acceptance_rate": accepted / drafted, "decode_tokens_per_second": statistics.fmean(tps)}

    spec = next(e for e in summary if e["config"].startswith("specllama default"))
    peers = {e["config"]: e for e in summary if not e["config"].startswith("specllama")}
    best_simple = max((e for e in summary if e["config"].startswith("llama-speculative-simple")),
                      key=lambda e: e["tokens_per_second"], default=None)
    best_server = max((e for e in summary if e["config"].startswith("llama-server")),
                      key=lambda e: e["tokens_per_second"], default=None)
    # each prompt against the fastest of llama.cpp's speculative programs on that prompt
    llama_cpp_labels = [e["config"] for e in summary if e["config"].startswith(("llama-speculative", "llama-server"))]
    over_best_llama_cpp = {p: results[spec["config"]][p]["tokens_per_second"]
                           / max(results[k][p]["tokens_per_second"] for k in llama_cpp_labels)
                           for p in texts} if llama_cpp_labels else None
    report = {
        "provenance": source,
        "temperature": temp, "n_predict": n, "prompts": list(texts), "repeats": args.repeats,
        "summary": summary,
        "speculative_over_plain": spec["speedup_over_plain"],
        "speculative_over_plain_decode_only": statistics.fmean(
            results[spec["config"]][p]["decode_tokens_per_second"] / base[p]["decode_tokens_per_second"] for p in texts),
        "speculative_over_best_speculative_simple": (spec["tokens_per_second"] / best_simple["tokens_per_second"]
                                                     if best_simple else None),
        "speculative_over_best_llama_server": (spec["tokens_per_second"] / best_server["tokens_per_second"]
                                               if best_server else None),
        "speculative_over_best_llama_cpp_by_prompt": over_best_llama_cpp,
        "speculative_over_plain_by_prompt": spec["speedup_by_prompt"],
        "ratio_to_peers": {k: spec["tokens_per_second"] / e["tokens_per_second"] for k, e in peers.items()},
        "temperature_1": t1,
        "results": results,
        "seconds": time.time() - started,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(report, indent=2))
    _plot(report, out / "compare.png")
    _print(report)
    print(f"wrote {out / 'compare.json'} and {out / 'compare.png'}", file=sys.stderr)


def _heading(r) -> str:
    pv = r["provenance"]
    models = pv["models"]
    sampling = "greedy" if r["temperature"] == 0 else f"T={r['temperature']}"
    return (f"{models['target']['file']} + {models['draft']['file']}, {r['n_predict']} tokens, {sampling}, "
            f"{pv['threads']} threads on {pv['machine']['cpu']}; specllama {pv['specllama']} ({pv['commit']})")


def _print(r):
    print(f"{_heading(r)}; prompts {', '.join(r['prompts'])}")
    print(f"{'configuration':<42}{'tokens/s':>9}{'vs plain':>10}{'acceptance':>12}{'same output':>13}")
    for e in r["summary"]:
        acc = f"{e['acceptance_rate']:.1%}" if e["acceptance_rate"] is not None else "-"
        same = f"{e['identical_to_plain']}/{len(r['prompts'])}" if "identical_to_plain" in e else "-"
        print(f"{e['config']:<42}{e['tokens_per_second']:>9.1f}{e['speedup_over_plain']:>9.2f}x{acc:>12}{same:>13}"
              + "".join(f"  ({p} differs at token {i})" for p, i in e.get("differs_from_plain", {}).items()))
    print()
    print(f"specllama speculative over plain: {r['speculative_over_plain']:.2f}x "
          f"(decode time only: {r['speculative_over_plain_decode_only']:.2f}x)")
    for k, v in r["ratio_to_peers"].items():
        print(f"specllama speculative over {k}: {v:.2f}x")
    by_prompt = r["speculative_over_plain_by_prompt"]
    print("by prompt, over plain: " + ", ".join(f"{p} {v:.2f}x" for p, v in by_prompt.items()))
    if r.get("speculative_over_best_llama_cpp_by_prompt"):
        print("by prompt, over the fastest llama.cpp program on it: "
              + ", ".join(f"{p} {v:.2f}x" for p, v in r["speculative_over_best_llama_cpp_by_prompt"].items()))
    t1 = r["temperature_1"]
    if t1:
        print(f"temperature 1, n_draft 6: acceptance {t1['rejection']['acceptance_rate']:.1%} with the rejection rule, "
              f"{t1['match']['acceptance_rate']:.1%} with sample-and-match")


def _plot(r, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = r["summary"]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(entries) + 1.5))
    labels = [e["config"] for e in entries]
    vals = [e["tokens_per_second"] for e in entries]
    colors = ["tab:blue" if lbl.startswith("specllama") else "tab:gray" for lbl in labels]
    ax.barh(labels, vals, color=colors)
    for i, e in enumerate(entries):
        ax.text(vals[i], i, f" {vals[i]:.1f} ({e['speedup_over_plain']:.2f}x)", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tokens / s, end to end (mean over prompts)")
    ax.set_xlim(0, max(vals) * 1.25)
    ax.set_title(_heading(r), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
