"""OpenAI-shaped completions: a request's fields checked and turned into a prompt and
GenerateOptions, and a generation turned into OpenAI's response and stream-chunk objects.

The Python methods SpeculativeDecoder.create_chat_completion / create_completion (defined at the
end of this module) and the server's /v1/chat/completions and /v1/completions share this layer, so both accept the same fields, refuse
the same ones and answer in the same shapes. A field that cannot be honoured is refused with a
RequestError naming it; none is ignored silently.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import infill, reasoning, schemas, tools
from ._version import __version__
from .decoder import SpeculativeDecoder
from .options import GenerateOptions, PromptTooLong, make_options
from .templates import ChatTemplateError, continued_text, template_source


class RequestError(ValueError):
    """A request that cannot be served as asked: message, the field (param) and OpenAI's error
    code; status is the HTTP status the server answers with."""

    def __init__(self, message: str, param: Optional[str] = None, code: Optional[str] = None, status: int = 400,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.code, self.status, self.kind = message, param, code, status, kind

    def body(self) -> Dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


# fields of OpenAI's requests that are accepted only at the value that asks for nothing
_NEUTRAL = {
    "echo": (False,),
    "best_of": (1,),
    "functions": ([],),
    "function_call": ("none", "auto"),
    "store": (False,),
    "modalities": (["text"],),
    "audio": (),
    "web_search_options": (),
}
# accepted and without effect on the output: identifiers, metadata, and llama-server's cache switch
_PASSIVE = {"user", "metadata", "service_tier", "cache_prompt", "id_slot"}

_COMMON = {"model", "max_tokens", "max_completion_tokens", "n_predict", "temperature", "top_p", "top_k", "min_p",
           "stop", "seed", "stream", "stream_options", "n", "ignore_eos", "speculative", "n_draft", "drafter",
           "response_format", "return_tokens", "presence_penalty", "frequency_penalty", "repeat_penalty",
           "repeat_last_n", "logit_bias", "logprobs", "grammar", "json_schema", "prediction"}
CHAT_FIELDS = (_COMMON | {"messages", "chat_template_kwargs", "top_logprobs", "tools", "tool_choice",
                          "parallel_tool_calls", "reasoning_format", "reasoning_effort", "reasoning_budget_tokens",
                          "thinking_budget_tokens", "reasoning_budget_message"} | set(_NEUTRAL) | _PASSIVE)
COMPLETION_FIELDS = _COMMON | {"prompt", "suffix"} | set(_NEUTRAL) | _PASSIVE
# /infill's cut of a fill-in-the-middle prompt made from "suffix" (llama-server's default -b)
FIM_N_BATCH = 2048
MAX_CHOICES = 128  # n, as OpenAI's


HERMES = tools.hermes  # the call format of a template that teaches none of its own


@dataclass
class ToolCall:
    """The calls a chat request's tools and tool_choice ask for: forced (tool_choice "required", or
    the named tool) or lazy ("auto")."""

    tools: List[Dict[str, Any]]
    named: Optional[str]
    parallel: bool
    forced: bool


@dataclass
class Request:
    """A checked request: its prompt (text, messages or token ids), the options it runs with,
    and how to answer."""

    kind: str  # "chat" or "text"
    options: GenerateOptions
    stream: bool = False
    include_usage: bool = False
    model: Optional[str] = None
    messages: Optional[List[dict]] = None
    prompt: Any = None  # text or token ids (completions)
    suffix: str = ""  # completions: the text after the completion (a fill-in-the-middle prompt)
    return_tokens: bool = False  # the answer's choice carries its token ids (llama-server's field)
    max_tokens: Optional[int] = None  # None: up to the end of the context
    template_kwargs: Dict[str, Any] = field(default_factory=dict)
    tools: bool = False  # chat: tools were rendered, and calls are parsed out of the reply (specllama.tools)
    tool_call: Optional[ToolCall] = None  # the calls a grammar holds (None: no grammar for them)
    tool_format: Any = HERMES  # the chat template's call format (a tools module or flavour; prompt_tokens)
    n: int = 1  # choices, generated one after another (choice c with seed + c where a seed is given)
    prediction: str = ""  # OpenAI's Predicted Outputs: text the reply is expected to repeat much of ("": none)
    # chat: where a reasoning model's thinking goes (specllama.reasoning; None: not given, "auto"), and
    # the markup of the thinking the prompt opened (prompt_tokens; None: none)
    reasoning_format: Optional[str] = None
    thinking_open: Optional[Tuple[str, str]] = None
    # the markup of the chat template's thinking mode (prompt_tokens; None: it has none)
    template_markup: Optional[Tuple[str, str]] = None
    answer_grammar: bool = False  # the grammar is the answer's (a schema's, a forced call's), not a raw GBNF
    # chat: the thinking's budget in tokens (-1: none; None: not given, the server's) and the message
    # forced before its closing tag when it is spent (None: not given)
    reasoning_budget: Optional[int] = None
    reasoning_budget_message: Optional[str] = None
    reasoning_effort: Optional[str] = None  # chat: OpenAI's reasoning_effort (reasoning.with_effort)
    # chat with tools: the call tags that also end a thinking block (the format's ENDS_THINKING, where
    # the template thinks in <think>; prompt_tokens)
    thinking_calls: Tuple[str, ...] = ()
    # chat: the call format whose Reader reads the whole reply (tools.WHOLE_REPLY: harmony's,
    # Functionary v3.2's), or None; and how the message the prompt ends inside opened (its opened_by)
    reader: Any = None
    opened: Optional[str] = None

    @property
    def harmony(self) -> bool:
        """Whether the chat template writes gpt-oss's harmony format."""
        return self.reader is tools.harmony

    def splits_reasoning(self) -> bool:
        return self.kind == "chat" and self.reasoning_format != "none"

    def channels(self) -> bool:
        """Whether the reply is read in Gemma 4's channel markup (reasoning.split)."""
        return reasoning.MARKUPS[1] in (self.thinking_open, self.template_markup)


