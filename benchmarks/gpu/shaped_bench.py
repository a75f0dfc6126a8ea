"""Speculative decoding on models of real shapes (shaped_models.py: a Qwen2.5-7B-shaped target and
a 0.5B-shaped draft with random weights, at set acceptances), against plain decoding and
llama.cpp's own speculative programs, on one machine in one run.

For each acceptance: the pair is written, or the one in --models retuned in place (an F16 pair of
the same shape: shaped_models.pair_for), then, in
--rounds rounds, greedy and at T = 0.8 (top-k 40, top-p 0.95, min-p 0.05 everywhere), each run
--n-predict new tokens after one prompt (end-of-text ignored):

  plain       specllama, speculative=False: the same engine without a draft
  specllama   the draft model, adaptive draft length (<= 10), device sampling; with --variant,
              also decoders with other settings (draft_catch_up=batch,verify_shape=exact: the
              decodes shaped as on a CPU); with --run, other generate() settings (a fixed length,
              DSI), each on a decoder of its own (all of them siblings on one copy of the weights)
  llama-speculative-simple   --spec-draft-n-max in --n-max (each a run)
  llama-server               with the draft, --spec-draft-n-max in --n-max (one server each, one
                             /completion request per run, timed by the server's own timings)

Every figure is decode tokens per second (the prompt's time left out), the median over rounds;
ratios are taken in the same run. Rounds interleave all programs; the servers stay loaded
through the rounds, as specllama's decoder does, where the GPU holds every program's copy of the
pair at once, and are started for each round otherwise (--servers).

    python benchmarks/gpu/shaped_bench.py --models /tmp/shaped --bindir BIN -ngl all --out shaped.json
    python benchmarks/gpu/shaped_bench.py --shape small --models /tmp/shaped --acceptance 0.8 -n 32 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # compare.py, serve_bench.py

import specllama  # noqa: E402
import compare  # noqa: E402
from compare import run_llama_server, run_speculative_simple, start_llama_server  # noqa: E402
from shaped_models import SHAPES, pair_for  # noqa: E402
from specllama.provenance import provenance  # noqa: E402

PROMPT = "the quick brown fox jumps over the lazy dog and then"
CHAIN = dict(top_k=40, top_p=0.95, min_p=0.05)
TEMPS = (0.0, 0.8)


def gpu_info() -> dict:
    """The GPU, its driver and the CUDA compiler, where nvidia-smi and nvcc are there."""
    info = {}
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True)
        info["gpu"] = q.stdout.strip()
    if shutil.which("nvcc"):
        v = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()
        info["nvcc"] = v[-1] if v else ""
    return info


def _settings(text: str) -> dict:
    """KEY=VALUE,KEY=VALUE as keyword arguments (integers where the value is one, true and false as bools)."""
    def value(x):
        return int(x) if x.lstrip("-").isdigit() else {"true": True, "false": False}.get(x.lower(), x)
    return {k: value(x) for k, x in (kv.split("=", 1) for kv in text.split(","))}


def run_specllama(dec, n: int, temp: float, **kw) -> dict:
    """compare.py's run, after a short one with the same settings: a change of sampling chain makes
    llama.cpp rebuild its graphs once, a cost of switching settings rather than of generating.
    Unseeded, as a request without a seed runs (the rejection rule; a seeded one draws keyed)."""
    dec.generate(PROMPT, max_tokens=4, temperature=temp, ignore_eos=True, **CHAIN, **kw)
    fig = compare.run_specllama(dec, PROMPT, n, temp, **CHAIN, **kw)
    fig.pop("tokens")
    return fig


def peer_run(fn, *args, attempts: int = 3, **kw):
    """One run of a llama.cpp program; None (and the reason on stderr) where it failed, so that one
    program's failure leaves the others' figures. llama-speculative-simple's closing timing lines
    come from an asynchronous log that a loaded machine sometimes loses at exit: such a run is
    made again."""
    for attempt in range(attempts):
        try:
            return fn(*args, **kw)
        except AttributeError as exc:  # (no timing lines)
            print(f"{fn.__name__}: no timings in its log (attempt {attempt + 1}): {exc}", file=sys.stderr)
        except (RuntimeError, OSError, ValueError) as exc:
            print(f"{fn.__name__} failed: {exc}", file=sys.stderr)
            return None
    print(f"{fn.__name__} failed: no timings in {attempts} attempts", file=sys.stderr)
    return None


def gpu_memory_mib() -> int | None:
    """The first GPU's memory in MiB (nvidia-smi), or None without one."""
    if not shutil.which("nvidia-smi"):
        return None
    q = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    try:
        return int(q.stdout.split()[0])
    except (IndexError, ValueError):
        return None


