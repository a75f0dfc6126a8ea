"""A target and a draft GGUF of real models' shapes, with random weights arranged so that the draft
predicts the target with a chosen acceptance: what a speed measurement on a GPU needs when real
weights cannot be carried there.

Shapes (llama architecture, grouped-query attention; --shape small is a few MB, for tests):

  qwen7b    target: width 3584, 28 layers, 28 query / 4 key-value heads, FFN 18944, vocab 152,064
            (Qwen2.5-7B's; Qwen2's attention biases, a few thousand numbers, are left out)
            draft:  width 896, 24 layers, 14 / 2 heads, FFN 4864, the target's vocabulary
            (Qwen2.5-0.5B's; its real vocabulary is 151,936 long, the same tokens)
  qwen14b   target: width 5120, 48 layers, 40 / 8 heads, FFN 13824, vocab 152,064 (Qwen2.5-14B's;
            29.5 GB in F16), with the same 0.5B-shaped draft
  small     target: width 128, 4 layers, 4 / 2 heads, FFN 256, vocab 4096; draft: width 64, 2 layers

How the draft predicts the target: every layer computes as a layer of that shape does, but its
output projections (attention output, FFN down) are small, so each model's next-token logits are
those of a table indexed by the current token: logits = W . rmsnorm(E[token]). The target's
embedding is the draft's, zero-padded to the target's width, plus tau-scaled noise in the padded
dimensions, and its output matrix is the draft's beside a noise matrix: the target's table is
the draft's plus independent noise of standard deviation tau (in logits) per pair of tokens. tau
is set by bisection so that the two tables' argmax agree on --acceptance of the tokens (greedy
acceptance; the expected acceptance at T = 0.8 under llama.cpp's default chain is reported
beside it). The models' text is a Markov chain over made-up tokens, which is all a speed
measurement needs; the measured acceptance is what counts, and the runs report it.

    python benchmarks/gpu/shaped_models.py --shape qwen7b --acceptance 0.8 --out models/ [--type q4_k_m]
    python benchmarks/gpu/shaped_models.py --shape small --acceptance 0.8 --out /tmp/shaped

Writes target.gguf and draft.gguf (or --type's quantization of them, by llama.cpp's quantizer
through specllama) and shaped.json (the shapes, tau, the calibrated acceptances). Where --out holds
a pair of that shape, type and seed already, it is kept (an F16 one retuned to --acceptance).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List

import gguf
import numpy as np


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int


QWEN_05B = Shape(896, 24, 14, 2, 4864)  # the draft of both Qwen shapes
SHAPES = {
    "qwen7b": (Shape(3584, 28, 28, 4, 18944), QWEN_05B, 152064),
    "qwen14b": (Shape(5120, 48, 40, 8, 13824), QWEN_05B, 152064),
    "small": (Shape(128, 4, 4, 2, 256), Shape(64, 2, 4, 2, 128), 4096),
}
LOGIT_STD = 4.0  # the draft's logits: a peaked distribution, as a trained model's usually is
LAYER_OUT_STD = 1e-6  # the layers' output projections: what they add to the logits is negligible
N_SPECIAL = 5  # <unk> <s> </s> and two unused controls


def vocabulary(n_vocab: int) -> List[str]:
    """An SPM vocabulary: specials, 256 byte tokens, letters, then made-up pieces."""
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    tokens += ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += [f"\u2581t{i}" for i in range(n_vocab - len(tokens))]
    return tokens


def _tokenizer(writer: gguf.GGUFWriter, tokens: List[str]) -> None:
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    types = [gguf.TokenType.NORMAL] * len(tokens)
    scores = [0.0] * len(tokens)
    for i, text in enumerate(tokens):
        if i == 0:
            types[i] = gguf.TokenType.UNKNOWN
        elif i < N_SPECIAL:
            types[i] = gguf.TokenType.CONTROL
        elif text.startswith("<0x"):
            types[i] = gguf.TokenType.BYTE
        else:
            scores[i] = float(len(text))
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)


def _layers(shape: Shape, rng: np.random.Generator) -> Dict[str, np.ndarray]:
    """One layer's weights (F16), shared by every layer of the model: what a layer computes costs
    the same whatever its numbers, and its small output projections keep it out of the logits
    (the layers' outputs add up coherently, being alike: at 1e-4 the 28 layers of the 7B shape
    moved the target's logits by a third of their spread, so far that it kept none of the drafts)."""
    d, d_head = shape.n_embd, shape.n_embd // shape.n_head
    d_kv = d_head * shape.n_head_kv

    def w(rows, cols, std):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * std).astype(np.float16)

    return {"attn_norm.weight": np.ones(d, np.float32), "ffn_norm.weight": np.ones(d, np.float32),
            "attn_q.weight": w(d, d, 0.02), "attn_k.weight": w(d_kv, d, 0.02), "attn_v.weight": w(d_kv, d, 0.02),
            "attn_output.weight": w(d, d, LAYER_OUT_STD), "ffn_gate.weight": w(shape.n_ff, d, 0.02),
            "ffn_up.weight": w(shape.n_ff, d, 0.02), "ffn_down.weight": w(d, shape.n_ff, LAYER_OUT_STD)}


