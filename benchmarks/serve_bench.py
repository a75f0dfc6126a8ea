"""Server benchmark: specllama serve (speculative), specllama serve --no-draft, llama-server with
the same target and draft, and llama-server without the draft (-np equal to the concurrency), under
1, 2, 4 and 8 concurrent streaming clients sending a mix of prompts.

Each server is started fresh for each concurrency, warmed with one request, and then each client
sends its requests back to back. Reported per server and concurrency: aggregate completion tokens
per second (all tokens / wall time), median and mean time to first token (the clients' requests
arrive in waves, so the median jumps between waves where the mean moves with every request; each
request's is in the report), and median per-request tokens per second (tokens after the first /
time after the first). Every request asks for the same number of
tokens (ignore_eos), so the servers generate equal amounts.

A shared machine's speed drifts by more than the differences measured here (on the 2-core test
machine, the same run repeated varies by up to 15%), so each concurrency is measured --repeat times
in rounds, the servers' order rotating from round to round, and each figure is the median of the
rounds; every round's figures are in the report. specllama's ratio to each other server is the
median of its ratios in each round (specllama_ratio in the report).

    python benchmarks/serve_bench.py                       # default pair, greedy
    python benchmarks/serve_bench.py --temp 0.8 --out bench-out
llama-server comes from benchmarks/build_llama_cpp.sh (built from the llama-cpp-python 0.3.36 sdist).
"""

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from typing import Optional
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from specllama.provenance import portable_settings, provenance

HERE = Path(__file__).resolve().parent
PROMPTS = [
    "Name three rivers in Europe and say one thing about each.",
    "Write a short poem about the sea.",
    "Explain what a hash table is to a new programmer.",
    "List five fruits and their colours.",
    "Write a Python function that reverses a string, with a docstring.",
    "Summarize the plot of Romeo and Juliet in a few sentences.",
    "Give three tips for writing clear emails.",
    "What causes the seasons on Earth?",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become healthy")


def start(kind: str, target: str, draft: str, n_parallel: int, n_ctx: int, threads: int, llama_bin: Path,
          extra=(), chat_template: Optional[str] = None):
    """A server of kind specllama, specllama-no-draft, specllama-no-forced (a draft, no grammar-forced
    drafts), llama-server or llama-server-no-draft started on
    a free port with the given flags (and extra ones, which both servers take; chat_template: a Jinja
    file both serve instead of the model's template); (process, url, command)."""
    port = free_port()
    if kind.startswith("llama-server"):
        # -md alone only loads the draft: this llama.cpp speculates with the types --spec-type names
        spec = (["-md", draft, "--spec-type", "draft-simple", "-td", str(threads), "-ngld", "0"]
                if kind == "llama-server" else [])
        cmd = [str(llama_bin / "llama-server"), "-m", target, *spec, "-np", str(n_parallel),
               "-c", str(n_ctx * n_parallel), "-t", str(threads), "-ngl", "0", "--port", str(port),
               "--host", "127.0.0.1"]
        cmd += ["--jinja", "--chat-template-file", chat_template] if chat_template else []
    else:
        cmd = [sys.executable, "-m", "specllama", "serve", "-m", target, "-np", str(n_parallel), "-c", str(n_ctx),
               "-t", str(threads), "--port", str(port)]
        cmd += ["--no-draft"] if kind == "specllama-no-draft" else ["-d", draft]
        cmd += ["--no-forced-drafts"] if kind == "specllama-no-forced" else []
        cmd += ["--chat-template", chat_template] if chat_template else []
    cmd += list(extra)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc)
    return proc, url, cmd