def _number(body: dict, name: str, lo: float, hi: float, integer: bool = False):
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise RequestError(f"'{name}' must be {'an integer' if integer else 'a number'}, not {type(v).__name__}",
                           name, "invalid_type")
    if v != v:
        raise RequestError(f"'{name}' must be a number, not NaN", name, "invalid_value")
    if v > hi:
        raise RequestError(f"'{name}' must be at most {hi:g}, got {v}", name, "invalid_value")
    if v < lo:
        raise RequestError(f"'{name}' must be at least {lo:g}, got {v}", name, "invalid_value")
    return v


def _bool(body: dict, name: str) -> Optional[bool]:
    v = body.get(name)
    if v is not None and not isinstance(v, bool):
        raise RequestError(f"'{name}' must be true or false, not {type(v).__name__}", name, "invalid_type")
    return v


def parse(body: Any, kind: str, defaults: Optional[GenerateOptions] = None) -> Request:
    """Check an OpenAI request body (a JSON object as a dict) for /v1/chat/completions (kind
    "chat") or /v1/completions ("text"); fields not given keep defaults' values."""
    _check_fields(body, kind)
    max_tokens = _max_tokens(body)
    opts = _sampling_fields(body)
    _logprobs_field(body, kind, opts)
    stream = bool(_bool(body, "stream"))
    so = body.get("stream_options")
    if so is not None and (not isinstance(so, dict) or set(so) - {"include_usage"}):
        raise RequestError("'stream_options' may hold only include_usage", "stream_options", "invalid_value")
    include_usage = bool(so and so.get("include_usage"))
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("'model' must be a string", "model", "invalid_type")

    try:
        options = make_options(defaults, **opts)
    except (TypeError, ValueError) as exc:
        param = next((p for p in opts if p in str(exc)), None)
        raise RequestError(str(exc), param, "invalid_value") from None

    return_tokens = bool(_bool(body, "return_tokens"))
    if return_tokens and stream:
        raise RequestError("'return_tokens' applies to a whole answer, not a stream", "return_tokens",
                           "invalid_value")
    n = _number(body, "n", 1, MAX_CHOICES, integer=True)
    req = Request(kind=kind, options=options, stream=stream, include_usage=include_usage, model=model,
                  max_tokens=max_tokens, return_tokens=return_tokens, n=n or 1,
                  answer_grammar=bool(opts.get("grammar")) and not body.get("grammar"),
                  prediction=_prediction(body))
    if kind == "chat":
        _chat_prompt(body, req)
    else:
        req.prompt = _text_prompt(body)
        suffix = body.get("suffix")
        if suffix is not None and not isinstance(suffix, str):
            raise RequestError("'suffix' must be a string", "suffix", "invalid_type")
        if suffix and not isinstance(req.prompt, str):
            raise RequestError("'suffix' needs a text prompt, not token ids", "suffix", "invalid_value")
        req.suffix = suffix or ""
    return req


