"""Step by step: where a new decoder's time goes on the recurrent bench's Mamba pair
(recurrent_bench.py builds it), plain decoding against the adaptive rule, each on a fresh
SpeculativeDecoder, one prompt, 128 tokens. Prints per run the stats and every step that drafted
or took longer than 1.5 plain steps: (step, drafted, accepted, ms).

    python benchmarks/recurrent_trace.py [-ngl -1] [--runs 2]
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


def trace(dec, prompt, **kw):
    log = []
    t = [time.perf_counter()]

    def on_step(toks, text, n_drafted, n_accepted):
        now = time.perf_counter()
        log.append((n_drafted, n_accepted, (now - t[0]) * 1000))
        t[0] = now
        return False

    s = dec.generate(prompt, on_step=on_step, max_tokens=128, temperature=0, ignore_eos=True, **kw).stats
    return s, log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0, help="layers of both models to offload")
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    paths = rb.build(Path(tempfile.mkdtemp(prefix="specllama-mamba-")), 4, 24)
    for _ in range(args.runs):
        for kw in (dict(speculative=False), dict(drafter="model")):
            with specllama.SpeculativeDecoder(paths["target"], paths["draft"], n_ctx=1024,
                                              n_gpu_layers=args.n_gpu_layers,
                                              n_gpu_layers_draft=args.n_gpu_layers) as dec:
                s, log = trace(dec, rb.PROMPTS[0], **kw)
            plain = statistics.median(x[2] for x in log if x[0] == 0)
            after_first = sum(x[2] for x in log[1:])
            print(f"{kw} prefill {s.t_prefill_ms:.1f} after-step0 {after_first:.1f} ms steps {s.n_steps} "
                  f"drafted {s.n_drafted} acc {s.n_accepted} paused {s.n_paused_steps} "
                  f"rollback {s.t_rollback_ms:.1f} draft {s.t_draft_ms:.1f} verify {s.t_verify_ms:.1f} "
                  f"median plain step {plain:.2f}")
            print("   ", [(i, nd, na, round(ms, 2)) for i, (nd, na, ms) in enumerate(log) if nd or ms > 1.5 * plain][:40])


if __name__ == "__main__":
    main()