def servers_stay_loaded(args, target: str, draft: str) -> bool:
    """Whether llama-server stays loaded through the rounds (--servers loaded) or is started for each
    round and stopped after it (per-round). auto: loaded where the GPU holds the pair once for
    specllama (its decoders share the weights), once per server and once for
    llama-speculative-simple, with a tenth to spare; per-round where it does not (a 14B-shaped F16
    pair on an 80 GB card). args.gpu_mib: the GPU's memory (gpu_memory_mib(), None without one)."""
    if args.servers != "auto":
        return args.servers == "loaded"
    if args.gpu_mib is None or args.ngl == 0:
        return True
    pair_mib = (Path(target).stat().st_size + Path(draft).stat().st_size) / 2**20
    return (2 + len(args.n_max)) * pair_mib * 1.1 < args.gpu_mib


def start_server(bindir, target, draft, k, args, ngl):
    """llama-server at n_max k, after one short request: its first decodes record CUDA graphs, a
    cost of starting rather than of generating (specllama's runs start the same way)."""
    proc, url = start_llama_server(bindir, target, draft, k, args.threads, ngl=ngl)
    try:
        run_llama_server(url, PROMPT, 4, 0.0)
    except Exception as exc:  # (httpx's errors among them: peer_run reports a RuntimeError and goes on)
        stop_server(proc)
        raise RuntimeError(f"llama-server's first request failed: {exc}") from exc
    return proc, url