def _check_fields(body: Any, kind: str) -> None:
    """A JSON object of known fields, those accepted at their neutral value only at that value."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", None, "invalid_type")
    allowed = CHAT_FIELDS if kind == "chat" else COMPLETION_FIELDS
    for name in body:
        if name not in allowed:
            raise RequestError(f"unknown field '{name}' (this server does not support it)", name, "unsupported_field")
    for name, neutral in _NEUTRAL.items():
        if name in body and body[name] is not None and body[name] not in neutral:
            raise RequestError(f"'{name}' is not supported by this server (only {json.dumps(neutral[0])})"
                               if neutral else f"'{name}' is not supported by this server", name, "unsupported_field")


def _prediction(body: dict) -> str:
    """OpenAI's prediction: {"type": "content", "content": text or [{"type": "text", "text": ...}]}, as
    its text ("" where not given)."""
    pred = body.get("prediction")
    if pred is None:
        return ""
    if not isinstance(pred, dict) or pred.get("type") != "content" or set(pred) - {"type", "content"}:
        raise RequestError("'prediction' must be {\"type\": \"content\", \"content\": ...}", "prediction",
                           "invalid_value")
    content = pred.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                                         and set(p) == {"type", "text"} for p in content):
        return "".join(p["text"] for p in content)
    raise RequestError("'prediction.content' must be a string or a list of {\"type\": \"text\", \"text\": ...} parts",
                       "prediction", "invalid_type")


def _max_tokens(body: dict) -> Optional[int]:
    """The first of max_completion_tokens, max_tokens and n_predict given (None: no limit)."""
    for name in ("max_completion_tokens", "max_tokens", "n_predict"):
        v = _number(body, name, -1 if name == "n_predict" else 1, 1 << 30, integer=True)
        if v == 0:
            raise RequestError("'n_predict' must be -1 (no limit) or at least 1", name, "invalid_value")
        if v is not None and v > 0:
            return v
    return None


def _logprobs_field(body: dict, kind: str, opts: Dict[str, Any]) -> None:
    """OpenAI's logprobs: chat's logprobs (true) with top_logprobs (0..20), completions' logprobs
    (the number of likeliest tokens, 0..20), into opts["logprobs"] (None: not asked for)."""
    if kind == "chat":
        on = _bool(body, "logprobs")
        top = _number(body, "top_logprobs", 0, 20, integer=True)
        if top is not None and not on:
            raise RequestError("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value")
        if on:
            opts["logprobs"] = top or 0
    else:
        n = _number(body, "logprobs", 0, 20, integer=True)
        if n is not None:
            opts["logprobs"] = n


def logprobs_json(req: "Request", model, entries, text_offset: int = 0) -> Optional[Dict[str, Any]]:
    """OpenAI's logprobs object for TokenLogprob entries (None where the request did not ask):
    chat's {"content": [{token, logprob, bytes, top_logprobs}]}, completions' {tokens,
    token_logprobs, top_logprobs, text_offset} (offsets counted from text_offset)."""
    if req.options.logprobs is None or entries is None:
        return None

    def piece(t):
        raw = model.token_to_piece(t, True)
        return raw.decode("utf-8", "replace"), list(raw)

    if req.kind == "chat":
        content = []
        for e in entries:
            text, raw = piece(e.token)
            top = [dict(zip(("token", "bytes"), piece(t)), logprob=lp) for t, lp in e.top]
            content.append({"token": text, "logprob": e.logprob, "bytes": raw, "top_logprobs": top})
        return {"content": content, "refusal": None}
    tokens = [piece(e.token)[0] for e in entries]
    offsets = []
    for t in tokens:
        offsets.append(text_offset)
        text_offset += len(t)
    return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{piece(t)[0]: lp for t, lp in e.top} for e in entries], "text_offset": offsets}


def grammar_fields(body: dict, opts: Dict[str, Any]) -> None:
    """The grammar a request's output must follow, into opts["grammar"]: OpenAI's response_format
    (json_object: any JSON object; json_schema: its schema), or llama-server's json_schema or
    grammar (GBNF). A schema becomes a grammar by specllama.schemas (llama-cpp-python's converter,
    a port of llama.cpp's json_schema_to_grammar)."""
    given = []
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind == "json_object":
            schema = fmt.get("schema")  # (llama-server takes a schema here too)
            given.append(_schema_grammar(schema, "response_format") if schema is not None else _json_grammar())
        elif kind == "json_schema":
            js = fmt.get("json_schema")
            if not isinstance(js, dict) or not isinstance(js.get("schema"), dict):
                raise RequestError("'response_format.json_schema.schema' must be a JSON schema object",
                                   "response_format", "invalid_value")
            given.append(_schema_grammar(js["schema"], "response_format"))
        else:
            raise RequestError("'response_format' must be of type text, json_object or json_schema", "response_format",
                               "invalid_value")
    if body.get("json_schema") is not None:
        given.append(_schema_grammar(body["json_schema"], "json_schema"))
    if body.get("grammar") is not None:
        if not isinstance(body["grammar"], str):
            raise RequestError("'grammar' must be a string (llama.cpp's GBNF)", "grammar", "invalid_type")
        if body["grammar"]:
            given.append(body["grammar"])
    if len(given) > 1:
        raise RequestError("give one of 'response_format', 'json_schema' and 'grammar'", "grammar", "invalid_value")
    if given:
        opts["grammar"] = given[0]


def _json_grammar() -> str:
    return schemas.llama_grammar().JSON_GBNF


def _schema_grammar(schema: Any, param: str) -> str:
    if not isinstance(schema, dict):
        raise RequestError(f"'{param}' must hold a JSON schema object", param, "invalid_type")
    try:
        return schemas.to_grammar(schema)
    except ValueError as exc:
        raise RequestError(str(exc), param, "invalid_value") from None


def control_fields(body: dict, opts: Dict[str, Any]) -> None:
    """The logit bias and repetition penalties a request asks for (OpenAI's presence_penalty,
    frequency_penalty and logit_bias; llama-server's repeat_penalty and repeat_last_n), into opts."""
    for name in ("presence_penalty", "frequency_penalty", "repeat_penalty"):
        v = _number(body, name, -math.inf, math.inf)
        if v is not None:
            opts[name] = float(v)
    last_n = _number(body, "repeat_last_n", -1, (1 << 31) - 1, integer=True)
    if last_n is not None:
        opts["repeat_last_n"] = last_n
    bias = body.get("logit_bias")
    if bias is not None:
        opts["logit_bias"] = logit_bias(bias)


def logit_bias(value: Any) -> Dict[int, float]:
    """A logit_bias field as {token id: bias}: OpenAI's object keyed by token ids ({"15043": -100}),
    or llama-server's list of [token id, bias] pairs, where a bias of false bans the token."""
    pairs = value.items() if isinstance(value, dict) else value
    if not isinstance(value, (dict, list)) or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
        raise RequestError("'logit_bias' must map token ids to biases: {\"15043\": -100} or [[15043, -100]]",
                           "logit_bias", "invalid_type")
    out: Dict[int, float] = {}
    for key, bias in pairs:
        if isinstance(key, str) and key.lstrip("-").isdigit():
            key = int(key)
        if not isinstance(key, int) or isinstance(key, bool):
            raise RequestError(f"'logit_bias' keys must be token ids, got {key!r} (POST /tokenize gives a text's ids)",
                               "logit_bias", "invalid_value")
        if bias is False:
            bias = -math.inf
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or math.isnan(bias) or bias == math.inf:
            raise RequestError(f"'logit_bias' for token {key} must be a number (or false: never)", "logit_bias",
                               "invalid_value")
        out[key] = float(bias)
    return out


def _sampling_fields(body: dict) -> Dict[str, Any]:
    """The GenerateOptions fields the request sets, in JSON's types; the native core checks values."""
    opts: Dict[str, Any] = {}
    control_fields(body, opts)
    grammar_fields(body, opts)
    # JSON types here, and OpenAI's ceiling on temperature; the native core checks every value
    for name, lo, hi in (("temperature", -math.inf, 2), ("top_p", -math.inf, math.inf),
                         ("min_p", -math.inf, math.inf)):
        v = _number(body, name, lo, hi)
        if v is not None:
            opts[name] = float(v)
    top_k = _number(body, "top_k", -1, 1 << 30, integer=True)
    if top_k is not None:
        opts["top_k"] = max(0, top_k)  # llama-server: 0 or below means the whole vocabulary
    seed = _number(body, "seed", -(1 << 63), (1 << 64) - 1, integer=True)
    if seed is not None and seed != -1:  # -1: llama-server's "random"
        opts["seed"] = seed % (1 << 64)
    stop = body.get("stop")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise RequestError("'stop' must be a string or a list of strings", "stop", "invalid_type")
        opts["stop"] = [s for s in stop if s]
    for name in ("ignore_eos", "speculative"):
        v = _bool(body, name)
        if v is not None:
            opts[name] = v
    n_draft = body.get("n_draft")
    if n_draft is not None:
        opts["n_draft"] = n_draft
    drafter = body.get("drafter")
    if drafter is not None:
        if not isinstance(drafter, str):
            raise RequestError("'drafter' must be a string", "drafter", "invalid_type")
        opts["drafter"] = drafter
    return opts


def _chat_prompt(body: dict, req: Request) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of messages", "messages",
                           "invalid_value" if isinstance(messages, list) else "invalid_type")
    req.messages = messages
    if body.get("reasoning_format") is not None:
        try:
            req.reasoning_format = reasoning.check_format(body["reasoning_format"])
        except ValueError as exc:
            raise RequestError(str(exc), "reasoning_format", "invalid_value") from None
    if body.get("reasoning_effort") is not None:
        try:
            req.reasoning_effort = reasoning.check_effort(body["reasoning_effort"])
        except ValueError as exc:
            raise RequestError(str(exc), "reasoning_effort", "invalid_value") from None
    _budget_fields(body, req)
    tk = body.get("chat_template_kwargs")
    if tk is not None:
        if not isinstance(tk, dict) or any(k in ("messages", "add_generation_prompt") for k in tk):
            raise RequestError("'chat_template_kwargs' must be an object of extra template variables",
                               "chat_template_kwargs", "invalid_value")
        req.template_kwargs = dict(tk)
    _tools_fields(body, req)


