"""llama-server's own completion endpoints, /completion and /infill: a request's fields as
llama-server reads them (its sampler list, n_indent, t_max_predict_ms, n_cmpl, response_fields),
the prompt (text, token ids, or a fill-in-the-middle prompt from an editor's prefix and suffix), and
answers shaped as llama-server's, so that editor extensions written for it (llama.vscode,
llama.vim) read them unchanged.

A field llama-server knows and this server cannot honour is refused with a 400 naming it; fields
llama-server does not know are ignored, as llama-server ignores them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .. import infill
from ..completions import RequestError, _bool, _number, control_fields, grammar_fields, timings
from ..options import GenerateOptions, make_options

# llama-server's sampler names (and the aliases it accepts) -> the one name used here
_SAMPLER_NAMES = {
    "top_k": "top_k", "top-k": "top_k",
    "top_p": "top_p", "top-p": "top_p", "nucleus": "top_p",
    "min_p": "min_p", "min-p": "min_p",
    "temperature": "temperature", "temp": "temperature",
    "infill": "infill",
    "penalties": "penalties", "dry": "dry", "xtc": "xtc", "top_n_sigma": "top_n_sigma", "top-n-sigma": "top_n_sigma",
    "typ_p": "typ_p", "typ-p": "typ_p", "typical_p": "typ_p", "typical-p": "typ_p", "typical": "typ_p",
    "adaptive_p": "adaptive_p", "adaptive-p": "adaptive_p",
}
# llama-server's one-letter sampler codes (a string such as "kpmt")
_SAMPLER_CHARS = {"k": "top_k", "p": "top_p", "m": "min_p", "t": "temperature", "i": "infill", "e": "penalties",
                  "d": "dry", "x": "xtc", "s": "top_n_sigma", "y": "typ_p", "a": "adaptive_p"}
# the samplers this server's chain applies, in its order: a request's list must keep this order
_CHAIN = ("penalties", "top_k", "top_p", "min_p", "temperature", "infill")
# samplers that change nothing at the parameters this server accepts (checked in _NEUTRAL below)
_IDLE_SAMPLERS = {"dry", "xtc", "top_n_sigma", "typ_p"}

# llama-server's fields this server honours only at the value that asks for nothing
_NEUTRAL = {
    "dry_multiplier": (0, 0.0), "xtc_probability": (0, 0.0), "typical_p": (1, 1.0), "top_n_sigma": (-1, -1.0),
    "mirostat": (0,), "dynatemp_range": (0, 0.0), "n_probs": (0,),
    "lora": ([],), "post_sampling_probs": (False,),
}


@dataclass
class NativeRequest:
    """A checked /completion or /infill request."""

    kind: str  # "completion" or "infill"
    options: GenerateOptions
    prompt: Any = None  # /completion: text, token ids, or a list of both
    input_prefix: Any = ""
    input_suffix: Any = ""
    input_extra: List[Dict[str, str]] = field(default_factory=list)
    n_predict: int = -1  # -1: up to the end of the context; 0: process the prompt only
    n_cmpl: int = 1
    stream: bool = False
    n_indent: int = 0
    t_max_predict_ms: float = 0.0
    response_fields: List[str] = field(default_factory=list)
    return_tokens: bool = False
    model: Optional[str] = None


def parse(body: Any, kind: str, defaults: Optional[GenerateOptions] = None) -> NativeRequest:
    """Check a /completion (kind "completion") or /infill ("infill") request body."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", None, "invalid_type")
    for name, neutral in _NEUTRAL.items():
        if name in body and body[name] is not None and body[name] not in neutral:
            raise RequestError(f"'{name}' is not supported by this server (only {neutral[0]!r})", name,
                               "unsupported_field")
    options = _options(body, defaults)
    n_predict = _number(body, "n_predict", -1, 1 << 30, integer=True)
    if n_predict is None:
        n_predict = _number(body, "max_tokens", -1, 1 << 30, integer=True)
    n_cmpl = _number(body, "n_cmpl", 1, 16, integer=True) or _number(body, "n", 1, 16, integer=True) or 1
    stream = bool(_bool(body, "stream"))
    fields = body.get("response_fields", [])
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise RequestError("'response_fields' must be a list of strings", "response_fields", "invalid_type")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("'model' must be a string", "model", "invalid_type")
    return_tokens = bool(_bool(body, "return_tokens"))
    req = NativeRequest(
        kind=kind, options=options, n_predict=-1 if n_predict is None else n_predict, n_cmpl=n_cmpl, stream=stream,
        n_indent=_number(body, "n_indent", 0, 1 << 20, integer=True) or 0,
        t_max_predict_ms=float(_number(body, "t_max_predict_ms", 0, math.inf) or 0.0),
        response_fields=fields, return_tokens=return_tokens, model=model or None)
    _number(body, "t_max_prompt_ms", -1, math.inf)  # checked, and without effect (as in llama-server)
    if kind == "infill":
        for name in ("input_prefix", "input_suffix"):
            v = body.get(name, "")
            if not isinstance(v, (str, list)):
                raise RequestError(f"'{name}' must be a string", name, "invalid_type")
            setattr(req, name, v)
        try:
            req.input_extra = infill.check_extra(body.get("input_extra"))
        except ValueError as exc:
            raise RequestError(str(exc), "input_extra", "invalid_value") from None
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            raise RequestError("'prompt' must be a string", "prompt", "invalid_type")
        req.prompt = prompt
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if not isinstance(prompt, (str, list)) or not prompt:
            raise RequestError("'prompt' must be a non-empty string, or a list of token ids and strings", "prompt",
                               "invalid_type" if not isinstance(prompt, (str, list)) else "invalid_value")
        req.prompt = prompt
    return req


