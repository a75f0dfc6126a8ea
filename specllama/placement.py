"""How many of a model's layers go to the GPUs when the caller does not say (n_gpu_layers None).

As llama.cpp's own programs do by default: every layer on the devices llama.cpp uses where none is
named (every local GPU), where the model, its KV cache and a decode's working buffers fit in their
free memory with a margin left on each; as many layers as fit where they do not; none on a machine
(or a build of llama-cpp-python) without a GPU. The draft goes first, as it is small and each of
its decodes waits on the last; the target has what is left. What a model needs is read from its
GGUF file's tensor table (_core.model_footprint), before it is loaded.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _core
from .options import type_error

MARGIN = 1 << 30  # left free on each device, as llama.cpp's own fitting leaves (its --fit-target)
_GIB = float(1 << 30)

Footprint = Dict[str, int]


@dataclass(frozen=True)
class Offload:
    """n_gpu_layers for each model (-1: every layer, the output's included; 0: none; k: the last k
    repeating layers) and, where a model gets fewer than all for lack of memory, why."""
    target: int
    draft: int
    notes: Tuple[str, ...] = ()


def working_bytes(fp: Footprint, n_ctx: int, n_batch: int) -> int:
    """A decode's buffers on the device, generously: a batch's logits over the vocabulary and one
    layer's attention scores over the context (without flash attention), and 64 MiB besides."""
    return n_batch * (fp["n_vocab"] + n_ctx * fp["n_head"]) * 4 + (64 << 20)


def whole_bytes(fp: Footprint, n_ctx: int, n_batch: int, n_caches: int = 1) -> int:
    """Device memory for every layer of the model, the output layer, n_caches KV caches of n_ctx
    positions and its working buffers."""
    return (fp["layer_bytes"] + fp["output_bytes"] + fp["kv_bytes_per_position"] * n_ctx * n_caches
            + working_bytes(fp, n_ctx, n_batch))


def _per_layer(fp: Footprint, n_ctx: int, n_caches: int) -> float:
    return (fp["layer_bytes"] + fp["kv_bytes_per_position"] * n_ctx * n_caches) / max(fp["n_layer"], 1)


