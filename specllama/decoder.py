"""The high-level API: a target (and optionally a draft) model, generate() and stream().

One call to generate() is one native call: drafting, verification, acceptance and rollback all
run in specllama._core with the GIL released. stream() runs the same call on a worker thread and
hands each verification step's text to the caller as it lands. A decoder placed on rpc-servers
runs each call through specllama.rpc_guard, which turns a broken connection into
RPCConnectionLost instead of a wait without end.
"""

from __future__ import annotations

import os
import queue
import threading
import warnings
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _core
from . import placement
from . import rpc_guard
from .adaptive_memory import AdaptiveMemory, identity as memory_identity
from .options import Completion, DSIStats, GenerateOptions, PromptTooLong, Stats, StepChunk, StepPrices
from .options import as_dict, make_options, type_error
from .rpc_guard import Guard, RPCConnectionLost, endpoints_of

__all__ = ["Completion", "DSIStats", "GenerateOptions", "PromptTooLong", "SpeculativeDecoder", "Stats", "StepChunk",
           "StepPrices", "as_dict", "make_options"]

Prompt = Union[str, Sequence[int]]
_T = TypeVar("_T")
_DEFAULTS = _core.DECODER_DEFAULTS  # the native decoder's defaults
# the KV cache formats' settings: the target's keys and values, then the draft's
CACHE_TYPE_SETTINGS = ("cache_type_k", "cache_type_v", "cache_type_k_draft", "cache_type_v_draft")


Devices = Union[str, Sequence[str], None]