def _options(body: dict, defaults: Optional[GenerateOptions]) -> GenerateOptions:
    """The GenerateOptions a request's sampling fields ask for."""
    opts: Dict[str, Any] = {}
    temperature = _number(body, "temperature", -math.inf, math.inf)
    for name in ("top_p", "min_p"):
        v = _number(body, name, -math.inf, math.inf)
        if v is not None:
            opts[name] = float(v)
    top_k = _number(body, "top_k", -(1 << 30), 1 << 30, integer=True)
    if top_k is not None:
        opts["top_k"] = max(0, top_k)
    left_out = _apply_samplers(body.get("samplers"), opts, temperature)
    seed = _number(body, "seed", -(1 << 63), (1 << 64) - 1, integer=True)
    if seed is not None and seed >= 0:
        opts["seed"] = seed
    stop = body.get("stop")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise RequestError("'stop' must be a list of strings", "stop", "invalid_type")
        opts["stop"] = [s for s in stop if s]
    for name in ("ignore_eos", "speculative"):
        v = body.get(name)
        if v is not None and name == "speculative" and isinstance(v, dict):
            n_max = v.get("n_max")  # llama-server's speculative.n_max: the most tokens drafted
            if n_max is not None:
                opts["n_draft"] = n_max
        elif v is not None:
            if not isinstance(v, bool):
                raise RequestError(f"'{name}' must be true or false", name, "invalid_type")
            opts[name] = v
    for name in ("n_draft", "drafter"):
        if body.get(name) is not None:
            opts[name] = body[name]
    control_fields(body, opts)
    grammar_fields(body, opts)
    if "penalties" in left_out:  # a samplers list that leaves penalties out: none
        opts.update(repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
    n_cache_reuse = _number(body, "n_cache_reuse", 0, (1 << 31) - 1, integer=True)
    if n_cache_reuse is not None:  # llama-server's per-request --cache-reuse
        opts["cache_reuse"] = n_cache_reuse
    try:
        options = make_options(defaults, **opts)
    except (TypeError, ValueError) as exc:
        raise RequestError(str(exc), next((p for p in opts if p in str(exc)), None), "invalid_value") from None
    return options


def _apply_samplers(samplers: Any, opts: Dict[str, Any], temperature: Optional[float]) -> List[str]:
    """llama-server's sampler list mapped onto this server's chain (penalties, top-k, top-p, min-p,
    temperature, infill, in that order): a sampler left out of the list does nothing. Without a
    list, the chain as llama-server's default. Returns the samplers of the chain left out."""
    if samplers is None:
        if temperature is not None:
            opts["temperature"] = max(0.0, float(temperature))
        return []
    if isinstance(samplers, str):
        bad = next((c for c in samplers if c not in _SAMPLER_CHARS), None)
        if bad is not None:
            raise RequestError(f"'samplers' holds an unknown sampler code {bad!r}", "samplers", "invalid_value")
        names = [_SAMPLER_CHARS[c] for c in samplers]
    elif isinstance(samplers, list) and all(isinstance(s, str) for s in samplers):
        unknown = next((s for s in samplers if s not in _SAMPLER_NAMES), None)
        if unknown is not None:
            raise RequestError(f"'samplers' holds an unknown sampler {unknown!r}", "samplers", "invalid_value")
        names = [_SAMPLER_NAMES[s] for s in samplers]
    else:
        raise RequestError("'samplers' must be a list of sampler names", "samplers", "invalid_type")
    for name in names:
        if name not in _CHAIN and name not in _IDLE_SAMPLERS:
            raise RequestError(f"the '{name}' sampler is not supported by this server (it samples with "
                               f"{', '.join(_CHAIN)}, in that order)", "samplers", "unsupported_value")
    chain = [n for n in names if n in _CHAIN]
    if chain != sorted(chain, key=_CHAIN.index) or len(set(chain)) != len(chain):
        raise RequestError(f"'samplers' must keep the order {', '.join(_CHAIN)} (each at most once)", "samplers",
                           "unsupported_value")
    if "top_k" not in chain:
        opts["top_k"] = 0
    if "top_p" not in chain:
        opts["top_p"] = 1.0
    if "min_p" not in chain:
        opts["min_p"] = 0.0
    if "temperature" in chain:
        if temperature is not None:
            opts["temperature"] = max(0.0, float(temperature))
    else:
        opts["temperature"] = 1.0  # llama.cpp's chain without a temperature sampler draws at T = 1
    if "infill" in chain:
        opts["infill"] = True
    return [n for n in _CHAIN if n not in chain]


def prompt_tokens(dec, req: NativeRequest, n_batch: int, server_n_predict: int) -> List[int]:
    """The request's prompt as tokens: /infill's fill-in-the-middle prompt (llama-server's), or
    /completion's text (special tokens parsed, as an editor's own FIM text needs) or token ids."""
    model = dec.target_model
    try:
        if req.kind == "infill":
            typed = infill.tokenize_mixed(model, req.prompt, False, True)
            return infill.infill_prompt(model, req.input_prefix, req.input_suffix, req.input_extra, typed, n_batch,
                                        server_n_predict, dec.n_ctx)
        return infill.tokenize_mixed(model, req.prompt, model.add_bos, True)
    except infill.NoFIM as exc:
        raise RequestError(str(exc), None, "not_supported", 400, "not_supported_error") from None
    except ValueError as exc:
        raise RequestError(f"'{'input_prefix' if req.kind == 'infill' else 'prompt'}' {exc}",
                           "prompt", "invalid_value") from None


def check_room(dec, req: NativeRequest, tokens: List[int]) -> int:
    """The most tokens the request may generate (its n_predict, or up to the end of the context);
    RequestError where the prompt does not fit."""
    room = dec.n_ctx - len(tokens)
    if room < 1:
        raise RequestError(f"the prompt has {len(tokens)} tokens but the context holds {dec.n_ctx}",
                           "input_prefix" if req.kind == "infill" else "prompt", "context_length_exceeded")
    return room if req.n_predict < 0 else min(req.n_predict, room)


class Limits:
    """llama-server's per-completion stops that depend on the text: n_indent (a new line indented
    less than n_indent ends the completion, cut before its first non-blank character) and
    t_max_predict_ms (once the time is up, the completion ends at the next line end). step() is
    called with each verification step's tokens and says whether to stop; cut() is the final text
    and tokens."""

    def __init__(self, model, n_indent: int, t_max_predict_ms: float) -> None:
        self.model, self.n_indent, self.t_max = model, n_indent, t_max_predict_ms
        self.t0 = time.monotonic()
        self.text = ""
        self.tokens: List[int] = []
        self.cut_at: Optional[int] = None  # characters of text kept, where a limit ended it
        self.n_tokens_kept: Optional[int] = None
        self.has_new_line = False
        self.line_start = -1  # where the newest line after the first newline starts

    def step(self, tokens: List[int]) -> bool:
        if self.cut_at is not None:
            return True
        for tok in tokens:
            piece = self.model.token_to_piece(tok, False).decode("utf-8", "replace")
            self.tokens.append(tok)
            self.text += piece
            if self.n_indent > 0 and self.line_start >= 0 and self._under_indented():
                return True
            if "\n" in piece:
                self.has_new_line = True
                if self.n_indent > 0:
                    self.line_start = self.text.rfind("\n") + 1
                if self.t_max > 0 and (time.monotonic() - self.t0) * 1000.0 > self.t_max:
                    self.cut_at, self.n_tokens_kept = len(self.text), len(self.tokens)
                    return True
        return False

    def _under_indented(self) -> bool:
        pos = self.line_start
        while pos < len(self.text) and self.text[pos] in " \t":
            pos += 1
        if pos < len(self.text) and pos - self.line_start < self.n_indent:
            self.cut_at, self.n_tokens_kept = pos, len(self.tokens)
            return True
        return False

    @property
    def stopped(self) -> bool:
        return self.cut_at is not None

    def cut(self, text: str, tokens: List[int]):
        if self.cut_at is None:
            return text, tokens
        return text[: self.cut_at], tokens[: self.n_tokens_kept]


def stop_type(finish_reason: str, limited: bool, stopping_word: str) -> str:
    if limited or finish_reason == "length":
        return "limit"
    if finish_reason == "stop":
        return "word" if stopping_word else "eos"
    return "none"


def stopping_word(dec, out, stops: List[str]) -> str:
    """The stop string that ended out, if one did ("" otherwise)."""
    if out.finish_reason != "stop" or not stops:
        return ""
    full = dec.target_model.detokenize(list(out.tokens))
    rest = full[len(out.text):] if full.startswith(out.text) else ""
    return next((s for s in stops if rest.startswith(s)), "")


def result(dec, req: NativeRequest, index: int, id_slot: int, model: str, prompt: List[int], text: str,
           tokens: List[int], stype: str, word: str, stats, has_new_line: bool, truncated: bool, n_ctx: int,
           options: GenerateOptions) -> Dict[str, Any]:
    """llama-server's final answer object for one completion."""
    return {
        "index": index, "content": text, "tokens": tokens,
        "id_slot": id_slot, "stop": True, "model": model, "tokens_predicted": len(tokens) if req.n_predict == 0 else stats.n_generated,
        "tokens_evaluated": len(prompt),
        "generation_settings": {"n_ctx": n_ctx, "n_predict": req.n_predict, "model": model, "seed": options.seed,
                                "temperature": options.temperature, "top_k": options.top_k, "top_p": options.top_p,
                                "min_p": options.min_p, "repeat_penalty": options.repeat_penalty,
                                "repeat_last_n": options.repeat_last_n, "presence_penalty": options.presence_penalty,
                                "frequency_penalty": options.frequency_penalty,
                                "logit_bias": [[t, b if b > -math.inf else False] for t, b in options.logit_bias.items()],
                                "stop": list(options.stop), "n_indent": req.n_indent,
                                "t_max_predict_ms": req.t_max_predict_ms, "stream": req.stream,
                                "samplers": _samplers_of(options),
                                "speculative.n_max": options.n_draft if options.n_draft is not None else dec.n_draft},
        "prompt": dec.target_model.detokenize(prompt, True, whole=True), "has_new_line": has_new_line, "truncated": truncated,
        "stop_type": stype, "stopping_word": word, "tokens_cached": len(prompt) + len(tokens),
        "timings": _prompt_only(timings(stats)) if req.n_predict == 0 else timings(stats),
    }


def _samplers_of(options: GenerateOptions) -> List[str]:
    """The chain a completion ran with, by llama-server's sampler names."""
    if options.temperature == 0:
        return ["greedy"]
    penalizes = options.repeat_last_n != 0 and (options.repeat_penalty != 1.0 or options.presence_penalty != 0.0
                                                 or options.frequency_penalty != 0.0)
    out = [name for name, on in (("penalties", penalizes), ("top_k", options.top_k > 0), ("top_p", options.top_p < 1.0),
                                 ("min_p", options.min_p > 0.0), ("temperature", options.temperature != 1.0),
                                 ("infill", options.infill)) if on]
    return out


def _prompt_only(t: Dict[str, Any]) -> Dict[str, Any]:
    """A warm-up's timings: the prompt's, and nothing predicted."""
    return dict(t, **{k: 0 for k in ("predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second",
                                     "draft_n", "draft_n_accepted")})


def select_fields(obj: Dict[str, Any], paths: List[str]) -> Dict[str, Any]:
    """llama-server's response_fields: only the listed paths ("timings/prompt_n"), keyed by path."""
    if not paths:
        return obj
    out: Dict[str, Any] = {}
    for path in paths:
        cur: Any = obj
        ok = True
        for key in path.split("/"):
            if ok and isinstance(cur, dict) and key in cur:
                cur = cur[key]
            else:
                ok = False
        if ok:
            out[path] = cur
    return out
