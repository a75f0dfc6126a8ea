"""A draft with a smaller vocabulary: the same weights with only the first N tokens of a BPE
vocabulary (FR-Spec, Zhao et al. 2025, restricts a draft's output to frequent tokens; a BPE
vocabulary lists its tokens in merge order, which follows their frequency in the tokenizer's
training text). The draft's output layer shrinks with it, so each draft token costs less; the
draft tokenizes text with the merges that remain and drafts through the tokens it shares with the
target (token-level intersection), so the output stays the target's.

Written with llama.cpp's own `gguf` package: the file's metadata and tensors are copied, the token
list, token types and merges cut to the kept tokens, and the rows of the token embedding (and of
the output layer, where the model has its own) cut to match. Quantized rows are cut whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Tuple

import gguf
import numpy as np

_TOKENS = "tokenizer.ggml.tokens"
_TYPES = "tokenizer.ggml.token_type"
_MERGES = "tokenizer.ggml.merges"
_SCORES = "tokenizer.ggml.scores"
_PER_TOKEN = {_TOKENS, _TYPES, _SCORES}
_ROWS_PER_TOKEN = {"token_embd.weight", "output.weight"}


def rewrite_gguf(reader: "gguf.GGUFReader", dst: str, change: Callable[[str, Any], Any],
                 n_rows: Optional[int] = None) -> Tuple[int, int]:
    """Write dst as the GGUF reader holds, each metadata value passed through change(name, value),
    and the token embedding and output tensors cut to their first n_rows rows (None: whole).
    Returns the tensor bytes read and written."""
    arch = str(reader.fields["general.architecture"].contents())
    writer = gguf.GGUFWriter(dst, arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, change(field.name, field.contents()), vtype, sub_type=sub)
    cut = n_rows is not None
    datas = [np.ascontiguousarray(t.data[:n_rows]) if cut and t.name in _ROWS_PER_TOKEN else t.data
             for t in reader.tensors]
    for t, data in zip(reader.tensors, datas):
        writer.add_tensor_info(t.name, data.shape, data.dtype, data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for data in datas:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()
    return sum(t.n_bytes for t in reader.tensors), sum(d.nbytes for d in datas)


def trim_vocab(src: str, dst: str, n_keep: int) -> dict:
    """Write dst: src with its first n_keep tokens. Returns {"n_vocab", "n_keep", "n_merges",
    "n_merges_kept", "bytes", "bytes_kept"}. Raises ValueError for a vocabulary that is not BPE, an
    n_keep that drops special tokens or base bytes, or one not smaller than the vocabulary."""
    reader = gguf.GGUFReader(src)
    fields = reader.fields
    if _TOKENS not in fields or _MERGES not in fields:
        raise ValueError(f"{src}: --vocab-top needs a BPE vocabulary with merges; this file has none")
    tokens = [str(t) for t in fields[_TOKENS].contents()]
    types = list(fields[_TYPES].contents()) if _TYPES in fields else [1] * len(tokens)
    if not 0 < n_keep < len(tokens):
        raise ValueError(f"--vocab-top must be in [1, {len(tokens) - 1}] for a vocabulary of {len(tokens)}, "
                         f"got {n_keep}")
    # every special token, every token the tokenizer names by id, and every token no merge makes
    # (the base bytes) must stay
    merges = [str(m) for m in fields[_MERGES].contents()]
    made = {a + b for a, b in (m.split(" ", 1) for m in merges)}
    needed = max((i for i, (t, ty) in enumerate(zip(tokens, types)) if ty != 1 or t not in made), default=0)
    named = [int(f.contents()) for name, f in fields.items()  # BOS, EOS, padding, ... by id
             if name.startswith("tokenizer.ggml.") and name.endswith("_token_id")]
    needed = max([needed] + [i for i in named if i < len(tokens)])
    if n_keep <= needed:
        raise ValueError(f"--vocab-top {n_keep} would drop token {needed} ({tokens[needed]!r}), a special or "
                         f"base token: keep at least {needed + 1}")
    kept = set(tokens[:n_keep])
    new_merges = [m for m in merges if all(p in kept for p in m.split(" ", 1)) and m.replace(" ", "", 1) in kept]

    arch = str(fields["general.architecture"].contents())
    per_field = {_MERGES: new_merges, f"{arch}.vocab_size": n_keep}

    def change(name, value):
        return value[:n_keep] if name in _PER_TOKEN else per_field.get(name, value)

    bytes_before, bytes_after = rewrite_gguf(reader, dst, change, n_keep)
    return {"n_vocab": len(tokens), "n_keep": n_keep, "n_merges": len(merges), "n_merges_kept": len(new_merges),
            "bytes": bytes_before, "bytes_kept": bytes_after, "path": str(Path(dst))}
