"""Code completion as an editor asks for it: a replay of an editing session against `specllama
serve` and llama-server with the same target and draft (and llama-server without the draft).

The session rewrites lines of a source file one after another, as someone editing it would: for
each line, a request with the cursor after the line's indentation and one halfway through it, each
shaped as llama.vim sends it (autoload/llama.vim, s:fim_try_complete): up to 256 lines of prefix,
the typed part of the line as "prompt", the rest of the line and 64 lines of suffix, and three
32-line chunks of another file as extra context. Consecutive requests share their extra context
and most of their prefix; the suffix moves. Greedy, with a fixed number of tokens per request and
no time limit, so that every server does the same work. Every server runs with --cache-reuse 256
(as llama.cpp's FIM presets start llama-server; --cache-reuse 0 for the common prefix alone).

Each server is started fresh, warmed with one request, and then sent the session's requests one
after another; rounds alternate the servers' order. Reported per server: latency (request sent to
last event) p50 and p90, time to the first token p50, the generation's tokens per second, and the
prompt tokens taken from the slot's cache against those processed.

    python benchmarks/editor_replay.py --pair qwen2.5-coder --target-type f16
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from serve_bench import fresh_servers, llama_cpp_bin  # noqa: E402

from specllama.provenance import portable_settings, provenance  # noqa: E402

EDITED = HERE.parent / "specllama" / "completions.py"  # the file being edited
OTHER = HERE.parent / "specllama" / "server" / "native_completion.py"  # where the extra chunks come from


def session(first_line: int, n_lines: int):
    """The requests of the session: (input_prefix, prompt, input_suffix) per keystroke batch."""
    lines = EDITED.read_text().split("\n")
    out = []
    for y in range(first_line, first_line + n_lines):
        line = lines[y]
        indent = len(line) - len(line.lstrip())
        for x in sorted({indent, indent + (len(line) - indent) // 2}):
            prefix = "\n".join(lines[max(0, y - 256):y]) + "\n"
            suffix = line[x:] + "\n" + "\n".join(lines[y + 1:y + 65]) + "\n"
            out.append((prefix, line[:x], suffix))
    return out


def extra_chunks():
    lines = OTHER.read_text().split("\n")
    return [{"text": "\n".join(lines[a:a + 32]) + "\n", "time": 0, "filename": OTHER.name} for a in (0, 60, 120)]


def one(http: httpx.Client, prefix: str, prompt: str, suffix: str, extra, n: int) -> dict:
    body = {"id_slot": 0, "input_prefix": prefix, "input_suffix": suffix, "input_extra": extra, "prompt": prompt,
            "n_predict": n, "temperature": 0.0, "samplers": ["temperature"], "stream": True, "cache_prompt": True,
            "t_max_prompt_ms": 500, "model": ""}
    t0 = time.perf_counter()
    first = None
    final = None
    text = ""
    with http.stream("POST", "/infill", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            ev = json.loads(line[len("data: "):])
            if ev.get("content") and first is None:
                first = time.perf_counter() - t0
            text += ev.get("content", "")
            if ev.get("stop"):
                final = ev
    latency = time.perf_counter() - t0
    t = final["timings"]
    return {"latency_s": latency, "ttft_s": first if first is not None else latency, "text": text,
            "predicted_n": t["predicted_n"], "predicted_per_second": t["predicted_per_second"],
            "prompt_n": t["prompt_n"], "cache_n": t["cache_n"], "draft_n": t.get("draft_n", 0),
            "draft_n_accepted": t.get("draft_n_accepted", 0)}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def summary(runs):
    return {"latency_p50_ms": 1000 * pct([r["latency_s"] for r in runs], 0.5),
            "latency_p90_ms": 1000 * pct([r["latency_s"] for r in runs], 0.9),
            "ttft_p50_ms": 1000 * pct([r["ttft_s"] for r in runs], 0.5),
            "tokens_per_second_median": statistics.median(r["predicted_per_second"] for r in runs),
            "prompt_tokens_cached": sum(r["cache_n"] for r in runs),
            "prompt_tokens_processed": sum(r["prompt_n"] for r in runs),
            "acceptance": (sum(r["draft_n_accepted"] for r in runs) / sum(r["draft_n"] for r in runs)
                           if sum(r["draft_n"] for r in runs) else None)}


def main():
    from specllama.models import add_pair_options, pair_from_options

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_pair_options(ap, "qwen2.5-coder", files=False)
    ap.add_argument("-n", "--n-predict", type=int, default=32, help="tokens per completion")
    ap.add_argument("-c", "--ctx-size", type=int, default=4096)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--first-line", type=int, default=80,
                    help="the session edits from this line of the file (the prefix then fits whole: see docs/server.md)")
    ap.add_argument("--lines", type=int, default=6, help="lines edited (two requests each)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--servers", default="specllama,llama-server,llama-server-no-draft")
    ap.add_argument("--cache-reuse", type=int, default=256,
                    help="every server's --cache-reuse (256 as in llama.cpp's FIM presets; 0: the common prefix only)")
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()

    target, draft = pair_from_options(args)
    kinds = args.servers.split(",")
    requests = session(args.first_line, args.lines)
    extra = extra_chunks()
    runs = {k: [] for k in kinds}
    texts = {}
    commands = {}
    for r, kind, url, cmd in fresh_servers(kinds, args.rounds, target, draft, args.ctx_size, args.threads,
                                           llama_cpp_bin(), ["--cache-reuse", str(args.cache_reuse)]):
        commands.setdefault(kind, cmd)
        # a connection per request, as the extensions' curl and axios calls make them
        with httpx.Client(base_url=url, timeout=600, limits=httpx.Limits(max_keepalive_connections=0)) as http:
            one(http, "", "", "", extra, 1)  # the server's first request (allocations, graphs)
            got = [one(http, p, typed, s, extra, args.n_predict) for p, typed, s in requests]
        runs[kind] += got
        texts.setdefault(kind, [g["text"] for g in got])
        s = summary(got)
        print(f"round {r + 1} {kind:22s} p50 {s['latency_p50_ms']:7.0f} ms  p90 {s['latency_p90_ms']:7.0f} ms  "
              f"ttft {s['ttft_p50_ms']:6.0f} ms  {s['tokens_per_second_median']:5.1f} tok/s  cached "
              f"{s['prompt_tokens_cached']}/{s['prompt_tokens_cached'] + s['prompt_tokens_processed']}",
              flush=True)
    table = {k: summary(v) for k, v in runs.items()}
    same = {k: texts[k] == texts[kinds[0]] for k in kinds}
    for k in kinds:
        s = table[k]
        print(f"{k:22s} latency p50 {s['latency_p50_ms']:7.0f} ms  p90 {s['latency_p90_ms']:7.0f} ms  ttft p50 "
              f"{s['ttft_p50_ms']:6.0f} ms  {s['tokens_per_second_median']:5.1f} tok/s  prompt tokens cached "
              f"{s['prompt_tokens_cached']} of {s['prompt_tokens_cached'] + s['prompt_tokens_processed']}"
              + (f"  acceptance {s['acceptance']:.2f}" if s["acceptance"] is not None else "")
              + ("" if same[k] else "  (texts differ from the first server's)"))
    if "specllama" in table:
        for k in kinds:
            if k != "specllama":
                print(f"specllama / {k}: latency p50 {table['specllama']['latency_p50_ms'] / table[k]['latency_p50_ms']:.2f}x")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"provenance": provenance({"target": target, "draft": draft}, args.threads),
              "settings": portable_settings(vars(args)), "server_commands": commands, "results": table,
              "same_text_as_first_server": same, "requests": len(requests),
              "runs": {k: [{key: v for key, v in g.items() if key != "text"} for g in runs[k]] for k in kinds}}
    name = (f"editor_replay_{args.pair}{'_' + args.target_type if args.target_type else ''}"
            f"{'_cache_reuse' if args.cache_reuse else ''}.json")
    (out / name).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
