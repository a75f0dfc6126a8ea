"""Where DSI across machines beats SI on one: llama.cpp's RPC overhead measured on loopback, then
the DSI paper's latency model with that overhead (and modelled network round trips) added to
every target forward pass of a server on another machine.

1. Measured: the default pair's target (or -m) decodes one token, and a verification batch of
   n_draft + 1 tokens, on this machine and on a `specllama rpc-server` on 127.0.0.1 (the same CPU,
   the same thread count), interleaved, medians. The difference is what llama.cpp's RPC backend
   adds per forward pass on loopback: serialization, the graph sent, the logits fetched back.
2. Simulated (specllama.simulate, the offline model of Timor et al.): SI with the target and the
   draft on one machine, against DSI with its target servers each on a machine of its own, whose
   every forward pass costs the target's time plus the RPC overhead plus a network round trip
   (0 on loopback; modelled LAN and WAN round trips). A simulation, not a measurement.

    python benchmarks/rpc_scale.py [-m TARGET] [--rtt 0,0.5,2,10] [--json out.json]

Needs llama-cpp-python built with -DGGML_RPC=ON (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

import specllama
from specllama import _core, simulate
from specllama.models import default_pair
from specllama.provenance import provenance


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(target: str, threads: int, n_batch: int, repeats: int) -> dict:
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "specllama", "rpc-server", "-p", str(port), "-t", str(threads)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        ep = f"127.0.0.1:{port}"
        local = specllama.Context(specllama.Model(target), n_ctx=512, n_threads=threads)
        remote = specllama.Context(specllama.Model(target, n_gpu_layers=-1, device=ep), n_ctx=512, n_threads=threads)
        filler = list(range(1000, 1100))
        samples: dict = {}
        for ctx in (local, remote):
            ctx.decode(filler, all_logits=False)
        for _ in range(repeats):  # interleaved, so that a slow spell of the machine hits both
            for name, ctx in (("local", local), ("rpc", remote)):
                for k in (1, n_batch):
                    t = time.perf_counter()
                    ctx.decode(list(range(2000, 2000 + k)), all_logits=True)
                    samples.setdefault(f"{name}_{k}", []).append((time.perf_counter() - t) * 1000.0)
                    ctx.rollback(len(filler))
        del local, remote, ctx  # freed while the rpc-server still answers
        return {k: statistics.median(v) for k, v in samples.items()}
    finally:
        server.kill()
        server.wait()


def scale(target_ms: float, draft_ms: float, accept: float, sp: int, n: int, overhead_ms: float, rtts, repeats: int):
    def mean(fn):
        rng = np.random.default_rng(0)
        return float(np.mean([fn(rng) for _ in range(repeats)]))

    ks = range(1, 21)
    si_best = min(mean(lambda r, k=k: simulate.si(target_ms, draft_ms, k, n, accept, r)) for k in ks)
    rows = []
    for rtt in rtts:
        remote_ms = target_ms + overhead_ms + rtt
        dsi_best = min(mean(lambda r, k=k: simulate.dsi(remote_ms, draft_ms, k, n, accept, sp, r)) for k in ks)
        rows.append({"rtt_ms": rtt, "server_forward_ms": remote_ms, "si_ms": si_best, "dsi_ms": dsi_best,
                     "dsi_vs_si": si_best / dsi_best, "plain_ms": simulate.non_si(target_ms, n)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", help="target GGUF (default: the default pair's)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--n-batch", type=int, default=5, help="verification batch measured (n_draft + 1)")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--rtt", default="0,0.5,2,10", help="network round trips to model, ms (0: loopback)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not _core.supports_rpc():
        sys.exit("llama-cpp-python was built without -DGGML_RPC=ON (docs/gpu.md)")
    target = args.model or default_pair()[0]
    m = measure(target, args.threads, args.n_batch, args.repeats)
    overhead = m["rpc_1"] - m["local_1"]
    print(f"measured on loopback, {os.path.basename(target)}: one-token decode {m['local_1']:.2f} ms local, "
          f"{m['rpc_1']:.2f} ms on an rpc-server (+{overhead:.2f} ms); {args.n_batch} tokens "
          f"{m[f'local_{args.n_batch}']:.2f} ms local, {m[f'rpc_{args.n_batch}']:.2f} ms on it")
    rtts = [float(x) for x in args.rtt.split(",")]
    scenarios = []
    # the paper's defaults (a target 20 ms, a drafter 8.8 ms), a large target, and acceptances
    for target_ms, draft_ms in ((20.0, 8.8), (100.0, 8.8)):
        for accept in (0.93, 0.6):
            rows = scale(target_ms, draft_ms, accept, 7, 256, overhead, rtts, 20)
            scenarios.append({"target_ms": target_ms, "draft_ms": draft_ms, "accept": accept, "sp": 7, "rows": rows})
    print("\nsimulated (offline model of Timor et al., 256 tokens, 7 target servers, each on its own machine; "
          "SI on one machine, no network):")
    print(f"{'target ms':>9} {'draft ms':>8} {'accept':>6} " + " ".join(f"{'rtt ' + str(r) + ' ms':>13}" for r in rtts))
    for sc in scenarios:
        print(f"{sc['target_ms']:9.1f} {sc['draft_ms']:8.1f} {sc['accept']:6.2f} "
              + " ".join(f"{row['dsi_vs_si']:12.2f}x" for row in sc["rows"]))
    print("(DSI across machines / SI on one: above 1 DSI is faster)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"provenance": provenance({"target": target}, args.threads, output_options=("--json",)), "measured_ms": m,
                       "rpc_overhead_ms": overhead, "scenarios": scenarios}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
