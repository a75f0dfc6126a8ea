"""Structured output through the chat endpoint, greedy and sampled: a JSON-schema extraction task
(response_format json_schema) and a tool-call task (tools with tool_choice "required"), against
`specllama serve` with the draft (with and without grammar-forced drafts), without it (plain), and
llama-server with the same pair and draft. Each server is started fresh and warmed with one
request; rounds rotate the servers' order. Reported per server, task and temperature: the
generation's tokens per second (the servers' own timings: after the prompt), median over the
requests, the draft's acceptance, and the share of generated tokens that were drafts the grammar
forced (kept by the target).

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


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
                    "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "search_flights", "description": "Flights between two cities on a day.",
     "parameters": {"type": "object", "properties": {"origin": {"type": "string"}, "destination": {"type": "string"},
                                                     "date": {"type": "string", "format": "date"}},
                    "required": ["origin", "destination", "date"]}}},
    {"type": "function", "function": {"name": "create_event", "description": "Put an event in the calendar.",
     "parameters": {"type": "object", "properties": {"title": {"type": "string"},
                                                     "date": {"type": "string", "format": "date"},
                                                     "attendees": {"type": "array", "items": {"type": "string"}}},
                    "required": ["title", "date", "attendees"]}}},
]
ASKS = [
    "Is it raining in Lyon right now? Give me the temperature in celsius.",
    "Find me flights from Osaka to Bangalore on 2025-03-14.",
    "Schedule 'Design review' on 2025-05-02 with Ada, Kenji and Priya.",
]
TASKS = {"extract": TEXTS, "tool": ASKS}


def body_of(task: str, text: str) -> dict:
    if task == "extract":
        return {"messages": [{"role": "user", "content": "Extract the person as JSON: " + text}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}}
    return {"messages": [{"role": "user", "content": text}], "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False}


def one(http: httpx.Client, task: str, text: str, temp: float, seed: int, n: int) -> dict:
    body = dict(body_of(task, text), temperature=temp, seed=seed, max_tokens=n)
    r = http.post("/v1/chat/completions", json=body)
    r.raise_for_status()
    out = r.json()
    t = out["timings"]
    msg = out["choices"][0]["message"]
    try:
        if task == "extract":
            json.loads(msg["content"])
        else:
            json.loads(msg["tool_calls"][0]["function"]["arguments"])
        valid = True
    except (ValueError, TypeError, KeyError, IndexError):
        valid = False
    return {"predicted_n": t["predicted_n"], "predicted_per_second": t["predicted_per_second"],
            "draft_n": t.get("draft_n", 0), "draft_n_accepted": t.get("draft_n_accepted", 0),
            "draft_n_forced": t.get("draft_n_forced", 0), "draft_n_forced_accepted": t.get("draft_n_forced_accepted", 0),
            "valid": valid, "finish_reason": out["choices"][0]["finish_reason"]}


def main():
    from specllama.models import add_pair_options, pair_from_options

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_pair_options(ap, "qwen2.5-coder", files=False)
    ap.add_argument("-n", "--n-predict", type=int, default=160)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--temps", default="0,0.8")
    ap.add_argument("--servers", default="specllama,specllama-no-forced,specllama-no-draft,llama-server")
    ap.add_argument("--tasks", default="extract,tool")
    ap.add_argument("--chat-template", default=None, metavar="FILE",
                    help="a Jinja chat template both servers serve (the tool calls in its format)")
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()

    target, draft = pair_from_options(args)
    kinds = args.servers.split(",")
    tasks = args.tasks.split(",")
    temps = [float(x) for x in args.temps.split(",")]
    runs = {(k, task, t): [] for k in kinds for task in tasks for t in temps}
    commands = {}
    for r, kind, url, cmd in fresh_servers(kinds, args.rounds, target, draft, 2048, args.threads, llama_cpp_bin(),
                                           chat_template=args.chat_template):
        commands.setdefault(kind, cmd)
        with httpx.Client(base_url=url, timeout=900) as http:
            one(http, "extract", TEXTS[0], 0.0, 0, 8)  # the server's first request (allocations, graphs)
            for task in tasks:
                for temp in temps:
                    for i, text in enumerate(TASKS[task]):
                        runs[(kind, task, temp)].append(one(http, task, text, temp, 100 * r + i, args.n_predict))
        print(f"round {r + 1} {kind} done", flush=True)
    table = {}
    for (kind, task, temp), got in runs.items():
        drafted = sum(g["draft_n"] for g in got)
        generated = sum(g["predicted_n"] for g in got)
        table[f"{kind} {task} T={temp}"] = {
            "tokens_per_second_median": statistics.median(g["predicted_per_second"] for g in got),
            "acceptance": sum(g["draft_n_accepted"] for g in got) / drafted if drafted else None,
            "forced_share": sum(g["draft_n_forced_accepted"] for g in got) / generated if generated else 0.0,
            "forced_kept": (sum(g["draft_n_forced_accepted"] for g in got) / sum(g["draft_n_forced"] for g in got)
                            if any(g["draft_n_forced"] for g in got) else None),
            "valid": sum(g["valid"] for g in got), "requests": len(got)}
    for name, s in table.items():
        acc = None if s["acceptance"] is None else round(s["acceptance"], 2)
        print(f"{name:38s} {s['tokens_per_second_median']:6.1f} tok/s  acceptance {acc}  "
              f"forced {s['forced_share']:.2f}  valid {s['valid']}/{s['requests']}")
    base = "llama-server"
    for kind in kinds:
        if kind == base or base not in kinds:
            continue
        for task in tasks:
            for temp in temps:
                a, b = table[f"{kind} {task} T={temp}"], table[f"{base} {task} T={temp}"]
                print(f"{task} T={temp}: {kind} / {base} "
                      f"{a['tokens_per_second_median'] / b['tokens_per_second_median']:.2f}x")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"provenance": provenance({"target": target, "draft": draft}, args.threads),
              "settings": portable_settings(vars(args)), "server_commands": commands, "results": table,
              "schema": SCHEMA, "tools": TOOLS, "runs": {f"{k} {task} T={t}": v for (k, task, t), v in runs.items()}}
    template = "_" + Path(args.chat_template).stem if args.chat_template else ""
    name = f"structured_{args.pair}{'_' + args.target_type if args.target_type else ''}{template}.json"
    (out / name).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