def layers_that_fit(fp: Footprint, budget: int, n_ctx: int, n_batch: int, n_caches: int = 1) -> int:
    """n_gpu_layers for a model in budget bytes: -1 where all of it fits, else how many of its
    repeating layers (with their share of the caches) fit beside the working buffers (0 if none)."""
    if whole_bytes(fp, n_ctx, n_batch, n_caches) <= budget:
        return -1
    n_layer = fp["n_layer"]
    if n_layer <= 0:
        return 0
    per_layer = _per_layer(fp, n_ctx, n_caches)
    room = budget - working_bytes(fp, n_ctx, n_batch)
    if room <= 0 or per_layer <= 0:
        return 0
    return min(n_layer, int(room // per_layer))


def _context(fp: Footprint, n_ctx: int) -> int:
    return n_ctx if n_ctx > 0 else max(fp.get("n_ctx_train", 0), 1)


def placed_bytes(fp: Footprint, n_gpu_layers: int, n_ctx: int, n_batch: int, n_caches: int = 1) -> int:
    """Device memory for a model with n_gpu_layers offloaded (llama.cpp's count: the last repeating
    layers, then the output layer; negative: all)."""
    ctx = _context(fp, n_ctx)
    n_layer = fp["n_layer"]
    if n_gpu_layers < 0 or n_gpu_layers > n_layer:
        return whole_bytes(fp, ctx, n_batch, n_caches)
    if n_gpu_layers == 0 or n_layer <= 0:
        return 0
    return int(n_gpu_layers * _per_layer(fp, ctx, n_caches)) + working_bytes(fp, ctx, n_batch)


def plan(target: Optional[Footprint], draft: Optional[Footprint], free: Sequence[int], n_ctx: int,
         n_batch: int, used: int = 0, n_caches: int = 1) -> Offload:
    """The layers of target and draft (None: not chosen here) on devices with these free bytes.
    used: bytes that models placed by the caller take on the same devices; n_caches: KV caches of
    n_ctx positions each model holds (a server's slots)."""
    budget = sum(free) - MARGIN * len(free) - used
    notes: List[str] = []
    chosen = {}
    for name, fp in (("draft", draft), ("target", target)):
        if fp is None:
            continue
        ctx = _context(fp, n_ctx)
        layers = layers_that_fit(fp, max(budget, 0), ctx, n_batch, n_caches) if free else 0
        chosen[name] = layers
        if free and layers != -1:
            need = whole_bytes(fp, ctx, n_batch, n_caches)
            caches = f"{n_caches} caches" if n_caches > 1 else "a cache"
            notes.append(f"the {name} needs about {need / _GIB:.1f} GiB of GPU memory with {caches} of {ctx} "
                         f"positions, and {max(budget, 0) / _GIB:.1f} GiB is free beyond a margin of "
                         f"{MARGIN / _GIB:.0f} GiB per device: {layers} of its {fp['n_layer']} layers are offloaded "
                         f"({'n_gpu_layers_draft / -ngld' if name == 'draft' else 'n_gpu_layers / -ngl'} sets it)")
        budget -= placed_bytes(fp, layers, ctx, n_batch, n_caches)
    return Offload(target=chosen.get("target", 0), draft=chosen.get("draft", 0), notes=tuple(notes))


Devices = Union[str, Sequence[str], None]


def given_layers(n: Optional[int], device: Devices, name: str) -> int:
    """n_gpu_layers as given; when not given, every layer where a device other than the CPU is
    named, none where "none" or "cpu" is, or no device (choose() fits those on the GPUs)."""
    if n is not None:
        if type(n) is not int:
            raise type_error(name, n, 0)
        return n
    if device is None:
        return 0
    if isinstance(device, str):
        names = device.split(",")
    elif isinstance(device, Sequence):
        names = list(device)
    else:
        return -1  # the core refuses the device with a TypeError that names it
    return 0 if [str(d).strip().lower() for d in names] in (["none"], ["cpu"]) else -1


def _footprint(path, cache_types: Sequence[str]) -> Optional[Footprint]:
    try:
        return _core.model_footprint(str(path), *cache_types)
    except (ValueError, OSError):
        return None  # the loader reports what is wrong with the file (or with a cache format)


def choose(model_path, draft_path, n_gpu_layers: Optional[int], n_gpu_layers_draft: Optional[int],
           device: Devices, device_draft: Devices, n_ctx: int, n_batch: int, n_caches: int = 1,
           devices: Optional[Callable[[], Sequence[Tuple[str, int]]]] = None,
           cache_types: Sequence[str] = ("f16",) * 4) -> Offload:
    """n_gpu_layers for both models: as given, every layer where a device is named (given_layers),
    or fitted to the free memory of llama.cpp's default devices (devices(): name, free bytes;
    _core.default_devices by default) where neither is given. Warns where a model gets fewer than
    all of its layers for lack of memory. n_caches: as plan's; cache_types: the formats of the
    target's keys and values, then the draft's."""
    for name, value in (("n_ctx", n_ctx), ("n_batch", n_batch)):
        if type(value) is not int:
            raise type_error(name, value, 0)
    auto_target = n_gpu_layers is None and device is None
    auto_draft = draft_path is not None and n_gpu_layers_draft is None and device_draft is None
    target = None if auto_target else given_layers(n_gpu_layers, device, "n_gpu_layers")
    draft = None if auto_draft else given_layers(n_gpu_layers_draft, device_draft, "n_gpu_layers_draft")
    if draft_path is None:
        draft = 0  # (what was given is checked above; without a draft there is nothing to place)
    if not (auto_target or auto_draft):
        return Offload(target=target, draft=draft)
    gpus = list((devices or _core.default_devices)())
    kv_target, kv_draft = tuple(cache_types[:2]), tuple(cache_types[2:4])
    fp_target = _footprint(model_path, kv_target) if auto_target and gpus else None
    fp_draft = _footprint(draft_path, kv_draft) if auto_draft and gpus else None
    used = 0  # what a model whose layers the caller set takes on the same devices
    for path, auto, layers, named, kv in ((model_path, auto_target, target, device, kv_target),
                                          (draft_path, auto_draft, draft, device_draft, kv_draft)):
        if gpus and path is not None and not auto and layers != 0 and named is None:
            placed = _footprint(path, kv)
            if placed is not None:
                used += placed_bytes(placed, layers, n_ctx, n_batch, n_caches)
    fitted = plan(fp_target, fp_draft, [free for _, free in gpus], n_ctx, n_batch, used=used, n_caches=n_caches)
    for note in fitted.notes:
        warnings.warn(note, RuntimeWarning, stacklevel=3)
    return Offload(target=fitted.target if fp_target is not None else (0 if auto_target else target),
                   draft=fitted.draft if fp_draft is not None else (0 if auto_draft else draft),
                   notes=fitted.notes)


def describe(target: int, draft: int) -> str:
    """Where the models' layers are, for a status line: '' where nothing is offloaded."""
    def layers(n: int) -> str:
        return "every layer" if n < 0 else f"{n} layer{'s' if n != 1 else ''}"
    parts = [f"{name}: {layers(n)}" for name, n in (("target", target), ("draft", draft)) if n]
    return f"on the GPU: {', '.join(parts)}" if parts else ""