def stop_server(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def specllama_row(decoders: dict, args, temp: float) -> dict:
    """One round's specllama runs at temp: plain decoding and every decoder's speculative run."""
    row = {"plain": run_specllama(decoders["specllama"][0], args.n_predict, temp, speculative=False)}
    for name, (d, opts) in decoders.items():
        row[name] = run_specllama(d, args.n_predict, temp, drafter="model", record_steps=opts.get("mode") != "dsi",
                                  **opts)
        row[name].update(draft_catch_up=d.draft_catch_up_mode, verify_shape=d.verify_shape_mode,
                         settle_steps=d.settle_steps_mode, probe_reads=d.probe_reads)
    return row


def print_row(acceptance, r, temp, row) -> None:
    print(f"acceptance {acceptance} round {r + 1} T={temp}: " + ", ".join(
        f"{name} {fig['decode_tokens_per_second']:.1f}" for name, fig in row.items()), file=sys.stderr, flush=True)
    for name, fig in row.items():
        if "steps" in fig:
            lengths = fig["steps"]["verified"]  # (padded: one, or the first batch's and one more)
            shapes = f" (verified {' then '.join(map(str, lengths))} tokens)" if 0 < len(lengths) <= 3 else ""
            print(f"  {name} steps: {fig['steps']['pattern']}{shapes}", file=sys.stderr, flush=True)
            print(f"  {name} kept:  {fig['steps']['kept']}", file=sys.stderr, flush=True)


def one_acceptance(args, acceptance: float, bindir) -> dict:
    pair = pair_for(Path(args.models), args.shape, acceptance, quant=args.type)
    target, draft = pair["files"]["target"], pair["files"]["draft"]
    ngl_peer = 999 if args.ngl < 0 else args.ngl
    has_server = bool(bindir) and (Path(bindir) / "llama-server").exists()
    simple = Path(bindir) / "llama-speculative-simple" if bindir else None
    stay = servers_stay_loaded(args, target, draft)
    pair["llama_server"] = "loaded through the rounds" if stay else "started for each round"
    servers = {}
    runs = {}
    try:
        if has_server and stay:
            servers = {k: start_server(bindir, target, draft, k, args, ngl_peer) for k in args.n_max}
        load = dict(n_ctx=2048, n_threads=args.threads, n_gpu_layers=args.ngl, n_gpu_layers_draft=args.ngl)
        with contextlib.ExitStack() as stack:
            dec = stack.enter_context(specllama.SpeculativeDecoder(target, draft, **load))
            # decoders on the same weights: each --variant's settings, and each --run on one of its own, so
            # that no run's steps (fixed lengths, DSI) are evidence for another's adaptive rule
            decoders = {"specllama": (dec, {})}
            decoders.update({f"specllama, {name}": (stack.enter_context(dec.sibling(**kw)), {})
                             for name, kw in args.variants.items()})
            decoders.update({f"specllama, {name}": (stack.enter_context(dec.sibling()), opts)
                             for name, opts in args.runs.items()})
            for r in range(args.rounds):
                rows = {}
                for temp in TEMPS:
                    rows[temp] = row = specllama_row(decoders, args, temp)
                    for k in args.n_max:
                        if simple and simple.exists():
                            row[f"llama-speculative-simple n_max {k}"] = peer_run(
                                run_speculative_simple, simple, target, draft, PROMPT, args.n_predict, k, args.threads,
                                temp, ngl=ngl_peer)
                for k in args.n_max if has_server else ():
                    if not stay:
                        servers[k] = peer_run(start_server, bindir, target, draft, k, args, ngl_peer, attempts=1)
                    for temp in TEMPS:
                        if servers.get(k):
                            rows[temp][f"llama-server n_max {k}"] = peer_run(run_llama_server, servers[k][1], PROMPT,
                                                                             args.n_predict, temp, seed=r)
                    if not stay and servers.get(k):
                        stop_server(servers.pop(k)[0])
                for temp, row in rows.items():
                    row = {name: fig for name, fig in row.items() if fig is not None}
                    for name, fig in row.items():
                        runs.setdefault(f"T={temp}", {}).setdefault(name, []).append(fig)
                    print_row(acceptance, r, temp, row)
    finally:
        for proc, _url in servers.values():
            stop_server(proc)
    return {"pair": pair, "runs": runs, "summary": summarize(runs)}


def summarize(runs: dict) -> dict:
    """Median decode tokens/s per program, and specllama over plain and over the better peer."""
    out = {}
    for temp, progs in runs.items():
        med = {name: statistics.median(f["decode_tokens_per_second"] for f in figs) for name, figs in progs.items()}
        acc = {name: statistics.median(f["acceptance_rate"] for f in figs if f.get("acceptance_rate") is not None)
               for name, figs in progs.items() if any(f.get("acceptance_rate") is not None for f in figs)}
        peers = {name: v for name, v in med.items() if name.startswith("llama-")}
        best_simple = max((v for n, v in peers.items() if "simple" in n), default=None)
        best_server = max((v for n, v in peers.items() if "server" in n), default=None)
        best_peer = max((v for v in (best_simple, best_server) if v is not None), default=None)
        out[temp] = {"tokens_per_second": med, "acceptance_rate": acc,
                     "specllama_over_plain": med["specllama"] / med["plain"],
                     "specllama_over_best_llama_cpp": med["specllama"] / best_peer if best_peer else None}
    return out


def parse_args(argv=None) -> argparse.Namespace:
    """The bench's arguments, every one checked (--check stops there: run.sh checks them before it
    spends minutes writing the pair)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen7b", choices=sorted(SHAPES), help="shaped_models.py's shape")
    ap.add_argument("--type", default="f16", help="the pair's number format (f16 is retuned in place)")
    ap.add_argument("--models", required=True, help="directory for the pair")
    ap.add_argument("--acceptance", default="0.8,0.6,0.9",
                    help="per-token acceptances to set, comma-separated, in this order (the report is written "
                         "after each)")
    ap.add_argument("--bindir", default="", help="llama.cpp's programs (llama-server, llama-speculative-simple)")
    ap.add_argument("-ngl", "--n-gpu-layers", dest="ngl", default="all",
                    help="layers of each model offloaded: a number, or all")
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n-max", default="4,8", help="llama.cpp's --spec-draft-n-max values")
    ap.add_argument("-t", "--threads", type=int, default=8)
    ap.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                    help="also run specllama on a decoder with these settings (SpeculativeDecoder.sibling()'s), e.g. "
                         "draft_catch_up=batch,verify_shape=exact, settle_steps=0 or probe_reads=false (repeatable; "
                         "each on the same weights, with caches of its own)")
    ap.add_argument("--run", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                    help="also run specllama with these generate() settings, e.g. mode=dsi,sp=2,lookahead=4 "
                         "(repeatable; each --run on a decoder of its own on the same weights, so that no run "
                         "teaches another's adaptive rule)")
    ap.add_argument("--servers", choices=("auto", "loaded", "per-round"), default="auto",
                    help="llama-server loaded through the rounds, or started for each round and stopped after it "
                         "(auto: per-round where the GPU cannot hold every program's copy of the pair at once)")
    ap.add_argument("--out", help="write the report as JSON here")
    ap.add_argument("--check", action="store_true", help="check the arguments and exit")
    args = ap.parse_args(argv)
    try:
        args.ngl = -1 if args.ngl == "all" else int(args.ngl)
        args.n_max = [int(x) for x in args.n_max.split(",") if x]
    except ValueError:
        ap.error("-ngl takes a number or all, --n-max whole numbers separated by commas")
    try:
        args.acceptances = [float(x) for x in args.acceptance.split(",")]
    except ValueError:
        ap.error(f"--acceptance takes numbers separated by commas, not {args.acceptance!r}")
    if not all(0 < a < 1 for a in args.acceptances):
        ap.error(f"each acceptance is in (0, 1): {args.acceptance}")
    try:
        args.variants = {v: _settings(v) for v in args.variant}
        args.runs = {v: _settings(v) for v in args.run}
    except ValueError:
        ap.error("--variant and --run take KEY=VALUE pairs separated by commas")
    if args.type != "f16" and len(args.acceptances) > 1:
        ap.error("several acceptances need --type f16 (the pair is retuned in place): give one --acceptance")
    return args


def main() -> None:
    args = parse_args()
    if args.check:
        return
    args.gpu_mib = gpu_memory_mib()
    prov = provenance({}, args.threads)
    report = {"provenance": prov, "gpu": gpu_info(), "shape": args.shape, "type": args.type,
              "n_predict": args.n_predict, "rounds": args.rounds, "chain": CHAIN, "ngl": args.ngl, "acceptances": {}}
    for a in args.acceptances:
        report["acceptances"][str(a)] = one_acceptance(args, a, args.bindir)
        if args.out:  # (what is done so far survives a later failure or the call's time limit)
            Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    for a, res in report["acceptances"].items():
        for temp, s in res["summary"].items():
            peer = s["specllama_over_best_llama_cpp"]
            print(f"acceptance {a} {temp}: specllama {s['tokens_per_second']['specllama']:.1f} tokens/s, "
                  f"{s['specllama_over_plain']:.2f}x plain"
                  + (f", {peer:.2f}x the better of llama.cpp's" if peer else "")
                  + f"; acceptance {s['acceptance_rate']}; tokens/s "
                  + ", ".join(f"{name} {v:.1f}" for name, v in s["tokens_per_second"].items()))


if __name__ == "__main__":
    main()