def _budget_fields(body: dict, req: Request) -> None:
    """llama-server's reasoning_budget_tokens (or thinking_budget_tokens) and reasoning_budget_message."""
    for name in ("reasoning_budget_tokens", "thinking_budget_tokens"):
        v = body.get(name)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < -1:
            raise RequestError(f"'{name}' must be an integer >= -1 (-1: no budget)", name,
                               "invalid_value" if isinstance(v, int) else "invalid_type")
        req.reasoning_budget = v
    msg = body.get("reasoning_budget_message")
    if msg is not None:
        if not isinstance(msg, str):
            raise RequestError("'reasoning_budget_message' must be a string", "reasoning_budget_message",
                               "invalid_type")
        req.reasoning_budget_message = msg


def _tools_fields(body: dict, req: Request) -> None:
    """OpenAI's tools and tool_choice: the tools go to the chat template (the model's own renders
    them), and calls in the reply are parsed (specllama.tools). A choice that forces a call
    ("required", or a named function) makes the output follow a grammar of calls to the tools (or
    to the named one), arguments by their schemas; "auto" makes it a lazy grammar that holds from a
    call's opening tag on. The grammar is made in the template's call format (specllama.tools) once
    the prompt is rendered (_tool_grammar)."""
    given = body.get("tools")
    choice = body.get("tool_choice", "auto")
    if given is None or given == []:
        if choice not in ("auto", "none"):
            raise RequestError("'tool_choice' forces a call, but no 'tools' were given", "tool_choice",
                               "invalid_value")
        return
    try:
        checked = tools.check_tools(given)
    except ValueError as exc:
        raise RequestError(str(exc), "tools", "invalid_value") from None
    if choice == "none":
        return
    parallel = body.get("parallel_tool_calls")
    if parallel not in (None, True, False):
        raise RequestError("'parallel_tool_calls' must be true or false", "parallel_tool_calls", "invalid_type")
    named = None
    if isinstance(choice, dict):
        fn = choice.get("function")
        if choice.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise RequestError("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}", "tool_choice", "invalid_value")
        named = fn["name"]
        if not any(t["function"]["name"] == named for t in checked):
            raise RequestError(f"'tool_choice' names {named!r}, which is not among the tools", "tool_choice",
                               "invalid_value")
    elif choice not in ("auto", "required"):
        raise RequestError("'tool_choice' must be \"auto\", \"none\", \"required\" or a named function",
                           "tool_choice", "invalid_value")
    if choice != "auto" and req.options.grammar:
        raise RequestError("a 'tool_choice' that forces a call cannot be combined with 'response_format', "
                           "'json_schema' or 'grammar'", "tool_choice", "invalid_value")
    if choice != "auto" or not req.options.grammar:  # (with "auto", a grammar given holds instead)
        req.tool_call = ToolCall(checked, named, parallel is not False, forced=choice != "auto")
        req.answer_grammar = choice != "auto"
    req.template_kwargs["tools"] = checked
    req.tools = True