class SpeculativeDecoder:
    """Speculative decoding with a target and a draft GGUF model. A draft with another vocabulary
    drafts the tokens both vocabularies share (token-level intersection; `cross_vocab` says how
    many); the output is the target's either way.

    With no model_path, the default pair is used (built once into the user's cache: see
    specllama.models). With a model_path and no draft_path, it decodes plainly on the target (prompt
    lookup drafts, where the generation's drafter allows); draft_path "auto": the best of the GGUF
    files on this machine that can draft for the target, or none (specllama.local_drafts; the
    draft_choice attribute says which and why). Either path can be a model's name in another
    tool instead (ollama's `qwen2.5-coder:1.5b`, a Hugging Face repository `USER/REPO[:QUANT]` in
    its cache or LM Studio's; specllama.local_models), and model_name keeps it (else the file's name).

    n_ctx: positions the KV caches hold; n_batch: tokens per llama_decode (>= n_draft + 1);
    n_threads / n_threads_draft: CPU threads (0 = the physical cores; -1 = tuned: each model whose
    layers are all on the CPU starts at the physical cores and now and then measures a decode at
    another count, fewer or all, and moves where that decodes faster, as where another process
    keeps a core busy; Stats say what was used. More threads than the machine's cores warn, as they
    make decoding much slower; n_threads_draft 0 follows n_threads); n_gpu_layers / n_gpu_layers_draft:
    layers to offload when llama-cpp-python was built with a GPU backend (-1 = all, 0 = none; a
    warning when the installed build has none). Default: all where the model's device is named;
    with no device named, as llama.cpp's programs, every layer on the local GPUs where the model,
    its cache and its buffers fit in their free memory with 1 GiB left on each, as many as fit
    otherwise (with a warning), the draft first; none without a GPU (specllama.placement;
    decoder.n_gpu_layers says what was chosen); n_draft: tokens drafted per step, at most
    (adaptive) or exactly, where a generation does not say.
    device / device_draft: where each model's offloaded layers go, named as list_devices() names
    them ("CUDA0", "CUDA0,CUDA1" or a list; an rpc-server's "HOST:PORT"; "none" or "cpu": no
    offload; None: every GPU, as llama.cpp). split_mode ("none", "layer", "row"), tensor_split
    (each device's share, e.g. [3, 1]) and main_gpu: how the target spans several devices, as
    llama.cpp's -sm, -ts and -mg. rpc: rpc-servers ("HOST:PORT,...") whose devices the target
    uses when device is not given (an unreachable one is a ValueError). dsi_devices: one device
    (or device list) per DSI target server beyond the first; each loads its own copy of the
    target there.
    share_prefill: when the draft is the target in another number format (same architecture and
    shapes), copy the prompt's keys and values from the target's cache into the draft's instead of
    processing the prompt with both models (see shares_prefill); the output is unchanged.
    swa_full: a sliding-window model (Gemma 2/3 style) keeps every position in its window layers'
    caches (True), or only the window (False: less memory; going back further than the window,
    as a new prompt that shares only part of the cached one does, needs a checkpoint there or
    processes the text again). The output is the same either way.
    checkpoint_memory: where a recurrent or hybrid model keeps the state it goes back to when drafts
    are rejected: "device" (a copy within the memory that holds the state: on a GPU, no transfer
    to the host and back), "host", or "auto" (device where the model is offloaded, host
    otherwise). The output is the same either way; Stats.checkpoint_memory says which was used.
    draft_catch_up: how the draft reads a step's new tokens (after a fully accepted step, its last
    draft and the target's token): "batch" (one decode), "tokens" (one decode each), or "auto"
    (tokens where the draft is on a GPU of this machine: there a decode shaped like the previous
    one replays its recorded CUDA graph, and a batch in between makes the next decodes run without
    it). draft_catch_up_mode says which; the output is the same either way.
    verify_shape: the target's verification batch: "exact" (the last token and the drafts),
    "padded" (one length in every step of a generation: the drafts, then copies of the last, whose
    rows nobody reads and whose cache cells are dropped; n_draft + 1 tokens at a fixed draft
    length, and in an adaptive generation one more than the draft length whose steps make the most
    tokens per ms at the prices measured so far, which no step then exceeds), or "auto" (padded
    where the target is on a GPU of this machine and samples there, so that every verification
    has one shape and replays its recorded CUDA graph; a recurrent, window-only or slot's cache is
    never padded). verify_shape_mode says which; the output is the same either way.
    settle_steps: how many steps at the start of a run of drafting steps (and of a run of plain
    steps) the adaptive draft length takes as transitions: their costs price neither, and a probe
    of a paused draft drafts that many steps more in a row, so that it is judged by a steady one.
    -1 (auto): 2 where either model is on a GPU of this machine (llama.cpp runs a decode of a new
    shape without its CUDA graph and records the graph at the next alike), 0 elsewhere. Above 0, a
    probe of a paused draft also begins with the draft reading what it sat out, and drafts only
    where what the draft foretold of it says drafting pays (Stats.n_probe_reads), unless
    probe_reads is False. The output's distribution is the same either way.
    cache_type_k / cache_type_v (cache_type_k_draft / cache_type_v_draft for the draft): the number
    format of the cached keys and values, as llama.cpp's -ctk / -ctv: "f16" (default), "f32",
    "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1". A quantized cache takes less memory
    (q8_0 about half of f16's) and changes the model's output a little, as it does in llama.cpp;
    speculation keeps the output the target's with that cache, the draft's formats affect only
    how many drafts are kept. flash_attn: "auto" (where the device has the kernels), "on", "off"
    (as llama.cpp's -fa); a quantized V cache needs it.
    adaptive_memory: True starts the adaptive draft length from what the last decoder of the same
    models, machine and settings learned (prices, acceptance, pauses), kept in a file in the user's
    state directory, and writes what this one learns back there (after a generation at most every
    30 s, and on close()); a path: that file instead; False (default): learn afresh, keep nothing.
    A new decoder's first generation otherwise spends steps learning (a one-shot command is all
    first generation). Which draft lengths are chosen changes, the output's distribution does not.
    specllama.adaptive_memory says what identifies a memory and where it lives; the
    adaptive_memory property says whether this decoder resumed one.
    """

    draft_choice: Optional[str] = None  # draft_path "auto": which draft was chosen and why, or that none was

    def __init__(
        self,
        model_path: Optional[Union[str, os.PathLike]] = None,
        draft_path: Optional[Union[str, os.PathLike]] = None,
        *,
        n_ctx: int = _DEFAULTS["n_ctx"],
        n_batch: int = _DEFAULTS["n_batch"],
        n_threads: int = _DEFAULTS["n_threads"],
        n_threads_draft: int = _DEFAULTS["n_threads_draft"],
        n_gpu_layers: Optional[int] = None,
        n_gpu_layers_draft: Optional[int] = None,
        n_draft: int = _DEFAULTS["n_draft"],
        share_prefill: bool = _DEFAULTS["share_prefill"],
        swa_full: bool = _DEFAULTS["swa_full"],
        checkpoint_memory: str = _DEFAULTS["checkpoint_memory"],
        draft_catch_up: str = _DEFAULTS["draft_catch_up"],
        verify_shape: str = _DEFAULTS["verify_shape"],
        settle_steps: int = _DEFAULTS["settle_steps"],
        probe_reads: bool = _DEFAULTS["probe_reads"],
        cache_type_k: str = _DEFAULTS["cache_type_k"],
        cache_type_v: str = _DEFAULTS["cache_type_v"],
        cache_type_k_draft: str = _DEFAULTS["cache_type_k_draft"],
        cache_type_v_draft: str = _DEFAULTS["cache_type_v_draft"],
        flash_attn: str = _DEFAULTS["flash_attn"],
        device: Devices = None,
        device_draft: Devices = None,
        split_mode: str = "layer",
        tensor_split: Optional[Sequence[float]] = None,
        main_gpu: int = 0,
        rpc: Devices = None,
        dsi_devices: Optional[Sequence[Devices]] = None,
        adaptive_memory: Union[bool, str, "os.PathLike[str]"] = False,
    ) -> None:
        given = model_path
        model_path, draft_path, self.draft_choice = _model_paths(model_path, draft_path)
        endpoints = endpoints_of(rpc, device, device_draft, dsi_devices)
        self._guard: Optional[Guard] = Guard(endpoints) if endpoints else None
        self._core: Optional[_core.Decoder] = None
        if rpc is not None:
            rpc_devices = self._call(lambda: _core.rpc_add_servers(rpc))
            if device is None:
                device = list(rpc_devices)
        # layers asked for in so many words; those that follow from a named device need no warning: on
        # a build without offload the only devices are the CPU (no layers) and names the core refuses
        asked = bool(n_gpu_layers) or (draft_path is not None and bool(n_gpu_layers_draft))
        cache_types = [cache_type_k, cache_type_v, cache_type_k_draft, cache_type_v_draft]
        for name, value in zip(CACHE_TYPE_SETTINGS, cache_types):  # (before the placement reads the sizes in them)
            if type(value) is not str:
                raise type_error(name, value, _DEFAULTS[name])
        _check_memory_arg(adaptive_memory)  # (before the models load)
        self._offload = placement.choose(model_path, draft_path, n_gpu_layers, n_gpu_layers_draft, device,
                                         device_draft, n_ctx, n_batch, cache_types=cache_types)
        n_gpu_layers, n_gpu_layers_draft = self._offload.target, self._offload.draft
        if asked and not _core.supports_gpu_offload():
            warnings.warn("n_gpu_layers has no effect: the installed llama-cpp-python was built without GPU "
                          "offload (docs/gpu.md says how to install a GPU build)", RuntimeWarning, stacklevel=2)
        _warn_threads(n_threads=n_threads, n_threads_draft=n_threads_draft)
        self._lock = threading.RLock()
        self.model_path = os.fspath(model_path)
        self.draft_path = os.fspath(draft_path) if draft_path is not None else None
        self.model_name = given if isinstance(given, str) and given != self.model_path else os.path.basename(
            self.model_path)
        settings = dict(n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads, n_threads_draft=n_threads_draft,
                        n_gpu_layers=n_gpu_layers, n_gpu_layers_draft=n_gpu_layers_draft, n_draft=n_draft,
                        share_prefill=bool(share_prefill), swa_full=bool(swa_full), checkpoint_memory=checkpoint_memory,
                        draft_catch_up=draft_catch_up, verify_shape=verify_shape, settle_steps=settle_steps,
                        probe_reads=probe_reads, flash_attn=flash_attn)
        for name, value in settings.items():
            if type(value) is not type(_DEFAULTS[name]):
                raise type_error(name, value, _DEFAULTS[name])
        tensor_split = _placement_args(split_mode, tensor_split, main_gpu, dsi_devices, draft_path, device_draft)
        placed = dict(device=device, device_draft=device_draft, split_mode=split_mode, tensor_split=tensor_split,
                      main_gpu=main_gpu, dsi_devices=list(dsi_devices or []))
        self._core = self._call(lambda: _core.Decoder(self.model_path, self.draft_path, **settings,
                                                      cache_types=cache_types, **placed))
        if self._guard is not None:
            self._guard.cover(self._core)
        self._memory = self._open_memory(adaptive_memory, dict(settings, cache_types=cache_types, **placed))

    def _open_memory(self, adaptive_memory, settings: dict) -> Optional[AdaptiveMemory]:
        """The adaptive memory asked for (True: the state directory's file for this identity; a
        path; False: none), resumed into the native decoder where it holds a state."""
        if adaptive_memory is False:
            return None
        ident = memory_identity(self.model_path, self.draft_path, {**settings, "slots": 1})
        memory = AdaptiveMemory(None if adaptive_memory is True else adaptive_memory, ident)
        memory.load_into(self._native())
        return memory

    def _call(self, fn: Callable[[], "_T"], cancel: Optional[threading.Event] = None) -> "_T":
        """fn(), through the rpc guard where this decoder is on rpc-servers."""
        return fn() if self._guard is None else self._guard.call(fn, cancel)

    @property
    def n_gpu_layers(self) -> int:
        """The target's layers offloaded to GPUs as llama.cpp was asked to (-1: all, 0: none), given
        or chosen to fit their free memory (specllama.placement)."""
        return self._offload.target

    @property
    def n_gpu_layers_draft(self) -> int:
        """The draft's layers offloaded, as n_gpu_layers (0 without a draft model)."""
        return self._offload.draft

    @property
    def lost(self) -> Optional[str]:
        """Why this decoder cannot run any more (a connection to an rpc-server it is placed on
        broke: RPCConnectionLost), or None."""
        return None if self._guard is None else self._guard.lost

    def slots(self, n: int, n_ctx: Optional[int] = None, *, max_wait_ms: float = 100.0) -> List["SpeculativeDecoder"]:
        """n decoders for serving several users at once: the same models (not loaded again), and
        KV caches of n_ctx positions each (default: this decoder's) held as sequences of one
        llama.cpp context per model. One native thread runs every decode of the slots and merges
        those sent at the same time, so slots generating in parallel threads verify their drafts
        in one llama_decode and draft in one (docs/server.md measures what that gains). A decode is held
        up to max_wait_ms for slots still busy between decodes. This decoder keeps its own caches;
        close() it when only the slots are used (the models stay loaded while a slot is open).
        With an adaptive memory, the slots share one of their own (a slot's decodes cost otherwise:
        they merge with the other slots'), each starting from it and writing to it."""
        if type(n) is not int or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        if n_ctx is not None and (type(n_ctx) is not int or n_ctx < 1):
            raise ValueError(f"n_ctx must be a positive int, got {n_ctx!r}")
        if isinstance(max_wait_ms, bool) or not isinstance(max_wait_ms, (int, float)) or not 0 <= max_wait_ms <= 60_000:
            raise ValueError(f"max_wait_ms must be a number of milliseconds in [0, 60000], got {max_wait_ms!r}")
        out = []
        native_parent = self._native()
        for native in self._call(lambda: native_parent.slots(n, n_ctx or 0, int(round(max_wait_ms * 1000)))):
            slot = object.__new__(SpeculativeDecoder)
            slot._lock = threading.RLock()
            slot.model_path, slot.draft_path, slot.model_name = self.model_path, self.draft_path, self.model_name
            slot.draft_choice = self.draft_choice
            slot._core = native
            slot._guard = self._guard
            slot._offload = self._offload
            slot._memory = self._memory.for_slots(n) if self._memory is not None else None
            if slot._memory is not None:
                slot._memory.load_into(native)
            if self._guard is not None:
                self._guard.cover(native)
            out.append(slot)
        return out

    def sibling(self, **settings: Any) -> "SpeculativeDecoder":
        """Another decoder on this one's models (not loaded again): KV caches and an adaptive draft
        length of its own, this decoder's settings where settings do not name others (n_ctx,
        n_batch, n_threads, n_threads_draft, n_draft, share_prefill, swa_full, checkpoint_memory,
        draft_catch_up, verify_shape, settle_steps, probe_reads; the models' placement is theirs). It costs the
        memory of its caches, not of the weights, and generates independently of this one (from
        another thread too). The models stay loaded while either is open. The native core checks
        each setting (TypeError for an unknown name or a wrong type, ValueError for a bad value)."""
        _warn_threads(**{k: v for k, v in settings.items() if k in ("n_threads", "n_threads_draft")})
        native_parent = self._native()
        sib = object.__new__(SpeculativeDecoder)
        sib._lock = threading.RLock()
        sib.model_path, sib.draft_path, sib.model_name = self.model_path, self.draft_path, self.model_name
        sib.draft_choice = self.draft_choice
        sib._guard = self._guard
        sib._offload = self._offload
        sib._memory = None  # (its settings may differ: it learns afresh)
        sib._core = self._call(lambda: native_parent.sibling(**settings))
        if self._guard is not None:
            self._guard.cover(sib._core)
        return sib

    @property
    def adaptive_memory(self) -> Optional[AdaptiveMemory]:
        """The memory this decoder's adaptive draft length started from and writes back to (its
        path; resumed: whether it started from a state there; note: why not), or None where the
        decoder was made without one (adaptive_memory=False)."""
        return self._memory

    def save_adaptive_memory(self) -> bool:
        """Write what the adaptive draft length learned to the adaptive memory now (close() does,
        and a generation at most every 30 s). False where there is nothing to write: no memory, no
        generation since the last write, or one priced by given StepPrices; on rpc-servers, a
        connection that broke (the decoder cannot run: lost)."""
        native, memory = self._native(), self._memory
        if memory is None:
            return False

        def save() -> bool:
            with self._lock:
                return memory.save(native)

        try:
            return self._call(save)  # (through the rpc guard: a generation stuck on a dead connection holds the lock)
        except RPCConnectionLost:
            return False

    def _learned(self, native: _core.Decoder, opts: GenerateOptions) -> None:
        """After a generation: its adaptive memory written, where it is due."""
        if self._memory is not None:
            self._memory.generated(native, priced=opts.prices is not None)

    @property
    def slot_batching(self) -> Optional[dict]:
        """For one of slots()'s decoders: llama_decode calls its group has made ("decodes") and the
        slots' decodes merged into them ("chunks"); None otherwise."""
        core = self._native()
        if not core.is_slot:
            return None
        return {"decodes": core.slot_decodes, "chunks": core.slot_chunks}

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Free both models and their caches (waits for a running generation to finish); with an
        adaptive memory, write what was learned since its last write first."""
        def free() -> None:
            with self._lock:
                if self._core is not None and self._memory is not None:
                    self._memory.save(self._core)
                self._core = None

        try:
            self._call(free)
        except RPCConnectionLost:
            self._core = None  # the guard keeps the native objects for ever

    def __enter__(self) -> "SpeculativeDecoder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._core is None

    def _native(self) -> _core.Decoder:
        if self._core is None:
            raise RuntimeError("this SpeculativeDecoder is closed")
        return self._core

    # -- models and text ---------------------------------------------------------------------

    @property
    def has_draft(self) -> bool:
        return self._native().has_draft

    @property
    def n_ctx(self) -> int:
        return self._native().n_ctx

    @property
    def n_draft(self) -> int:
        """Tokens drafted per step where a generation does not say."""
        return self._native().n_draft

    @property
    def shares_prefill(self) -> bool:
        """Whether the draft takes the prompt's keys and values from the target (share_prefill, and
        the draft has the target's architecture, shapes and parameter count)."""
        return self._native().shares_prefill

    @property
    def draft_catch_up_mode(self) -> str:
        """How the draft reads a step's new tokens, draft_catch_up resolved: "batch" or "tokens"
        ("" without a draft model)."""
        return self._native().draft_catch_up

    @property
    def verify_shape_mode(self) -> str:
        """The target's verification batch, verify_shape resolved: "exact", "padded", or "auto"
        (padded in generations whose target samples on its device)."""
        return self._native().verify_shape

    @property
    def settle_steps_mode(self) -> int:
        """settle_steps resolved: the steps of a run that the adaptive draft length takes as
        transitions (2 where either model is on a GPU of this machine, unless set)."""
        return self._native().settle_steps

    @property
    def probe_reads(self) -> bool:
        """Whether a paused draft's probes begin with a read of what it sat out where settle_steps_mode
        is above 0 (docs/how-it-works.md, "Probes that read first")."""
        return self._native().probe_reads

    @property
    def cross_vocab(self) -> Optional[dict]:
        """None when the draft shares the target's vocabulary; else how the two pair:
        {"n_shared", "draft_share", "target_share"} (tokens both have, by text)."""
        return self._native().cross_vocab

    @property
    def target_model(self) -> _core.Model:
        return self._native().target_model

    @property
    def draft_model(self) -> Optional[_core.Model]:
        return self._native().draft_model

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> List[int]:
        """Token ids of text; special tokens written in the text ("<|im_end|>") become tokens."""
        return self.target_model.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.target_model.detokenize(list(tokens))

    def apply_chat_template(self, messages: Sequence[dict], add_generation_prompt: bool = True,
                            template: Optional[str] = None, **variables) -> str:
        """Render [{"role": ..., "content": ...}] as a prompt. template: None (the target's own
        chat template, the GGUF's Jinja program), a built-in template name of llama.cpp
        (specllama.chat_templates()), or a path to a Jinja template file. Jinja templates run in a
        sandbox and also see variables (tools=..., documents=...). A template that fails raises
        specllama.ChatTemplateError (a ValueError)."""
        from .templates import render

        return render(self.target_model, messages, add_generation_prompt, template, **variables)

    def chat_tokens(self, messages: Sequence[dict], add_generation_prompt: bool = True,
                    template: Optional[str] = None, **variables) -> List[int]:
        """The prompt tokens of a conversation: apply_chat_template's text, tokenized with its
        special tokens and with the BOS token once where the model takes one (the tokens
        llama-server and llama-cpp-python build for the same messages)."""
        return self._chat_prompt(messages, add_generation_prompt, template, **variables)[1]

    def _chat_prompt(self, messages: Sequence[dict], add_generation_prompt: bool = True,
                     template: Optional[str] = None, **variables) -> Tuple[str, List[int]]:
        """A conversation's rendered prompt (apply_chat_template) and its tokens (chat_tokens)."""
        from .templates import prompt_text

        text = self.apply_chat_template(messages, add_generation_prompt, template, **variables)
        return text, self._tokenize_prompt(prompt_text(self.target_model, text), True, "the conversation")

    def cached_tokens(self) -> List[int]:
        """Tokens in the target's KV cache; a prompt that starts with them skips their prefill."""
        return self._native().cached_tokens()

    def reset(self) -> None:
        """Empty both KV caches."""
        native = self._native()

        def reset() -> None:
            with self._lock:
                native.reset()

        self._call(reset)

    def warm_up(self) -> None:
        """Decode once, and roll back, each shape a generation's steps use (a verification of
        n_draft + 1 tokens and of one, the draft's one-token decode and, where it catches up in one
        batch, its two-token catch-up), so that first uses (kernels loaded, buffers grown: on a GPU)
        are not priced by the adaptive rule as the cost of a step; then price the target's steps for
        the rule (a verification of the first batch and two plain steps, each decoded three times in
        a row and the last timed), so that a new decoder's first generation spends no steps on
        pricing them. Done on creation where a model is on a GPU of this machine; the caches keep
        what they hold."""
        native = self._native()

        def warm_up() -> None:
            with self._lock:
                native.warm_up()

        self._call(warm_up)

    # -- generation --------------------------------------------------------------------------

    def _prompt_tokens(self, prompt: Prompt) -> List[int]:
        if isinstance(prompt, str):
            return self._tokenize_prompt(prompt, True, "the prompt")
        if isinstance(prompt, (bytes, bytearray)):
            raise TypeError("prompt must be str or a sequence of token ids, not bytes (decode it first, e.g. "
                            "prompt.decode('utf-8'))")
        return [int(t) for t in prompt]

    def _tokenize_prompt(self, text: str, add_special: bool, what: str) -> List[int]:
        """Tokens of a prompt's text, refused (ValueError) when it cannot fit in the context; a
        text far too long costs only the tokenizing of a bounded prefix."""
        _core.check_text(text, what)
        n_ctx = self.n_ctx
        try:
            return self.target_model.tokenize(text, add_special, True, max_tokens=n_ctx - 1)
        except _core.TextTooLong as exc:
            count = f"{exc.n_tokens_at_least}" if exc.exact else f"at least {exc.n_tokens_at_least}"
            raise PromptTooLong(f"{what} has {count} tokens but the context holds {n_ctx} "
                                f"(room is needed for at least one more); shorten the prompt or raise n_ctx") from None

    def options(self, options: Optional[GenerateOptions] = None, **fields) -> GenerateOptions:
        """The GenerateOptions a generation with these arguments runs (make_options), checked
        against this decoder too (a drafter it cannot run, say). A prediction given as text is
        tokenized here, as plain text (no BOS, special tokens not parsed)."""
        if isinstance(fields.get("prediction"), str):
            fields["prediction"] = self.tokenize(fields["prediction"], add_special=False, parse_special=False)
        opts = make_options(options, **fields)
        self._native().validate(opts)
        if opts.mode == "dsi":
            _warn_threads(threads_draft=opts.threads_draft, threads_server=opts.threads_server)
        return opts

    def drafter_name(self, options: Optional[GenerateOptions] = None, **fields) -> str:
        """Who drafts in a generation with these options: "model", "lookup", "model+lookup" or
        "none" (plain decoding); what drafter="auto" resolves to."""
        return self._native().drafter_name(self.options(options, **fields))

    def generate(self, prompt: Prompt, options: Optional[GenerateOptions] = None, *,
                 on_step: Optional[Callable[[List[int], str, int, int], Optional[bool]]] = None,
                 **fields) -> Completion:
        """Generate a completion of prompt (text or token ids).

        The generation's settings are GenerateOptions fields, given as keywords or as an options
        object (keywords override it): max_tokens, temperature, top_k, top_p, min_p, seed, stop,
        ignore_eos, n_draft, speculative, adaptive, drafter, acceptance, prediction (text or token
        ids the output is expected to repeat much of), prices, and for
        mode="dsi" sp, lookahead, threads_draft, threads_server, overlap, wait_for_drafts.
        help(specllama.GenerateOptions) and docs/python-api.md describe each with its default.

        temperature 0 is greedy; otherwise top-k, top-p and min-p (as in llama.cpp) shape the
        distribution both models sample from, and the rejection rule keeps the output exactly
        the target's. on_step(tokens, text, n_drafted, n_accepted) runs after each verification
        step (with logprobs set, a fifth argument: the step's TokenLogprob entries); returning True stops early (finish_reason "cancelled"); calls that wait for a running
        generation (reset, cached_tokens, slots, generate) raise RuntimeError inside it. Ctrl-C
        raises KeyboardInterrupt within one step; the decoder stays usable.
        """
        tokens = self._prompt_tokens(prompt)
        opts = self.options(options, **fields)
        native = self._native()
        if self._guard is None:
            with self._lock:
                out = native.generate(tokens, opts, _wrap_on_step(on_step))
                self._learned(native, opts)
                return out
        cancel = threading.Event()  # Ctrl-C, seen by the caller's thread: the generation stops at its next step
        wrapped = _wrap_on_step(on_step)

        def step(tokens_, text, n_drafted, n_accepted):
            return (wrapped is not None and wrapped(tokens_, text, n_drafted, n_accepted)) or cancel.is_set()

        def run() -> Completion:
            with self._lock:
                out = native.generate(tokens, opts, step)
                self._learned(native, opts)
                return out

        return self._guard.call(run, cancel)

    def stream(self, prompt: Prompt, options: Optional[GenerateOptions] = None, **fields) -> Iterator[StepChunk]:
        """Like generate(), yielding each verification step's text as it lands; the last chunk
        carries finish_reason and stats. Closing the iterator (or Ctrl-C) stops the generation
        within one step. Bad options raise here, before anything runs."""
        tokens = self._prompt_tokens(prompt)
        opts = self.options(options, **fields)
        if self._guard is not None:
            self._guard.check()
        return self._stream(self._native(), tokens, opts)

    # OpenAI-shaped completions under llama-cpp-python's method names; specllama.completions defines
    # them (the OpenAI layer depends on the decoder, not the other way round)
    create_chat_completion: Callable[..., Any]
    create_completion: Callable[..., Any]

    def _stream(self, native: _core.Decoder, tokens: List[int], opts: GenerateOptions) -> Iterator[StepChunk]:
        chunks: "queue.Queue" = queue.Queue()
        stop_flag = threading.Event()
        done = object()

        def on_step(step_tokens, text, n_drafted, n_accepted, logprobs=None):
            chunks.put(StepChunk(text, list(step_tokens), n_drafted, n_accepted, logprobs=logprobs))
            return stop_flag.is_set()

        def worker():
            try:
                with self._lock:
                    chunks.put(native.generate(tokens, opts, on_step))
                    self._learned(native, opts)  # (after the last chunk is out: a write does not delay it)
            except BaseException as exc:  # re-raised in the consumer
                chunks.put(exc)
            finally:
                chunks.put(done)

        guard = self._guard
        seen = _core.rpc_failures()
        thread = threading.Thread(target=worker, name="specllama-stream", daemon=True)
        thread.start()
        try:
            while True:
                if guard is None:
                    item = chunks.get()
                else:
                    try:
                        item = chunks.get(timeout=rpc_guard.POLL_S)
                    except queue.Empty:
                        if guard.broken_since(seen) and thread.is_alive():
                            guard.lose()
                            raise RPCConnectionLost(guard.lost) from None
                        continue
                if item is done:
                    if guard is not None and guard.broken_since(seen):
                        guard.lose()  # the generation ended, but a thread of this decoder may wait on a broken connection
                    break
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, Completion):
                    yield StepChunk("", [], finish_reason=item.finish_reason, context_full=item.context_full,
                                    stats=item.stats, dsi=item.dsi)
                else:
                    yield item
        finally:
            stop_flag.set()
            if guard is None:
                thread.join()
            elif guard.lost is None:
                guard.join(thread, seen)