def _rmsnorm(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-5)


@dataclass
class Tables:
    """The embedding and output matrices of both models, before the noise is scaled by tau."""
    e_draft: np.ndarray   # (V, d_draft)
    w_draft: np.ndarray   # (V, d_draft)
    e_noise: np.ndarray   # (V, d_target - d_draft): the target's padded dimensions
    w_noise: np.ndarray   # (V, d_target - d_draft): unit-variance logits noise per token pair, / sqrt(dims)


def tables(target: Shape, draft: Shape, n_vocab: int, seed: int) -> Tables:
    rng = np.random.default_rng(seed)
    d_pad = target.n_embd - draft.n_embd
    t = Tables(e_draft=rng.standard_normal((n_vocab, draft.n_embd), dtype=np.float32),
               w_draft=rng.standard_normal((n_vocab, draft.n_embd), dtype=np.float32)
               * (LOGIT_STD / np.sqrt(draft.n_embd)),
               e_noise=rng.standard_normal((n_vocab, d_pad), dtype=np.float32),
               w_noise=rng.standard_normal((n_vocab, d_pad), dtype=np.float32) / np.sqrt(d_pad))
    # the special and byte tokens' logits are 0, far below the likely tokens': the text is made of
    # whole pieces, and no end-of-text cuts a run short in programs that stop there whatever they
    # are told
    t.w_draft[:N_SPECIAL + 256] = 0.0
    t.w_noise[:N_SPECIAL + 256] = 0.0
    return t


def target_matrices(t: Tables, tau: float):
    """The target's embedding, output matrix and output-norm weights for noise tau: its hidden
    state [e, n] has unit variance in both parts, so after the norm the draft's dimensions give
    the draft's logits and the noise dimensions tau * w_noise . n."""
    embd = np.concatenate([t.e_draft, t.e_noise], axis=1)
    out = np.concatenate([t.w_draft, t.w_noise * tau], axis=1)
    return embd, out, np.ones(embd.shape[1], np.float32)


def logit_parts(t: Tables, toks: np.ndarray):
    """After each of toks: the draft's logits, and the target's as a + tau * b (the norm's scale
    does not depend on tau, which only scales the output matrix's noise columns)."""
    d = t.e_draft.shape[1]
    draft = _rmsnorm(t.e_draft[toks]).astype(np.float32) @ t.w_draft.T
    h = _rmsnorm(np.concatenate([t.e_draft[toks], t.e_noise[toks]], axis=1)).astype(np.float32)
    a = (h[:, :d] @ t.w_draft.T).astype(np.float64)
    b = (h[:, d:] @ t.w_noise.T).astype(np.float64)
    return draft.astype(np.float64), a, b


def chain_probs(logits: np.ndarray, temp: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                min_p: float = 0.05) -> np.ndarray:
    """llama.cpp's default chain (top-k, top-p, min-p, temperature) on rows of logits, as dense rows."""
    out = np.zeros_like(logits)
    for r, row in enumerate(logits):
        ids = np.argpartition(-row, top_k)[:top_k]
        ids = ids[np.argsort(-row[ids])]
        l = row[ids]
        p = np.exp(l - l[0])
        p /= p.sum()
        keep = int(np.searchsorted(np.cumsum(p), top_p) + 1)
        ids, l = ids[:keep], l[:keep]
        kept = l >= l[0] + np.log(min_p)
        ids, l = ids[kept], l[kept]
        q = np.exp((l - l[0]) / temp)
        out[r, ids] = q / q.sum()
    return out


def acceptances(parts, tau: float) -> Dict[str, float]:
    """How often the draft's and the target's argmax agree at tau, and the expected acceptance
    sum_x min(p, q) at T = 0.8 (parts: logit_parts)."""
    draft, a, b = parts
    target = a + tau * b
    return {"greedy": float(np.mean(draft.argmax(axis=1) == target.argmax(axis=1))),
            "t0.8": float(np.mean(np.minimum(chain_probs(draft), chain_probs(target)).sum(axis=1)))}


def calibrate(parts, acceptance: float) -> float:
    """tau at which the greedy acceptance over parts' tokens is acceptance (bisection on a log scale)."""
    draft, a, b = parts
    best = draft.argmax(axis=1)
    lo, hi = 1e-3, 4.0 * LOGIT_STD
    for _ in range(30):
        mid = float(np.sqrt(lo * hi))
        if np.mean(best == (a + mid * b).argmax(axis=1)) > acceptance:
            lo = mid
        else:
            hi = mid
    return float(np.sqrt(lo * hi))