def _text_prompt(body: dict) -> Any:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        if not prompt:
            raise RequestError("'prompt' is empty", "prompt", "invalid_value")
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool)
                                                     for t in prompt):
        pass
    elif isinstance(prompt, list) and len(prompt) > 1:
        raise RequestError("'prompt' must be one prompt: this server completes one per request", "prompt",
                           "unsupported_value")
    else:
        raise RequestError("'prompt' must be a string or a list of token ids", "prompt", "invalid_type")
    return prompt


def template_variables(req: Request) -> Dict[str, Any]:
    """The chat template's variables for req: its template_kwargs with its reasoning effort."""
    return reasoning.with_effort(req.template_kwargs, req.reasoning_effort)


def prompt_tokens(dec, req: Request, template: Optional[str] = None, n_batch: int = FIM_N_BATCH) -> List[int]:
    """The request's prompt as tokens for dec; RequestError when it cannot be rendered or does not
    fit in the context, or when max_tokens does not fit after it. With a suffix, the
    fill-in-the-middle prompt cut as /infill cuts it with n_batch (llama-server's -b)."""
    try:
        if req.kind == "chat":
            variables = template_variables(req)
            text, tokens = dec._chat_prompt(req.messages, True, template, **variables)
            req.thinking_open = reasoning.opened_by(text, continued_text(req.messages) or "")
            source = template_source(dec.target_model, template, variables.get("tools"))  # (the one rendered)
            req.template_markup = reasoning.template_markup(source)
            req.tool_format = tools.format_of(source)
            req.reader = req.tool_format if req.tool_format in tools.WHOLE_REPLY else None
            if req.reader is not None:
                req.opened = req.reader.opened_by(text)
                req.thinking_open = req.reader.opened_thinking(req.opened)
            if req.tools and (req.thinking_open or req.template_markup) == reasoning.MARKUPS[0]:
                req.thinking_calls = req.tool_format.ENDS_THINKING
        elif req.suffix:
            tokens = _fim_tokens(dec, req, n_batch)
        elif isinstance(req.prompt, str):
            tokens = dec._prompt_tokens(req.prompt)
        else:
            tokens = list(req.prompt)
            bad = next((t for t in tokens if not 0 <= t < dec.target_model.n_vocab), None)
            if bad is not None:
                raise RequestError(f"token id {bad} is outside the vocabulary of {dec.target_model.n_vocab}", "prompt",
                                   "invalid_value")
    except RequestError:
        raise
    except PromptTooLong as exc:
        raise RequestError(str(exc), "messages" if req.kind == "chat" else "prompt", "context_length_exceeded") from None
    except ChatTemplateError as exc:
        raise RequestError(str(exc), "messages", "chat_template_error") from None
    except ValueError as exc:  # a message's shape or text
        raise RequestError(str(exc), "messages" if req.kind == "chat" else "prompt", "invalid_value") from None
    room = dec.n_ctx - len(tokens)
    if room < 1:
        raise RequestError(f"the prompt has {len(tokens)} tokens but the context holds {dec.n_ctx}",
                           "messages" if req.kind == "chat" else "prompt", "context_length_exceeded")
    if req.max_tokens is not None and req.max_tokens > room:
        name = "max_tokens"
        raise RequestError(f"'{name}' is {req.max_tokens}, but only {room} tokens fit after the {len(tokens)}-token "
                           f"prompt in the context of {dec.n_ctx}", name, "context_length_exceeded")
    return tokens


def _fim_tokens(dec, req: Request, n_batch: int) -> List[int]:
    """A completion with a suffix: the fill-in-the-middle prompt llama-server's /infill builds from
    the prompt as prefix and the suffix."""
    try:
        return infill.infill_prompt(dec.target_model, req.prompt, req.suffix, [], [], n_batch, -1, dec.n_ctx)
    except infill.NoFIM as exc:
        raise RequestError(f"'suffix' needs fill-in-the-middle tokens: {exc}", "suffix", "not_supported") from None


