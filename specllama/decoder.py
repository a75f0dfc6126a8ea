"""The high-level API: a target (and optionally a draft) model, generate() and stream().

One call to generate() is one native call: drafting, verification, acceptance and rollback all
run in specllama._core with the GIL released. stream() runs the same call on a worker thread and
hands each verification step's text to the caller as it lands.
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional, Sequence, Union

from . import _core

Prompt = Union[str, Sequence[int]]
DRAFTERS = ("auto", "model", "lookup", "model+lookup")  # generate(drafter=...)


def resolve_drafter(drafter: str, has_draft: bool, mode: str = "si") -> str:
    """The drafter generate(drafter=...) runs: "auto" is model+lookup with a draft model, the model
    alone in DSI, and "model" (that is, plain decoding) without a draft model."""
    if drafter not in DRAFTERS:
        raise ValueError(f"drafter must be one of {', '.join(map(repr, DRAFTERS))}, got {drafter!r}")
    if drafter == "auto":
        return "model" if mode == "dsi" or not has_draft else "model+lookup"
    return drafter


@dataclass(frozen=True)
class Stats:
    """What one generation did, and where its time went."""

    n_prompt: int  # prompt tokens
    n_prompt_cached: int  # of which were reused from the cache (earlier turns)
    n_prompt_shared: int  # prompt tokens the draft took from the target's cache instead of processing
    n_generated: int  # tokens emitted
    n_steps: int  # target verification passes
    n_drafted: int  # tokens proposed by the draft
    n_accepted: int  # of which the target kept
    n_lookup_drafted: int  # of the drafted tokens, those prompt lookup proposed
    n_lookup_accepted: int  # of which the target kept
    n_paused_steps: int  # steps the adaptive rule took without the draft model (it did not pay there)
    accepted_hist: List[int]  # accepted_hist[k]: steps that kept k drafted tokens
    acceptance_rate: float  # n_accepted / n_drafted
    t_prefill_ms: float  # prompt processing (both models, or the target and the copy to the draft)
    t_draft_ms: float  # draft model decodes and sampling
    t_verify_ms: float  # target model decodes
    t_accept_ms: float  # target sampling and the acceptance rule
    t_total_ms: float
    tokens_per_second: float  # n_generated over the time after prefill

    @property
    def t_other_ms(self) -> float:
        """Time in the loop outside the model calls and acceptance."""
        return self.t_total_ms - self.t_prefill_ms - self.t_draft_ms - self.t_verify_ms - self.t_accept_ms

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per verification step (accepted drafts + the target's own token)."""
        return self.n_generated / self.n_steps if self.n_steps else 0.0

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["t_other_ms"] = self.t_other_ms
        d["mean_accepted_length"] = self.mean_accepted_length
        return d


@dataclass(frozen=True)
class DSIStats:
    """What the DSI orchestrator did (mode="dsi"): tasks, drafts, and where time went. Server
    times are summed over servers, so they can exceed the wall time."""

    sp: int  # target servers
    lookahead: int  # drafted tokens per verification task
    n_threads_draft: int
    n_threads_server: int  # per server
    overlap: bool  # False: SI on the same code path
    n_tasks: int  # verification tasks sent to servers
    n_tasks_cancelled: int  # of which were cancelled or built on a rejected draft
    n_drafted: int  # tokens the drafter proposed, cancelled ones included
    n_checked: int  # drafts the target judged
    n_accepted: int  # of which were kept
    n_target_only: int  # tokens emitted from the target with no draft beside them
    t_total_ms: float
    t_draft_ms: float  # the drafter computing
    t_draft_idle_ms: float  # the drafter waiting for verification
    t_verify_ms: float  # servers computing
    t_verify_wasted_ms: float  # of which on cancelled tasks
    t_verify_hidden_ms: float  # used verification time the drafter did not wait for
    verify_hidden_share: float  # t_verify_hidden_ms over the used verification time


@dataclass(frozen=True)
class Completion:
    """The result of generate()."""

    text: str
    tokens: List[int]
    finish_reason: str  # "stop" (end token or stop string), "length" (max_tokens or context full), "cancelled"
    context_full: bool  # True when "length" came from the context having no room left
    stats: Stats
    dsi: Optional[DSIStats] = None  # mode="dsi" only