def write(path: Path, name: str, shape: Shape, tokens: List[str], embd: np.ndarray, out: np.ndarray,
          norm: np.ndarray, layer: Dict[str, np.ndarray]) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(32768)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_rope_freq_base(1e6)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    _tokenizer(writer, tokens)
    writer.add_tensor("token_embd.weight", embd.astype(np.float16))
    writer.add_tensor("output_norm.weight", norm.astype(np.float32))
    writer.add_tensor("output.weight", out.astype(np.float16))
    for i in range(shape.n_layer):
        for key, a in layer.items():
            writer.add_tensor(f"blk.{i}.{key}", a)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def retune(out_dir: Path, acceptance: float, n_probe: int = 256) -> Dict:
    """Set an F16 pair that make_pair wrote in out_dir to another acceptance: the target's output
    matrix is rewritten in place (every other tensor stays), much faster than writing the pair."""
    report = json.loads((out_dir / "shaped.json").read_text())
    if report["type"] != "f16":
        raise ValueError("only an f16 pair can be retuned in place")
    target, draft, n_vocab = SHAPES[report["shape"]]
    t = tables(target, draft, n_vocab, report["seed"])
    tau, measured = _tune(t, acceptance, n_probe, report["seed"])
    reader = gguf.GGUFReader(report["files"]["target"], "r+")
    out = next(x for x in reader.tensors if x.name == "output.weight")
    out.data[...] = target_matrices(t, tau)[1].astype(np.float16).reshape(out.data.shape)
    reader.data.flush()
    report.update(acceptance_asked=acceptance, tau=tau, calibrated=measured)
    (out_dir / "shaped.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def _tune(t: Tables, acceptance: float, n_probe: int, seed: int):
    """tau for acceptance, and the acceptances it gives on other tokens than the bisection's."""
    probes = np.random.default_rng(seed + 1).integers(N_SPECIAL, t.e_draft.shape[0], (2, n_probe))
    tau = calibrate(logit_parts(t, probes[0]), acceptance)
    return tau, acceptances(logit_parts(t, probes[1]), tau)


def make_pair(out_dir: Path, shape: str, acceptance: float, seed: int = 0, n_probe: int = 256,
              quant: str = "f16") -> Dict:
    """Write target and draft GGUFs for shape at acceptance into out_dir (quantized to quant unless
    f16); returns what shaped.json holds (the files under "files")."""
    target, draft, n_vocab = SHAPES[shape]
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    t = tables(target, draft, n_vocab, seed)
    tau, measured = _tune(t, acceptance, n_probe, seed)
    tokens = vocabulary(n_vocab)
    rng = np.random.default_rng(seed + 3)
    paths = {}
    for role, s, matrices in (("draft", draft, (t.e_draft, t.w_draft, np.ones(draft.n_embd, np.float32))),
                              ("target", target, target_matrices(t, tau))):
        f16 = out_dir / f"{role}.f16.gguf"
        write(f16, f"specllama-shaped-{shape}-{role}", s, tokens, *matrices, _layers(s, rng))
        paths[role] = f16
        if quant != "f16":
            import specllama

            q = out_dir / f"{role}.{quant}.gguf"
            specllama.quantize(str(f16), str(q), quant)
            f16.unlink()
            paths[role] = q
    report = {"shape": shape, "target": asdict(target), "draft": asdict(draft), "n_vocab": n_vocab,
              "acceptance_asked": acceptance, "tau": tau, "logit_std": LOGIT_STD, "type": quant,
              "calibrated": measured, "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
              "files": {k: str(v) for k, v in paths.items()}}
    (out_dir / "shaped.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def pair_for(out_dir: Path, shape: str, acceptance: float, seed: int = 0, quant: str = "f16") -> Dict:
    """The pair in out_dir at acceptance: the one already there where it has this shape, type and
    seed (an F16 one retuned in place where its acceptance differs), else a new one (make_pair)."""
    try:
        report = json.loads((out_dir / "shaped.json").read_text())
        same = (report["shape"], report["type"], report["seed"]) == (shape, quant, seed) and all(
            Path(f).exists() for f in report["files"].values())
    except (OSError, ValueError, KeyError):
        same = False
    if same and report["acceptance_asked"] == acceptance:
        return report
    if same and quant == "f16":
        return retune(out_dir, acceptance)
    return make_pair(out_dir, shape, acceptance, seed, quant=quant)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen7b")
    ap.add_argument("--acceptance", type=float, default=0.8, help="greedy acceptance to set, in (0, 1)")
    ap.add_argument("--out", required=True, help="directory for target/draft GGUFs and shaped.json")
    ap.add_argument("--type", default="f16", help="f16, or a llama.cpp quantization (q8_0, q4_k_m, ...)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not 0.0 < args.acceptance < 1.0:
        ap.error("--acceptance must lie in (0, 1)")
    report = pair_for(Path(args.out), args.shape, args.acceptance, args.seed, quant=args.type)
    print(json.dumps(report), file=sys.stderr)


if __name__ == "__main__":
    main()