def options_for(dec, req: Request, n_prompt: int) -> GenerateOptions:
    """The request's options with max_tokens set (as asked, or up to the end of the context),
    checked against dec (RequestError for a drafter it cannot run, say)."""
    opts = req.options.copy()
    opts.max_tokens = req.max_tokens if req.max_tokens is not None else max(1, dec.n_ctx - n_prompt)
    if req.tool_call is not None:
        _tool_grammar(req, opts)
    markup = req.thinking_open or req.template_markup or (tools.harmony.MARKUP if req.harmony else None)
    if req.reader is not None:
        if req.answer_grammar and req.tool_call is None:  # (a schema's answer, in the message for the user)
            opts.grammar, opts.grammar_root = req.reader.answer_grammar(opts.grammar, opts.grammar_root)
    elif req.splits_reasoning() and markup and opts.grammar:
        # a reasoning model may think before the answer its grammar holds, as llama-server lets it; a
        # lazy grammar (tool calls, "auto") reads the reply from after the thinking, so that a call's
        # tag inside the thinking does not start it
        if opts.grammar_trigger_patterns:
            opts.grammar_thinking = "open" if req.thinking_open else "optional"
            opts.grammar_thinking_tags = markup
            opts.grammar_thinking_calls = list(req.thinking_calls)
        elif req.answer_grammar:
            calls = req.thinking_calls if req.tool_call is not None else ()  # (a forced call starts with its tag)
            opts.grammar, opts.grammar_root = reasoning.grammar_after_thinking(opts.grammar, opts.grammar_root, markup,
                                                                               req.thinking_open is not None, calls)
    if req.reasoning_budget is not None and req.reasoning_budget >= 0 and markup:
        _thinking_budget(dec, req, opts, markup)
    if req.kind == "chat":
        opts.preserved_tokens = _preserved(dec, req.tool_format.TAGS + reasoning.TAGS)
    if req.prediction:
        opts.prediction = dec.tokenize(req.prediction, add_special=False, parse_special=False)
    try:
        return dec.options(opts)
    except (TypeError, ValueError) as exc:
        param = next((p for p in ("drafter", "n_draft", "speculative", "seed", "logit_bias", "grammar") if p in str(exc)),
                     None)
        raise RequestError(str(exc), param, "invalid_value") from None


def _thinking_budget(dec, req: Request, opts: GenerateOptions, markup) -> None:
    """opts with the request's thinking budget, as llama-server's --reasoning-budget: after that
    many tokens of thinking (from the reply's start where the prompt opened it, else after the
    markup's opening tag), the message and the closing tag are forced, as tokens."""
    def tokens(text: str) -> List[int]:
        return list(dec.target_model.tokenize(text, add_special=False, parse_special=True)) if text else []

    opts.thinking_budget = req.reasoning_budget
    opts.thinking_budget_opened = req.thinking_open is not None
    opts.thinking_budget_start = tokens(markup[0])
    opts.thinking_budget_ends = [tokens(markup[1])] + [tokens(t) for t in req.thinking_calls]
    opts.thinking_budget_forced = tokens(req.reasoning_budget_message or "") + tokens(markup[1])


def _preserved(dec, tags) -> List[int]:
    """The tags that are one token each in dec's vocabulary (spelled out in the text where they are
    control tokens: Mistral's [TOOL_CALLS], say), as llama-server's preserved tokens."""
    out = []
    for tag in tags:
        ids = dec.target_model.tokenize(tag, add_special=False, parse_special=True)
        if len(ids) == 1:
            out.append(ids[0])
    return out


def _tool_grammar(req: Request, opts: GenerateOptions) -> None:
    """opts with the grammar of req's tool calls in the template's call format: forced, every
    output is calls (a 400 where a schema cannot be followed); lazy, as llama-server's, a grammar
    its patterns start (a tool whose schema cannot be followed leaves the calls free)."""
    call, fmt = req.tool_call, req.tool_format
    try:
        if call.forced:
            opts.grammar = fmt.forced_grammar(call.tools, call.named, call.parallel)
        else:
            opts.grammar, opts.grammar_trigger_patterns = fmt.lazy_grammar(call.tools, call.parallel)
    except ValueError as exc:
        if call.forced:
            raise RequestError(str(exc), "tools", "invalid_value") from None
        return


def choice_options(opts: GenerateOptions, c: int) -> GenerateOptions:
    """The options of choice c of a request with n > 1: its seed the request's plus c (none stays
    none: each choice draws its own)."""
    if c == 0 or opts.seed is None:
        return opts
    out = opts.copy()
    out.seed = (opts.seed + c) % (1 << 64)
    return out


# --- responses ---------------------------------------------------------------------------------

FINISH = {"stop": "stop", "length": "length", "cancelled": "stop"}


def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]


def usage(stats) -> Dict[str, Any]:
    """OpenAI's usage; where a prediction drafted (Stats.drafter), completion_tokens_details says how
    many of its tokens the target kept and how many it verified and rejected."""
    out = {"prompt_tokens": stats.n_prompt, "completion_tokens": stats.n_generated,
           "total_tokens": stats.n_prompt + stats.n_generated,
           "prompt_tokens_details": {"cached_tokens": stats.n_prompt_cached}}
    if stats.drafter.endswith("prediction"):
        out["completion_tokens_details"] = {
            "accepted_prediction_tokens": stats.n_prediction_accepted,
            "rejected_prediction_tokens": stats.n_prediction_drafted - stats.n_prediction_accepted}
    return out