@dataclass(frozen=True)
class StepChunk:
    """What stream() yields: one verification step's new text; the last chunk has no text and
    carries finish_reason and stats."""

    text: str
    tokens: List[int]
    n_drafted: int = 0
    n_accepted: int = 0
    finish_reason: Optional[str] = None
    context_full: bool = False
    stats: Optional[Stats] = field(default=None, repr=False)
    dsi: Optional[DSIStats] = field(default=None, repr=False)


def _completion(raw: dict) -> Completion:
    return Completion(
        text=raw["text"],
        tokens=list(raw["tokens"]),
        finish_reason=raw["finish_reason"],
        context_full=raw["context_full"],
        stats=Stats(**raw["stats"]),
        dsi=DSIStats(**raw["dsi"]) if "dsi" in raw else None,
    )


class SpeculativeDecoder:
    """Speculative decoding with a target and a draft GGUF model that share a vocabulary.

    With no model_path, the default pair is used (built once into the user's cache: see
    specllama.models). With a model_path and no draft_path, it decodes plainly on the target.

    n_ctx: positions the KV caches hold; n_batch: tokens per llama_decode (>= n_draft + 1);
    n_threads / n_threads_draft: CPU threads (0 = all); n_gpu_layers / n_gpu_layers_draft:
    layers to offload when llama-cpp-python was built with a GPU backend (-1 = all);
    n_draft: tokens drafted per step, at most (adaptive) or exactly (generate() can override it).
    share_prefill: when the draft is the target in another number format (same architecture and
    shapes), copy the prompt's keys and values from the target's cache into the draft's instead of
    processing the prompt with both models (see shares_prefill); the output is unchanged.
    """

    def __init__(
        self,
        model_path: Optional[Union[str, os.PathLike]] = None,
        draft_path: Optional[Union[str, os.PathLike]] = None,
        *,
        n_ctx: int = 4096,
        n_batch: int = 512,
        n_threads: int = 0,
        n_threads_draft: int = 0,
        n_gpu_layers: int = 0,
        n_gpu_layers_draft: int = 0,
        n_draft: int = 10,
        share_prefill: bool = True,
    ) -> None:
        if model_path is None:
            if draft_path is not None:
                raise ValueError("draft_path needs a model_path (the target) as well")
            from .models import default_pair

            model_path, draft_path = default_pair()
        _check_int("n_draft", n_draft, 1, _core.MAX_DRAFT)
        _check_int("n_ctx", n_ctx, 0, None)
        _check_int("n_batch", n_batch, n_draft + 1, None)
        self._lock = threading.RLock()
        self.n_draft = n_draft
        self.model_path = os.fspath(model_path)
        self.draft_path = os.fspath(draft_path) if draft_path is not None else None
        self._core: Optional[_core.Decoder] = _core.Decoder(
            self.model_path,
            self.draft_path,
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_threads=n_threads,
            n_threads_draft=n_threads_draft,
            n_gpu_layers=n_gpu_layers,
            n_gpu_layers_draft=n_gpu_layers_draft,
            share_prefill=bool(share_prefill),
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Free both models and their caches (waits for a running generation to finish)."""
        with self._lock:
            self._core = None

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
    def shares_prefill(self) -> bool:
        """Whether the draft takes the prompt's keys and values from the target (share_prefill, and
        the draft has the target's architecture, shapes and parameter count)."""
        return self._native().shares_prefill

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

    def apply_chat_template(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        """Render [{"role": ..., "content": ...}] with the target's own chat template."""
        tmpl = self.target_model.chat_template
        if not tmpl:
            raise ValueError(f"{self.model_path} has no chat template")
        pairs = [(str(m["role"]), str(m["content"])) for m in messages]
        return _core.chat_apply_template(tmpl, pairs, add_generation_prompt)

    def cached_tokens(self) -> List[int]:
        """Tokens in the target's KV cache; a prompt that starts with them skips their prefill."""
        return self._native().cached_tokens()

    def reset(self) -> None:
        """Empty both KV caches."""
        with self._lock:
            self._native().reset()

    # -- generation --------------------------------------------------------------------------

    def _prompt_tokens(self, prompt: Prompt) -> List[int]:
        if isinstance(prompt, str):
            return self.tokenize(prompt)
        if isinstance(prompt, (bytes, bytearray)):
            raise TypeError("prompt must be str or a sequence of token ids, not bytes")
        return [int(t) for t in prompt]

    def generate(
        self,
        prompt: Prompt,
        max_tokens: int = 256,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        seed: Optional[int] = None,
        stop: Union[None, str, Sequence[str]] = None,
        *,
        n_draft: Optional[int] = None,
        speculative: bool = True,
        adaptive: Optional[bool] = None,
        drafter: str = "auto",
        acceptance: str = "rejection",
        ignore_eos: bool = False,
        mode: str = "si",
        sp: int = 1,
        lookahead: int = 4,
        threads_draft: int = 0,
        threads_server: int = 0,
        on_step: Optional[Callable[[List[int], str, int, int], Optional[bool]]] = None,
    ) -> Completion:
        """Generate a completion of prompt (text or token ids).

        temperature 0 is greedy; otherwise top-k, top-p and min-p (as in llama.cpp) shape the
        distribution both models sample from, and the rejection rule keeps the output exactly
        the target's. seed makes a run reproducible. speculative=False decodes plainly on the
        target through the same loop. adaptive=True lets each step draft as many tokens, up to
        n_draft, as the measured costs and the draft's confidence say pay; adaptive=False always
        drafts n_draft. The default (None) is adaptive unless temperature > 0 and a seed is
        given: adaptive lengths follow measured timings, which would make seeded sampling
        irreproducible (the output distribution is the target's either way). drafter: "model"
        (the draft model), "lookup" (prompt lookup: drafts copied from earlier in the context; no
        draft model needed), "model+lookup" (lookup fills in where the draft model stops short)
        or "auto" (the default: model+lookup when the decoder has a draft model, plain decoding
        when it has none; the draft model alone in DSI mode). acceptance: "rejection" (the papers' rule, the default) or "match" (llama.cpp's
        sample-and-match; for comparison: also exact, but keeps fewer drafts at temperature > 0).

        mode="dsi": Distributed Speculative Inference (Timor et al.): the draft model drafts in a
        thread of its own without waiting for verification; every `lookahead` drafted tokens go
        to one of `sp` target servers (contexts on the shared target model); a rejection cancels
        what was built on it. Lossless as speculative decoding is (greedy: the target's own
        output; sampling: the rejection rule, position by position). threads_draft and
        threads_server (per server) split the decoder's n_threads when 0. n_draft, adaptive,
        drafter and acceptance do not apply. completion.dsi says what it did. With a seed at
        temperature > 0, DSI is not reproducible run to run: whether a position had a draft
        beside it depends on timing (the output distribution is the target's either way).

        on_step(tokens, text, n_drafted, n_accepted) runs after each verification step;
        returning True stops early (finish_reason "cancelled"). Ctrl-C raises KeyboardInterrupt
        within one step; the decoder stays usable.
        """
        tokens = self._prompt_tokens(prompt)
        kwargs = self._native_kwargs(max_tokens, temperature, top_k, top_p, min_p, seed, stop, n_draft,
                                     speculative, adaptive, drafter, acceptance, ignore_eos,
                                     mode, sp, lookahead, threads_draft, threads_server)
        with self._lock:
            raw = _call(self._native(), tokens, _wrap_on_step(on_step), kwargs)
        return _completion(raw)

    def stream(
        self,
        prompt: Prompt,
        max_tokens: int = 256,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        seed: Optional[int] = None,
        stop: Union[None, str, Sequence[str]] = None,
        *,
        n_draft: Optional[int] = None,
        speculative: bool = True,
        adaptive: Optional[bool] = None,
        drafter: str = "auto",
        acceptance: str = "rejection",
        ignore_eos: bool = False,
        mode: str = "si",
        sp: int = 1,
        lookahead: int = 4,
        threads_draft: int = 0,
        threads_server: int = 0,
    ) -> Iterator[StepChunk]:
        """Like generate(), yielding each verification step's text as it lands; the last chunk
        carries finish_reason and stats. Closing the iterator (or Ctrl-C) stops the generation
        within one step."""
        tokens = self._prompt_tokens(prompt)
        kwargs = self._native_kwargs(max_tokens, temperature, top_k, top_p, min_p, seed, stop, n_draft,
                                     speculative, adaptive, drafter, acceptance, ignore_eos,
                                     mode, sp, lookahead, threads_draft, threads_server)
        native = self._native()
        return self._stream(native, tokens, kwargs)

    def _stream(self, native: _core.Decoder, tokens: List[int], kwargs: dict) -> Iterator[StepChunk]:
        chunks: "queue.Queue" = queue.Queue()
        stop_flag = threading.Event()
        done = object()

        def on_step(step_tokens, text, n_drafted, n_accepted):
            chunks.put(StepChunk(text, list(step_tokens), n_drafted, n_accepted))
            return stop_flag.is_set()

        def worker():
            try:
                with self._lock:
                    chunks.put(_completion(_call(native, tokens, on_step, kwargs)))
            except BaseException as exc:  # re-raised in the consumer
                chunks.put(exc)
            finally:
                chunks.put(done)

        thread = threading.Thread(target=worker, name="specllama-stream", daemon=True)
        thread.start()
        try:
            while True:
                item = chunks.get()
                if item is done:
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
            thread.join()

    def _native_kwargs(self, max_tokens, temperature, top_k, top_p, min_p, seed, stop, n_draft, speculative,
                       adaptive, drafter, acceptance, ignore_eos, mode="si", sp=1, lookahead=4, threads_draft=0,
                       threads_server=0) -> dict:
        n_draft = self.n_draft if n_draft is None else n_draft
        if mode not in ("si", "dsi"):
            raise ValueError(f"mode must be 'si' or 'dsi', got {mode!r}")
        _check_int("max_tokens", max_tokens, 1, None)
        _check_int("n_draft", n_draft, 1, _core.MAX_DRAFT)
        _check_int("top_k", top_k, 0, None)
        if seed is not None:
            _check_int("seed", seed, 0, 2**64 - 1)
        drafter = resolve_drafter(drafter, self.has_draft, mode)
        if drafter == "model+lookup" and not self.has_draft:
            raise ValueError("the model+lookup drafter needs a draft model; use drafter='lookup' alone")
        if isinstance(stop, str):
            stop = [stop]
        stop = [s for s in (stop or []) if s]
        if not all(isinstance(s, str) for s in stop):
            raise TypeError("stop must be a string or a sequence of strings")
        kw = dict(
            max_tokens=max_tokens,
            n_draft=n_draft,
            temperature=float(temperature),
            top_k=top_k,
            top_p=float(top_p),
            min_p=float(min_p),
            seed=seed,
            stop=stop,
            ignore_eos=bool(ignore_eos),
            speculative=bool(speculative) and (self.has_draft or drafter == "lookup"),
            drafter=drafter,
            acceptance=acceptance,
            adaptive=bool(adaptive) if adaptive is not None else (temperature == 0 or seed is None),
        )
        if mode == "si":
            return kw
        if not speculative:
            raise ValueError("mode='dsi' is speculative; use mode='si' with speculative=False to decode plainly")
        if not self.has_draft:
            raise ValueError("mode='dsi' needs a draft model")
        if drafter != "model" or acceptance != "rejection":
            raise ValueError("mode='dsi' drafts with the draft model and verifies with the rejection rule only")
        _check_int("sp", sp, 1, 64)
        _check_int("lookahead", lookahead, 1, _core.MAX_DRAFT)
        _check_int("threads_draft", threads_draft, 0, None)
        _check_int("threads_server", threads_server, 0, None)
        for key in ("n_draft", "speculative", "drafter", "acceptance", "adaptive"):
            del kw[key]
        kw.update(mode="dsi", sp=sp, lookahead=lookahead, n_threads_draft=threads_draft,
                  n_threads_server=threads_server)
        return kw


def _call(native: _core.Decoder, tokens: List[int], on_step, kwargs: dict) -> dict:
    kwargs = dict(kwargs)
    if kwargs.pop("mode", "si") == "dsi":
        return native.generate_dsi(tokens, on_step=on_step, **kwargs)
    return native.generate(tokens, on_step=on_step, **kwargs)


def _wrap_on_step(on_step):
    if on_step is None:
        return None

    def call(tokens, text, n_drafted, n_accepted):
        return bool(on_step(list(tokens), text, n_drafted, n_accepted))

    return call


def _check_int(name: str, value, lo: Optional[int], hi: Optional[int]) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {bounds}, got {value}")
