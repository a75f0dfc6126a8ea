"""Step by step: where a new decoder's time goes on the recurrent bench's Mamba pair
(recurrent_bench.py builds it), plain decoding against the adaptive rule, each on a fresh
SpeculativeDecoder, one prompt, 128 tokens. Prints per run the stats and every step that drafted
or took longer than 1.5 plain steps: (step, drafted, accepted, ms).

For the adaptive decoder it also prints what it spent beyond plain steps, measured within its own
run (so that the machine's drift between runs does not enter): each drafting step, and the step
after it, against the tokens it made at the run's median plain step; and the draft's prompt pass
at the draft's measured price per prompt token. Both as a share of the run's plain-step time.

    python benchmarks/recurrent_trace.py [-n 128] [-ngl -1] [--runs 2]
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recurrent_bench as rb  # noqa: E402

import specllama  # noqa: E402


def trace(dec, prompt, n, **kw):
    log = []
    t = [time.perf_counter()]

    def on_step(toks, text, n_drafted, n_accepted):
        now = time.perf_counter()
        log.append((n_drafted, n_accepted, (now - t[0]) * 1000))
        t[0] = now
        return False

    s = dec.generate(prompt, on_step=on_step, max_tokens=n, temperature=0, ignore_eos=True, **kw).stats
    return s, log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0, help="layers of both models to offload")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("-n", type=int, default=128, help="tokens per generation")
    args = ap.parse_args()
    shares = []
    paths = rb.build(Path(tempfile.mkdtemp(prefix="specllama-mamba-")), 4, 24)
    for _ in range(args.runs):
        for kw in (dict(speculative=False), dict(drafter="model")):
            with specllama.SpeculativeDecoder(paths["target"], paths["draft"], n_ctx=1024,
                                              n_gpu_layers=args.n_gpu_layers,
                                              n_gpu_layers_draft=args.n_gpu_layers) as dec:
                s, log = trace(dec, rb.PROMPTS[0], args.n, **kw)
                model = dec._native().cost_model()
            plain = statistics.median(x[2] for x in log if x[0] == 0)
            after_first = sum(x[2] for x in log[1:])
            print(f"{kw} prefill {s.t_prefill_ms:.1f} after-step0 {after_first:.1f} ms steps {s.n_steps} "
                  f"drafted {s.n_drafted} acc {s.n_accepted} paused {s.n_paused_steps} "
                  f"rollback {s.t_rollback_ms:.1f} draft {s.t_draft_ms:.1f} verify {s.t_verify_ms:.1f} "
                  f"median plain step {plain:.2f}")
            print("   ", [(i, nd, na, round(ms, 2)) for i, (nd, na, ms) in enumerate(log) if nd or ms > 1.5 * plain][:40])
            if "drafter" in kw:
                base = plain * (len(log) - 1)
                near = [i for i in range(1, len(log)) if log[i][0] or log[i - 1][0]]
                steps = sum(log[i][2] - (log[i][1] + 1) * plain for i in near)
                prompt = model["draft_token_ms"] * (s.n_prompt - 1 - s.n_prompt_cached)
                shares.append((steps + prompt) / base)
                print(f"    beyond plain steps: drafting steps {steps:.1f} ms ({100 * steps / base:.1f}%), "
                      f"draft prompt {prompt:.1f} ms ({100 * prompt / base:.1f}%), of {base:.0f} ms of plain steps")
    if shares:
        print(f"a new decoder's cost beyond plain steps, median over {len(shares)} runs: "
              f"{100 * statistics.median(shares):.1f}% (runs {', '.join(f'{100 * x:.1f}%' for x in shares)})")


if __name__ == "__main__":
    main()
