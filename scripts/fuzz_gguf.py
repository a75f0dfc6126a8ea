"""Seeded mutation fuzzing of the model-loading path (specllama.Model and SpeculativeDecoder).

Starts from valid tiny GGUF files (a model and a draft with a different vocabulary), mutates
them (bit flips, overwritten bytes with boundary values, truncation, inserted and deleted
ranges, absurd counts in the header), writes each mutant and loads it. Every load must either
succeed or raise a Python exception; a crash (segfault, abort) kills this process, and then the
last line printed names the seed and iteration to replay. Loads that take too long are
reported as hangs.

    python scripts/fuzz_gguf.py --seconds 20           # what CI runs (tests/test_fuzz.py)
    python scripts/fuzz_gguf.py --seconds 3600 -s 7    # longer, by hand
    python scripts/fuzz_gguf.py --replay 7:1234 --keep bad.gguf   # write and load one mutant

Exit status 0: no crash, no hang, and every error a clear one (a UnicodeDecodeError about the
message itself counts as unclear). Prints how many mutants loaded, failed cleanly, and how.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import specllama  # noqa: E402
from tiny_models import random_weights, vocab, write_model  # noqa: E402

BOUNDARY = [0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 2**62, 2**63 - 1, 2**64 - 1]


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 3, 8])):
        kind = rng.randrange(7)
        # most structure lives in the header and metadata: aim there more often than at weights
        hot = min(len(b), 4096) if rng.random() < 0.8 else len(b)
        pos = rng.randrange(max(1, hot))
        if kind == 0:  # flip a bit
            if b:
                b[pos % len(b)] ^= 1 << rng.randrange(8)
        elif kind == 1:  # a boundary integer, 4 or 8 bytes
            v = rng.choice(BOUNDARY)
            raw = struct.pack("<Q", v % 2**64) if rng.random() < 0.5 else struct.pack("<I", v % 2**32)
            b[pos:pos + len(raw)] = raw
        elif kind == 2:  # random bytes
            n = rng.randrange(1, 16)
            b[pos:pos + n] = bytes(rng.randrange(256) for _ in range(n))
        elif kind == 3:  # truncate
            del b[rng.randrange(len(b) + 1):]
        elif kind == 4:  # delete a range
            del b[pos:pos + rng.randrange(1, 64)]
        elif kind == 5:  # insert a range
            b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        else:  # the tensor or key-value count in the fixed header
            off = rng.choice([8, 16])
            if len(b) >= off + 8:
                b[off:off + 8] = struct.pack("<Q", rng.choice(BOUNDARY + [rng.randrange(1, 10_000)]) % 2**64)
    return bytes(b)


UNCLEAR = "UNCLEAR"  # an exception that does not say what is wrong with the file


def _kind(exc: BaseException) -> str:
    # a UnicodeDecodeError is a ValueError, but its message is about the error text, not the file
    return f"{UNCLEAR} {type(exc).__name__}: {exc}" if isinstance(exc, UnicodeError) else type(exc).__name__


def load(path: str, target: str) -> str:
    """Load path as a model, then as a draft for target; return what happened."""
    try:
        m = specllama.Model(path)
        m.tokenize("the cat")
        del m
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        return f"clean error: {_kind(exc)}"
    try:
        with specllama.SpeculativeDecoder(target, path, n_ctx=256) as dec:
            dec.generate("the cat", max_tokens=2, temperature=0)
    except (ValueError, RuntimeError) as exc:
        return f"loaded; as a draft: {_kind(exc)}"
    return "loaded and generated"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="time budget")
    ap.add_argument("-s", "--seed", type=int, default=0)
    ap.add_argument("--hang-seconds", type=float, default=10.0, help="a load slower than this is a hang")
    ap.add_argument("--replay", metavar="SEED:ITER", help="write and load one mutant")
    ap.add_argument("--keep", metavar="PATH", help="with --replay: where to write the mutant")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="specllama-fuzz-"))
    toks = vocab()
    target = write_model(work / "target.gguf", toks, random_weights(len(toks), seed=1))
    other = vocab(extra_words=3)
    seeds = [target.read_bytes(), write_model(work / "other.gguf", other, random_weights(len(other), seed=2)).read_bytes()]
    mutant = Path(args.keep) if args.keep else work / "mutant.gguf"

    def make(seed: int, it: int) -> bytes:
        rng = random.Random(seed * 1_000_003 + it)
        return mutate(seeds[it % len(seeds)], rng)

    if args.replay:
        seed, it = (int(x) for x in args.replay.split(":"))
        mutant.write_bytes(make(seed, it))
        print(f"{mutant}: {load(str(mutant), str(target))}")
        return 0

    outcomes: collections.Counter = collections.Counter()
    start = time.monotonic()
    it = 0
    while time.monotonic() - start < args.seconds:
        mutant.write_bytes(make(args.seed, it))
        print(f"fuzz: seed {args.seed} iteration {it}", end="\r", flush=True)  # the replay key if we die
        t = time.monotonic()
        outcomes[load(str(mutant), str(target))] += 1
        if time.monotonic() - t > args.hang_seconds:
            print(f"\nfuzz: HANG: --replay {args.seed}:{it} took {time.monotonic() - t:.1f} s")
            return 1
        it += 1
    unclear = sum(n for what, n in outcomes.items() if UNCLEAR in what)
    print(f"\nfuzz: {it} mutants in {time.monotonic() - start:.0f} s, no crash or hang (seed {args.seed})"
          + (f"; {unclear} unclear error messages" if unclear else ""))
    for what, n in outcomes.most_common():
        print(f"  {n:6d}  {what[:200]}")
    os.remove(mutant)
    return 1 if unclear else 0


if __name__ == "__main__":
    sys.exit(main())