def timings(stats) -> Dict[str, Any]:
    """llama-server's timings object, with its draft counts (and, under a grammar, how many of the
    drafts the grammar forced: draft_n_forced, draft_n_forced_accepted)."""
    prompt_n = stats.n_prompt - stats.n_prompt_cached
    prompt_ms = stats.t_prefill_ms
    predicted_ms = stats.t_total_ms - stats.t_prefill_ms
    n = stats.n_generated
    return {"cache_n": stats.n_prompt_cached, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
            "prompt_per_second": prompt_n * 1000.0 / prompt_ms if prompt_ms > 0 else 0.0,
            "predicted_n": n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / n if n else 0.0,
            "predicted_per_second": n * 1000.0 / predicted_ms if predicted_ms > 0 else 0.0,
            "draft_n": stats.n_drafted, "draft_n_accepted": stats.n_accepted,
            **({"draft_n_forced": stats.n_forced_drafted, "draft_n_forced_accepted": stats.n_forced_accepted}
               if stats.n_forced_drafted else {})}


def total_usage(all_stats) -> Dict[str, Any]:
    """usage() of the choices of one request: the prompt counted once (the first choice's), the
    completions' tokens added up."""
    out = usage(all_stats[0])
    out["completion_tokens"] = sum(st.n_generated for st in all_stats)
    out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
    if "completion_tokens_details" in out:
        for name in ("accepted_prediction_tokens", "rejected_prediction_tokens"):
            out["completion_tokens_details"][name] = sum(usage(st).get("completion_tokens_details", {}).get(name, 0)
                                                         for st in all_stats)
    return out


def response_of_choices(answers: List[Dict[str, Any]], all_stats) -> Dict[str, Any]:
    """The choices' whole answers (response()'s, in order) as one answer with n choices; usage
    over them all, timings the first's."""
    out = dict(answers[0], choices=[dict(a["choices"][0], index=c) for c, a in enumerate(answers)])
    out["usage"] = total_usage(all_stats)
    return out


def response(req: Request, rid: str, model: str, created: int, text: str, finish_reason: str, stats,
             tokens: Optional[List[int]] = None, logprobs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The whole (non-streamed) answer; with req.return_tokens its choice holds tokens; logprobs:
    logprobs_json's object."""
    if req.kind == "chat":
        calls: List[Dict[str, Any]] = []
        if req.reader is not None:
            thought, text, calls = req.reader.read(text, req.splits_reasoning(), _tools(req), req.opened)
            content = text or None
        elif req.splits_reasoning():
            thought, text = reasoning.split(text, req.thinking_open, req.thinking_calls, req.channels())
        else:
            thought = None
        choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                  "logprobs": logprobs, "finish_reason": FINISH.get(finish_reason, finish_reason)}
        if thought is not None:
            choice["message"]["reasoning_content"] = thought
        if req.tools and req.reader is None:
            content, calls = req.tool_format.parse(text, _tools(req))
        if calls:
            choice["message"].update(content=content, tool_calls=calls)
            choice["finish_reason"] = "tool_calls"
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": logprobs,
                  "finish_reason": FINISH.get(finish_reason, finish_reason)}
        obj = "text_completion"
    if req.return_tokens:
        choice["tokens"] = list(tokens or [])
    return {"id": rid, "object": obj, "created": created, "model": model,
            "system_fingerprint": f"specllama-{__version__}", "choices": [choice], "usage": usage(stats),
            "timings": timings(stats)}


def _tools(req: Request) -> Optional[List[Dict[str, Any]]]:
    """The tools whose calls are read from req's reply (None: it gave none)."""
    return req.template_kwargs.get("tools") if req.tools else None


