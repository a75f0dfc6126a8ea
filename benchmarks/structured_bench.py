"""Structured output: a JSON-schema extraction task through the chat endpoint with
response_format json_schema, against `specllama serve` and llama-server with the same pair and
draft, greedy and sampled. Each server is started fresh and warmed with one request; rounds
alternate the servers' order. Reported per server and temperature: the generation's tokens per
second (the servers' own timings: after the prompt), median over the requests, and the draft's
acceptance.

    python benchmarks/structured_bench.py --pair qwen2.5-coder --target-type f16
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from serve_bench import fresh_servers, llama_cpp_bin  # noqa: E402

from specllama.provenance import portable_settings, provenance  # noqa: E402

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "born": {"type": "integer"}, "city": {"type": "string"},
    "languages": {"type": "array", "items": {"type": "string"}},
    "employer": {"type": "object", "properties": {"name": {"type": "string"}, "since": {"type": "integer"}},
                 "required": ["name", "since"]}},
    "required": ["name", "born", "city", "languages", "employer"]}
TEXTS = [
    "Ada Moreau was born in 1988 in Lyon. She writes Rust and Python, and has worked at Nimbus Data since 2019.",
    "Born in 1975, Kenji Sato lives in Osaka; he programs in C++, Go and OCaml and joined Arkwright Labs in 2004.",
    "Priya Nair (born 1993, Bangalore) codes in TypeScript and Kotlin at Lumen Health, her employer since 2021.",
]


def one(http: httpx.Client, text: str, temp: float, seed: int, n: int) -> dict:
    body = {"messages": [{"role": "user", "content": "Extract the person as JSON: " + text}], "temperature": temp,
            "seed": seed, "max_tokens": n, "response_format": {"type": "json_schema",
                                                                "json_schema": {"name": "person", "schema": SCHEMA}}}
    r = http.post("/v1/chat/completions", json=body)
    r.raise_for_status()
    out = r.json()
    t = out["timings"]
    content = out["choices"][0]["message"]["content"]
    try:
        json.loads(content)
        valid = True
    except ValueError:
        valid = False
    return {"predicted_n": t["predicted_n"], "predicted_per_second": t["predicted_per_second"],
            "draft_n": t.get("draft_n", 0), "draft_n_accepted": t.get("draft_n_accepted", 0), "valid_json": valid,
            "finish_reason": out["choices"][0]["finish_reason"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="qwen2.5-coder")
    ap.add_argument("--target-type", default=None)
    ap.add_argument("-n", "--n-predict", type=int, default=160)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--temps", default="0,0.8")
    ap.add_argument("--servers", default="specllama,llama-server")
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()

    from specllama.models import pair_paths

    target, draft = pair_paths(args.pair, args.target_type)
    kinds = args.servers.split(",")
    temps = [float(x) for x in args.temps.split(",")]
    runs = {(k, t): [] for k in kinds for t in temps}
    commands = {}
    for r, kind, url, cmd in fresh_servers(kinds, args.rounds, target, draft, 2048, args.threads, llama_cpp_bin()):
        commands.setdefault(kind, cmd)
        with httpx.Client(base_url=url, timeout=900) as http:
            one(http, TEXTS[0], 0.0, 0, 8)  # the server's first request (allocations, graphs)
            for temp in temps:
                for i, text in enumerate(TEXTS):
                    runs[(kind, temp)].append(one(http, text, temp, 100 * r + i, args.n_predict))
        print(f"round {r + 1} {kind} done", flush=True)
    table = {}
    for (kind, temp), got in runs.items():
        drafted = sum(g["draft_n"] for g in got)
        table[f"{kind} T={temp}"] = {
            "tokens_per_second_median": statistics.median(g["predicted_per_second"] for g in got),
            "acceptance": sum(g["draft_n_accepted"] for g in got) / drafted if drafted else None,
            "valid_json": sum(g["valid_json"] for g in got), "requests": len(got)}
    for name, s in table.items():
        print(f"{name:24s} {s['tokens_per_second_median']:6.1f} tok/s  acceptance "
              f"{s['acceptance'] if s['acceptance'] is None else round(s['acceptance'], 2)}  "
              f"valid JSON {s['valid_json']}/{s['requests']}")
    if "specllama" in kinds and "llama-server" in kinds:
        for temp in temps:
            a, b = table[f"specllama T={temp}"], table[f"llama-server T={temp}"]
            print(f"T={temp}: specllama / llama-server {a['tokens_per_second_median'] / b['tokens_per_second_median']:.2f}x")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"provenance": provenance({"target": target, "draft": draft}, args.threads),
              "settings": portable_settings(vars(args)), "server_commands": commands, "results": table,
              "schema": SCHEMA, "runs": {f"{k} T={t}": v for (k, t), v in runs.items()}}
    name = f"structured_{args.pair}{'_' + args.target_type if args.target_type else ''}.json"
    (out / name).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