def _model_paths(model_path, draft_path) -> Tuple[Any, Any, Optional[str]]:
    """(target, draft, what draft "auto" chose): the default pair where no target is named."""
    if model_path is None:
        if draft_path is not None:
            raise ValueError("draft_path needs a model_path (the target) as well")
        from .models import default_pair

        return (*default_pair(), None)
    from .local_models import resolve_model

    model_path = resolve_model(model_path)
    if isinstance(draft_path, str) and draft_path == "auto":
        from .local_drafts import choose_draft

        return (model_path, *choose_draft(model_path))
    return model_path, None if draft_path is None else resolve_model(draft_path), None


def _placement_args(split_mode, tensor_split, main_gpu, dsi_devices, draft_path, device_draft) -> Optional[List[float]]:
    """The multi-device arguments checked; tensor_split as a list of floats (a string "3,1" or "3/1" too)."""
    if type(split_mode) is not str or split_mode not in ("none", "layer", "row"):
        raise ValueError(f"split_mode must be 'none', 'layer' or 'row', got {split_mode!r}")
    if type(main_gpu) is not int or main_gpu < 0:
        raise ValueError(f"main_gpu must be an int >= 0, got {main_gpu!r}")
    if tensor_split is not None:
        if isinstance(tensor_split, str):
            tensor_split = tensor_split.replace("/", ",").split(",")
        tensor_split = [float(x) for x in tensor_split]
    if dsi_devices is not None and (isinstance(dsi_devices, str) or not isinstance(dsi_devices, Sequence)):
        raise TypeError("dsi_devices must be a list with one device (or device list) per DSI server beyond "
                        f"the first, got {dsi_devices!r}")
    if draft_path is None and device_draft is not None:
        raise ValueError("device_draft needs a draft model")
    return tensor_split


def _check_memory_arg(adaptive_memory) -> None:
    if not isinstance(adaptive_memory, (bool, str, os.PathLike)):
        raise TypeError(f"adaptive_memory must be True, False or a file's path, got {adaptive_memory!r}")


def _warn_threads(**counts) -> None:
    """Warn where a thread count exceeds the cores this process may run on: llama.cpp's threads
    then wait on each other and decoding slows down many times over."""
    physical, logical = _core.cpu_cores()
    for name, n in counts.items():
        if isinstance(n, int) and not isinstance(n, bool) and n > logical:
            warnings.warn(f"{name}={n} is more than the {logical} cores this process may run on; decoding will be "
                          f"much slower (the default, 0, uses the {physical} physical cores)", RuntimeWarning,
                          stacklevel=3)


def _wrap_on_step(on_step):
    if on_step is None:
        return None

    def call(tokens, text, n_drafted, n_accepted, *logprobs):  # the step's TokenLogprobs, with options.logprobs
        return bool(on_step(list(tokens), text, n_drafted, n_accepted, *logprobs))

    return call