class ChunkWriter:
    """The chunks of a streamed answer's choice (index): text deltas, the final chunk with
    finish_reason (and timings), and, with include_usage, a last chunk with usage and no choices.
    The choices of one request share first's id and time."""

    def __init__(self, req: Request, model: str, index: int = 0, first: Optional["ChunkWriter"] = None) -> None:
        self.req, self.model, self.index = req, model, index
        self.id = first.id if first is not None else new_id(req.kind)
        self.created = first.created if first is not None else int(time.time())
        self.started = False
        self.n_text = 0  # characters of text sent (completions' text_offset)
        reader = req.reader.Reader(req.splits_reasoning(), _tools(req), req.opened) if req.reader else None
        self.reader = reader  # (reads the thinking, the answer and the calls of a whole reply format's replies)
        self.splitter = req.tool_format.StreamSplitter(_tools(req)) if req.tools and not reader else None
        self.thinking = reader or (reasoning.StreamSplitter(req.thinking_open, req.thinking_calls, req.channels())
                                    if req.splits_reasoning() else None)

    def _chunk(self, choice: Optional[dict], **extra) -> Dict[str, Any]:
        obj = "chat.completion.chunk" if self.req.kind == "chat" else "text_completion"
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.model,
               "system_fingerprint": f"specllama-{__version__}", "choices": [choice] if choice else []}
        if self.req.include_usage:
            out["usage"] = None
        out.update(extra)
        return out

    def _delta(self, delta: Dict[str, Any], logprobs: Optional[Dict[str, Any]] = None, finish=None, **extra):
        return self._chunk({"index": self.index, "delta": delta, "logprobs": logprobs, "finish_reason": finish},
                           **extra)

    def text(self, text: str, logprobs: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
        """The chunks for new text (and its tokens' logprobs_json object, which may come with none)."""
        out = []
        self.n_text += len(text)
        if self.req.kind == "chat":
            if not self.started:
                out.append(self._delta({"role": "assistant", "content": ""}))
            self.started = True
            deltas = self._chat_deltas(self.thinking.feed(text) if self.thinking else [(reasoning.CONTENT, text)])
            if logprobs and not deltas:
                deltas = [{"content": ""}]
            out += [self._delta(d, logprobs if i == len(deltas) - 1 else None) for i, d in enumerate(deltas)]
        elif text or logprobs:
            out.append(self._chunk({"index": self.index, "text": text, "logprobs": logprobs, "finish_reason": None}))
        return out

    def _chat_deltas(self, pieces) -> List[Dict[str, Any]]:
        """A chat stream's deltas for (reasoning.REASONING or CONTENT, text) pieces: thinking as
        reasoning_content, the answer's text through the tool-call splitter where tools were given."""
        deltas = []
        for kind, text in pieces:
            if kind == reasoning.REASONING:
                deltas.append({"reasoning_content": text})
                continue
            if self.splitter is not None:
                text = self.splitter.feed(text)
            if text:
                deltas.append({"content": text})
        return deltas

    def end(self, finish_reason: str, stats, with_usage: bool = True) -> List[Dict[str, Any]]:
        """The choice's last chunks; with_usage (and include_usage): then the usage chunk of stats."""
        out = self.text("") if self.req.kind == "chat" and not self.started else []
        fr = FINISH.get(finish_reason, finish_reason)
        calls: List[Dict[str, Any]] = []
        if self.reader is not None:
            pieces, calls = self.reader.finish()
            out += [self._delta(d) for d in self._chat_deltas(pieces)]
        elif self.thinking is not None:
            out += [self._delta(d) for d in self._chat_deltas(self.thinking.finish())]
        if self.splitter is not None:
            rest, calls = self.splitter.finish()
            if rest:
                out.append(self._delta({"content": rest}))
        if calls:
            out.append(self._delta({"tool_calls": [dict(c, index=i) for i, c in enumerate(calls)]}))
            fr = "tool_calls"
        if self.req.kind == "chat":
            out.append(self._delta({}, finish=fr, timings=timings(stats)))
        else:
            out.append(self._chunk({"index": self.index, "text": "", "logprobs": None, "finish_reason": fr},
                                   timings=timings(stats)))
        if with_usage:
            out += self.usage_chunk(usage(stats))
        return out

    def usage_chunk(self, usage_obj: Dict[str, Any]) -> List[Dict[str, Any]]:
        """With include_usage, the last chunk: usage_obj and no choices."""
        if not self.req.include_usage:
            return []
        last = self._chunk(None)
        last["usage"] = usage_obj
        return [last]


def run(dec, req: Request, model: str, template: Optional[str] = None):
    """Serve req on dec in this thread: the response dict, or (stream) an iterator of chunks."""
    tokens = prompt_tokens(dec, req, template)
    opts = options_for(dec, req, len(tokens))
    if not req.stream:
        rid, created, answers, all_stats = new_id(req.kind), int(time.time()), [], []
        for c in range(req.n):
            out = dec.generate(tokens, choice_options(opts, c))
            answers.append(response(req, rid, model, created, out.text, out.finish_reason, out.stats, out.tokens,
                                    logprobs_json(req, dec.target_model, out.logprobs)))
            all_stats.append(out.stats)
        return response_of_choices(answers, all_stats)
    return _stream(dec, tokens, opts, req, model)


def _stream(dec, tokens: List[int], opts: GenerateOptions, req: Request, model: str):
    first, all_stats = None, []
    for c in range(req.n):
        writer = ChunkWriter(req, model, c, first)
        first = first or writer
        for chunk in dec.stream(tokens, choice_options(opts, c)):
            if chunk.finish_reason is not None:
                all_stats.append(chunk.stats)
                yield from writer.end(chunk.finish_reason, chunk.stats, with_usage=False)
            else:
                yield from writer.text(chunk.text, logprobs_json(req, dec.target_model, chunk.logprobs, writer.n_text))
    yield from first.usage_chunk(total_usage(all_stats))


# --- llama-cpp-python's method names on the decoder ----------------------------------------------

def create_chat_completion(self: SpeculativeDecoder, messages: Sequence[dict], *, stream: bool = False,
                           chat_template: Optional[str] = None, **fields):
    """An OpenAI chat completion for messages: a dict shaped like OpenAI's ("choices",
    "usage", and llama-server's "timings"), or with stream=True an iterator of chunk dicts.
    fields are the request fields of /v1/chat/completions (max_tokens, temperature, top_p,
    top_k, min_p, stop, seed, n, stream_options, and specllama's speculative, n_draft, drafter,
    ignore_eos); one it cannot honour raises specllama.RequestError (a ValueError) naming it.
    The prompt is the chat template's (chat_template: a built-in name or Jinja file instead);
    max_tokens None runs up to the end of the context."""
    req = parse(dict(fields, messages=list(messages), stream=stream), "chat")
    return run(self, req, req.model or self.model_name, chat_template)


def create_completion(self: SpeculativeDecoder, prompt: Union[str, Sequence[int]], *, stream: bool = False,
                      **fields):
    """An OpenAI text completion of prompt (text or token ids), as create_chat_completion."""
    req = parse(dict(fields, prompt=prompt if isinstance(prompt, str) else list(prompt), stream=stream), "text")
    return run(self, req, req.model or self.model_name)


SpeculativeDecoder.create_chat_completion = create_chat_completion
SpeculativeDecoder.create_completion = create_completion
