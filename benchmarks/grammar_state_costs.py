"""What it costs to keep a grammar's state at each drafted position, by the two ways a speculative
loop can: a clone of llama.cpp's grammar sampler per position (what specllama does), or one
working copy replayed over the tokens (accepting them again from the last committed state). Times
llama_sampler_clone and llama_sampler_accept on the JSON-schema grammar of
benchmarks/structured_bench.py over a reply the Qwen2.5-Coder target wrote under it, through
llama-cpp-python's bindings (a ctypes call's own overhead is measured and shown alongside).

    python benchmarks/grammar_state_costs.py [--pair qwen2.5-coder]
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import llama_cpp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from structured_bench import SCHEMA  # noqa: E402

REPLY = ('{ "name": "Kenji Sato", "born": 1975, "city": "Osaka", "languages": ["C++", "Go", "OCaml"], '
         '"employer": {"name": "Arkwright Labs", "since": 2004} }')


def per_call_us(fn, n):
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) * 1e6 / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="qwen2.5-coder")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    from specllama.models import pair_paths
    from specllama.provenance import provenance

    target, _ = pair_paths(args.pair, None)
    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    mp.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(target.encode(), mp)
    vocab = llama_cpp.llama_model_get_vocab(model)
    gbnf = json_schema_to_gbnf(json.dumps(SCHEMA)).encode()
    root = llama_cpp.llama_sampler_init_grammar(vocab, gbnf, b"root")
    buf = (llama_cpp.llama_token * 512)()
    n = llama_cpp.llama_tokenize(vocab, REPLY.encode(), len(REPLY.encode()), buf, 512, False, False)
    tokens = list(buf[:n])

    clone_us, accept_us = [], []
    state = llama_cpp.llama_sampler_clone(root)
    for tok in tokens:  # at each position of the reply: a clone of the state there, and one token's accept
        clone_us.append(per_call_us(lambda: llama_cpp.llama_sampler_free(llama_cpp.llama_sampler_clone(state)),
                                    args.repeat * 20))
        copies = [llama_cpp.llama_sampler_clone(state) for _ in range(args.repeat * 20)]
        t = time.perf_counter()
        for c in copies:
            llama_cpp.llama_sampler_accept(c, tok)
        accept_us.append((time.perf_counter() - t) * 1e6 / len(copies))
        for c in copies:
            llama_cpp.llama_sampler_free(c)
        llama_cpp.llama_sampler_accept(state, tok)
    overhead = per_call_us(lambda: llama_cpp.llama_sampler_name(state), 20000)
    clone, accept = statistics.median(clone_us), statistics.median(accept_us)
    # a step that drafts d tokens and keeps k: clones as specllama keeps them (one per drafted
    # position, one at the step's start, one at its commit) against a replay (a working copy for
    # drafting and one for verification, each advanced token by token, and the commit's accepts)
    report = {"provenance": provenance({"target": target}, 1), "tokens": len(tokens),
              "clone_us_median": clone, "accept_us_median": accept, "ctypes_call_us": overhead,
              "clone_us_max": max(clone_us), "accept_us_max": max(accept_us), "steps": {}}
    print(f"{len(tokens)} tokens; per call, median (max): clone {clone:.1f} us ({max(clone_us):.1f}), "
          f"accept {accept:.1f} us ({max(accept_us):.1f}); a ctypes call alone {overhead:.2f} us")
    for d, k in ((4, 3), (8, 6), (16, 12)):
        by_clone = (d + 2) * clone + (d + 1) * accept
        by_replay = 2 * clone + (d + (k + 1) + (k + 1)) * accept
        report["steps"][f"draft {d} keep {k}"] = {"clone_us": by_clone, "replay_us": by_replay}
        print(f"a step drafting {d}, keeping {k}: clones {by_clone:.0f} us, replay {by_replay:.0f} us")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grammar_state_costs.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out / 'grammar_state_costs.json'}")


if __name__ == "__main__":
    main()