def llama_cpp_bin() -> Path:
    """Where benchmarks/build_llama_cpp.sh puts llama.cpp's programs (built there on first use)."""
    out = subprocess.run(["bash", str(HERE / "build_llama_cpp.sh")], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def fresh_servers(kinds, rounds: int, target: str, draft: str, n_ctx: int, threads: int, llama_bin: Path,
                  extra=(), chat_template: Optional[str] = None):
    """Each round, each kind of server started fresh (one slot), the kinds' order rotating by round:
    yields (round, kind, url, its portable command line) and stops the server after its turn."""
    for r in range(rounds):
        for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
            proc, url, cmd = start(kind, target, draft, 1, n_ctx, threads, llama_bin, extra, chat_template)
            try:
                yield r, kind, url, portable(cmd)
            finally:
                stop(proc)


def stop(proc) -> None:
    """Stop a server as Ctrl-C does (killed if it has not ended within a minute)."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def portable(cmd) -> str:
    """A server's command line without this machine's paths or the port."""
    words = ["python" if w == sys.executable else os.path.basename(w) if os.sep in w else w for w in cmd]
    return re.sub(r" --port \d+", "", " ".join(words))


def one_request(url: str, prompt: str, n: int, temp: float, seed: int) -> dict:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n, "temperature": temp,
            "ignore_eos": True, "stream": True, "seed": seed}
    t0 = time.perf_counter()
    first = None
    n_chunks_text = 0
    timings = None
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("timings"):
                timings = ev["timings"]
            for c in ev.get("choices") or []:
                if (c.get("delta") or {}).get("content"):
                    n_chunks_text += 1
                    if first is None:
                        first = time.perf_counter()
    end = time.perf_counter()
    n_tokens = timings["predicted_n"] if timings else n
    return {"ttft_s": (first or end) - t0, "total_s": end - t0, "tokens": n_tokens,
            "per_request_tps": (n_tokens - 1) / (end - first) if first and end > first else 0.0,
            "draft_n": (timings or {}).get("draft_n"), "draft_n_accepted": (timings or {}).get("draft_n_accepted")}


def run_level(url: str, concurrency: int, per_client: int, n: int, temp: float) -> dict:
    one_request(url, PROMPTS[0], 8, temp, 0)  # warm-up

    def client(c):
        return [one_request(url, PROMPTS[(c * per_client + k) % len(PROMPTS)], n, temp, 1000 * c + k)
                for k in range(per_client)]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = [r for rs in pool.map(client, range(concurrency)) for r in rs]
    wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)
    drafted = sum(r["draft_n"] or 0 for r in results)
    ttft = sorted(r["ttft_s"] for r in results)
    return {"aggregate_tps": tokens / wall, "ttft_median_s": statistics.median(ttft), "ttft_mean_s": statistics.mean(ttft),
            "ttft_s": ttft,
            "per_request_tps_median": statistics.median(r["per_request_tps"] for r in results),
            "requests": len(results), "tokens": tokens, "wall_s": wall, "drafted": drafted,
            "acceptance": (sum(r["draft_n_accepted"] or 0 for r in results) / drafted) if drafted else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", help="target GGUF (default: the default pair)")
    ap.add_argument("-d", "--draft", help="draft GGUF")
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("-c", "--ctx-size", type=int, default=2048, help="context per slot")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="rounds per concurrency; figures are their medians")
    ap.add_argument("--servers", default="specllama,specllama-no-draft,llama-server,llama-server-no-draft")
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()

    if args.model:
        target, draft = args.model, args.draft
    else:
        from specllama.models import default_pair

        target, draft = default_pair()
    kinds = args.servers.split(",")
    llama_bin = None
    if any(k.startswith("llama-server") for k in kinds):
        llama_bin = llama_cpp_bin()
    source = provenance({"target": target, "draft": draft}, args.threads)
    levels = [int(c) for c in args.concurrency.split(",")]
    table = {}
    commands = {}
    for c in levels:
        rounds = {kind: [] for kind in kinds}
        for r in range(args.repeat):
            for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                proc, url, cmd = start(kind, target, draft, c, args.ctx_size, args.threads, llama_bin)
                commands.setdefault(kind, portable(cmd))
                try:
                    res = run_level(url, c, args.requests_per_client, args.n_predict, args.temp)
                finally:
                    stop(proc)
                if not kind.endswith("no-draft") and not res["drafted"]:
                    raise RuntimeError(f"{kind} drafted no token: its speculation is off ({portable(cmd)})")
                rounds[kind].append(res)
                print(f"  round {r + 1} concurrency {c} {kind:20s} aggregate {res['aggregate_tps']:6.1f} tok/s",
                      flush=True)
        # specllama against each other server, round by round: the servers of a round run back to
        # back, so each round's ratio is less exposed to the machine's drift than the medians are
        ratios = {}
        if "specllama" in kinds:
            for other in kinds:
                if other != "specllama":
                    ratios[other] = statistics.median(a["aggregate_tps"] / b["aggregate_tps"]
                                                      for a, b in zip(rounds["specllama"], rounds[other]))
        for kind in kinds:
            res = {key: statistics.median(x[key] for x in rounds[kind])
                   for key in ("aggregate_tps", "ttft_median_s", "ttft_mean_s", "per_request_tps_median")}
            if kind in ratios:
                res["specllama_ratio"] = ratios[kind]
            acc = [x["acceptance"] for x in rounds[kind] if x["acceptance"] is not None]
            res["acceptance"] = statistics.median(acc) if acc else None
            res["rounds"] = rounds[kind]
            table.setdefault(str(c), {})[kind] = res
            print(f"concurrency {c} {kind:20s} aggregate {res['aggregate_tps']:6.1f} tok/s  ttft "
                  f"{res['ttft_median_s'] * 1000:6.0f} ms (mean {res['ttft_mean_s'] * 1000:6.0f})  per request {res['per_request_tps_median']:6.1f} tok/s"
                  + (f"  acceptance {res['acceptance']:.2f}" if res["acceptance"] is not None else "")
                  + (f"  specllama/this {res['specllama_ratio']:.3f}" if "specllama_ratio" in res else ""), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"provenance": source, "settings": portable_settings(vars(args)), "server_commands": commands,
              "results": table}
    name = f"serve_bench{'_t' + str(args.temp).replace('.', '') if args.temp else '_greedy'}.json"
    (out / name).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
