"""Ollama's API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version) served over
the chat and text completions, so that tools written for Ollama (its Python and JavaScript clients,
editors' and chat front ends' Ollama providers) run on the served models: messages and tool calls
become chat messages, options the sampling fields, format a response_format; /api/generate is a
chat completion of its prompt, a text completion where raw, and fill-in-the-middle where it has a
suffix. Answers are Ollama's objects, streamed (Ollama's default) as lines of JSON; errors are
{"error": message}."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from fastapi.responses import JSONResponse

from .. import reasoning, templates, tools
from .._version import __version__
from ..completions import RequestError
from .responses import check_fields

# options that go to the completion request as the field of the same name
_SAMPLING = {"temperature", "top_k", "top_p", "min_p", "seed", "stop", "repeat_penalty", "repeat_last_n",
             "presence_penalty", "frequency_penalty"}
# options about the runtime (the server's own command line sets those), or about what is not used here
_RUNTIME = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "use_mmap", "use_mlock", "numa", "low_vram",
            "vocab_only", "f16_kv", "logits_all", "num_keep", "penalize_newline", "mirostat_tau", "mirostat_eta"}
# options accepted at the value that changes nothing
_NEUTRAL_OPTIONS = {"typical_p": (1, 1.0), "tfs_z": (1, 1.0), "mirostat": (0,)}
THINK_LEVELS = ("low", "medium", "high")
_CHAT_FIELDS = {"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think"}
_GENERATE_FIELDS = {"model", "prompt", "suffix", "system", "template", "context", "raw", "format", "options", "stream",
                    "keep_alive", "images", "think"}
_NEUTRAL = {"template": ("",), "context": ([],), "images": ([],)}
_WHY = {"template": "the server renders prompts with the model's own chat template",
        "context": "send the conversation to /api/chat instead",
        "images": "the served model reads text only"}
_MESSAGE_FIELDS = {"role", "content", "images", "tool_calls", "tool_name", "thinking"}


def model_name(body: Dict[str, Any]) -> Optional[str]:
    """The model a request names, without Ollama's default tag (":latest")."""
    name = body.get("model", body.get("name"))
    if name is not None and not isinstance(name, str):
        raise RequestError("'model' must be a string", "model", "invalid_type")
    return name[:-len(":latest")] if name and name.endswith(":latest") else name


def _options(options: Any) -> Dict[str, Any]:
    """The completion request's fields for Ollama's options."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise RequestError("'options' must be an object", "options", "invalid_type")
    out: Dict[str, Any] = {}
    for name, value in options.items():
        if name in _SAMPLING:
            out[name] = value
        elif name == "num_predict":
            if not isinstance(value, int) or isinstance(value, bool):
                raise RequestError("'options.num_predict' must be an integer", "options", "invalid_type")
            if value >= 0:
                out["max_tokens"] = value  # -1: no limit, -2: up to the context's end (the same here)
        elif name in _NEUTRAL_OPTIONS:
            if value not in _NEUTRAL_OPTIONS[name]:
                raise RequestError(f"'options.{name}' is not supported here (only {_NEUTRAL_OPTIONS[name][-1]})",
                                   "options", "unsupported_value")
        elif name not in _RUNTIME:
            raise RequestError(f"unknown option '{name}'", "options", "unsupported_field")
    return out


def _format(fmt: Any) -> Optional[Dict[str, Any]]:
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return {"type": "json_object"}
    if isinstance(fmt, dict):
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt}}
    raise RequestError("'format' must be \"json\" or a JSON schema", "format", "invalid_value")


def _think(body: Dict[str, Any], out: Dict[str, Any], thinks: bool) -> None:
    """Ollama's think: true, the thinking comes back apart (message.thinking) and the template is
    asked for it (enable_thinking); a level ("low", "medium", "high") is true with that level given
    to the template as its reasoning_effort (as gpt-oss's reads it); false, it is asked not to think
    and any text stays the answer's; not given, the model thinks as its template has it, and its
    thinking comes back apart."""
    think = body.get("think")
    if think is None:
        return
    if not isinstance(think, bool) and think not in THINK_LEVELS:
        raise RequestError("'think' must be true, false or a level (\"low\", \"medium\", \"high\")", "think",
                           "invalid_value")
    if think is not False and not thinks:
        raise RequestError("'think' is not supported (the served model has no thinking mode to turn on)", "think",
                           "unsupported_field")
    out["reasoning_format"] = "auto" if think is not False else "none"
    out["chat_template_kwargs"] = {"enable_thinking": think is not False}
    if isinstance(think, str):
        out["reasoning_effort"] = think


def _common(body: Dict[str, Any]) -> Dict[str, Any]:
    out = {"model": model_name(body), "stream": body.get("stream", True), **_options(body.get("options"))}
    if not isinstance(out["stream"], bool):
        raise RequestError("'stream' must be a boolean", "stream", "invalid_type")
    if out["stream"]:
        out["stream_options"] = {"include_usage": True}
    fmt = _format(body.get("format"))
    if fmt is not None:
        out["response_format"] = fmt
    return out


def chat_body(body: Any, thinks: bool = False) -> Optional[Dict[str, Any]]:
    """The /v1/chat/completions body an /api/chat body asks for; None where it has no messages
    (Ollama's way to load a model). thinks: whether the served model's template has a thinking mode."""
    check_fields(body, _CHAT_FIELDS, _NEUTRAL, "/api/chat", _WHY)
    messages = body.get("messages")
    if messages is None or messages == []:
        return None
    out = _common(body)
    _think(body, out, thinks)
    out["messages"] = _messages(messages)
    if body.get("tools") is not None:
        out["tools"] = body["tools"]  # OpenAI's shape: the chat parser checks them
    return out


def generate_body(body: Any, thinks: bool = False) -> Tuple[str, Optional[Dict[str, Any]]]:
    """The completion an /api/generate body asks for: ("chat", a chat body) for a prompt in the
    model's chat template, ("text", a text completion body) where raw or with a suffix; None where
    it has no prompt (Ollama's way to load a model). thinks: as chat_body's."""
    check_fields(body, _GENERATE_FIELDS, _NEUTRAL, "/api/generate", _WHY)
    prompt, suffix, system = body.get("prompt"), body.get("suffix"), body.get("system")
    for name, value in (("prompt", prompt), ("suffix", suffix), ("system", system)):
        if value is not None and not isinstance(value, str):
            raise RequestError(f"'{name}' must be a string", name, "invalid_type")
    if not isinstance(body.get("raw", False), bool):
        raise RequestError("'raw' must be a boolean", "raw", "invalid_type")
    if not prompt and not suffix:
        return "chat", None
    out = _common(body)
    if body.get("raw") or suffix:
        if body.get("think"):
            raise RequestError("'think' needs a chat prompt, not raw text or an infill", "think", "invalid_value")
        out["prompt"] = prompt or ""  # as Ollama, the system prompt has no place in raw text or an infill
        if suffix:
            out["suffix"] = suffix
        return "text", out
    _think(body, out, thinks)
    out["messages"] = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return "chat", out


def _messages(messages: Any) -> List[Dict[str, Any]]:
    """Chat messages of Ollama's: an assistant's tool_calls get ids, which the tool messages after
    them answer in order."""
    if not isinstance(messages, list):
        raise RequestError("'messages' must be a list", "messages", "invalid_type")
    out, pending, n_calls = [], [], 0
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError(f"{where} must be an object", "messages", "invalid_type")
        extra = set(m) - _MESSAGE_FIELDS
        if extra:
            raise RequestError(f"{where} has an unknown field '{sorted(extra)[0]}'", "messages", "unsupported_field")
        if m.get("images"):
            raise RequestError(f"{where}: images are not supported (the served model reads text only)", "messages",
                               "unsupported_field")
        msg = {"role": m.get("role"), "content": m.get("content") or ""}
        if m.get("thinking"):
            msg["reasoning_content"] = m["thinking"]  # (templates that show past thinking read it there)
        if m.get("tool_calls"):
            if not msg["content"]:
                msg["content"] = None  # (as OpenAI's clients send a call without text; templates tell the two apart)
            msg["tool_calls"], ids = _calls(m["tool_calls"], where, n_calls)
            n_calls += len(ids)
            pending = ids
        if m.get("role") == "tool":
            msg["tool_call_id"] = pending.pop(0) if pending else f"call_{n_calls}"
        out.append(msg)
    return out


def _calls(calls: Any, where: str, first: int) -> Tuple[List[Dict[str, Any]], List[str]]:
    if not isinstance(calls, list):
        raise RequestError(f"{where}.tool_calls must be a list", "messages", "invalid_type")
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise RequestError(f"{where}.tool_calls[{j}] must be {{\"function\": {{\"name\", \"arguments\"}}}}",
                               "messages", "invalid_value")
        args = fn.get("arguments", {})
        out.append({"id": f"call_{first + j}", "type": "function",
                    "function": {"name": fn["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return out, [c["id"] for c in out]


def now() -> str:
    """An RFC 3339 time, as Ollama writes created_at."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def error_response(exc: RequestError) -> JSONResponse:
    return JSONResponse({"error": exc.message}, status_code=exc.status,
                        headers={"Retry-After": "1"} if exc.status == 503 else None)


def loaded(model: str, api: str) -> Dict[str, Any]:
    """Ollama's answer to a request with nothing to generate: the model is loaded (it always is here)."""
    body = {"model": model, "created_at": now(), "done": True, "done_reason": "load"}
    body.update({"message": {"role": "assistant", "content": ""}} if api == "chat" else {"response": ""})
    return body


def _calls_out(calls) -> List[Dict[str, Any]]:
    out = []
    for c in calls or []:
        try:
            args = json.loads(c["function"]["arguments"])
        except ValueError:
            args = {}
        out.append({"function": {"name": c["function"]["name"], "arguments": args}})
    return out


class Answer:
    """The answer to one /api/chat (api "chat") or /api/generate ("generate") request, from the
    chat or text completion it was served as: one object, or lines of JSON as it generates."""

    ndjson = True

    def __init__(self, api: str, model: str) -> None:
        self.api, self.model, self.t0 = api, model, time.monotonic_ns()
        self.finish: Optional[str] = None
        self.timings: Dict[str, Any] = {}

    @staticmethod
    def error(exc: RequestError) -> JSONResponse:
        return error_response(exc)

    def start(self, n_prompt: int) -> List[Dict[str, Any]]:
        return []

    def finished(self, out) -> List[Dict[str, Any]]:
        return []

    def _line(self, text: str, calls=None, thinking: Optional[str] = None, **done) -> Dict[str, Any]:
        body: Dict[str, Any] = {"model": self.model, "created_at": now()}
        if self.api == "chat":
            body["message"] = {"role": "assistant", "content": text}
            if thinking:
                body["message"]["thinking"] = thinking
            if calls:
                body["message"]["tool_calls"] = _calls_out(calls)
        else:
            body["response"] = text
            if thinking:
                body["thinking"] = thinking
        body["done"] = bool(done)
        body.update(done)
        return body

    def _done(self, usage: Dict[str, Any]) -> Dict[str, Any]:
        t = self.timings
        return {"done_reason": "length" if self.finish == "length" else "stop",
                "total_duration": time.monotonic_ns() - self.t0, "load_duration": 0,
                "prompt_eval_count": usage.get("prompt_tokens", 0),
                "prompt_eval_duration": int(t.get("prompt_ms", 0.0) * 1e6),
                "eval_count": usage.get("completion_tokens", 0),
                "eval_duration": int(t.get("predicted_ms", 0.0) * 1e6)}

    def whole(self, answer: Dict[str, Any], outs) -> Dict[str, Any]:
        choice = answer["choices"][0]
        self.finish, self.timings = choice.get("finish_reason"), answer.get("timings") or {}
        msg = choice.get("message") or {"content": choice.get("text")}  # a chat or a text completion's
        return self._line(msg.get("content") or "", msg.get("tool_calls"), msg.get("reasoning_content"),
                          **self._done(answer["usage"]))

    def events(self, chunk: Dict[str, Any]) -> List[Dict[str, Any]]:
        """The lines of one completion chunk (an error's body ends the stream with an error line)."""
        if "error" in chunk:
            return [{"error": chunk["error"].get("message")}]
        out = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content") if "delta" in choice else choice.get("text")
            if text or delta.get("tool_calls") or delta.get("reasoning_content"):
                out.append(self._line(text or "", delta.get("tool_calls"), delta.get("reasoning_content")))
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
                self.timings = chunk.get("timings") or self.timings
        if chunk.get("usage"):
            out.append(self._line("", **self._done(chunk["usage"])))
        return out


# -- what is served ----------------------------------------------------------------------------------


def _quantization(kind: str) -> str:
    """llama.cpp's name of a file type as Ollama writes it ('Q4_K - Medium' -> 'Q4_K_M')."""
    m = re.fullmatch(r"(\w+) - (Small|Medium|Large)", kind)
    return f"{m.group(1)}_{m.group(2)[0]}" if m else kind


def details(decoder) -> Dict[str, Any]:
    """Ollama's details of the served target, from llama.cpp's description of it ('qwen2 1.5B Q4_K - Medium')."""
    parts = decoder.target_model.description.split(" ", 2)
    family = parts[0] if parts else ""
    return {"parent_model": "", "format": "gguf", "family": family, "families": [family],
            "parameter_size": parts[1] if len(parts) > 1 else "",
            "quantization_level": _quantization(parts[2]) if len(parts) > 2 else ""}


def _file(decoder) -> Dict[str, Any]:
    st = os.stat(decoder.model_path)
    # names the file (path, size, time), not a hash of its contents: reading gigabytes to list models is not worth it
    digest = hashlib.sha256(f"{decoder.model_path}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()
    modified = datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    return {"size": st.st_size, "digest": digest, "modified_at": modified}


def tags(name: str, decoder) -> Dict[str, Any]:
    f = _file(decoder)
    return {"models": [{"name": name, "model": name, "modified_at": f["modified_at"], "size": f["size"],
                        "digest": f["digest"], "details": details(decoder)}]}


def running(name: str, decoder) -> Dict[str, Any]:
    """/api/ps: the served model, in memory until the server stops; size_vram what llama.cpp put
    of its weights outside the host's buffers."""
    f = _file(decoder)
    vram = sum(mib for buf, mib in decoder.target_model.weight_buffers.items() if not buf.startswith("CPU"))
    return {"models": [{"name": name, "model": name, "size": f["size"], "digest": f["digest"],
                        "details": details(decoder), "expires_at": "9999-12-31T23:59:59Z",
                        "size_vram": int(vram * (1 << 20)), "context_length": decoder.n_ctx}]}


def thinks(decoder, template: Optional[str] = None) -> bool:
    """Whether the chat template served with (the model's own where template is None) has a
    thinking mode (gpt-oss's harmony format thinks in its analysis channel)."""
    try:
        source = templates.template_source(decoder.target_model, template)
        return reasoning.template_markup(source) is not None or tools.harmony.is_harmony(source)
    except templates.ChatTemplateError:
        return False


def show(name: str, decoder, n_ctx: int, template_used: Optional[str] = None) -> Dict[str, Any]:
    """/api/show: the model's details, its chat template (Jinja, not a Go template), what it can do
    (tools where the template a request with tools gets takes them, thinking where the template
    served with has a thinking mode, insert where the vocabulary has fill-in-the-middle tokens) and
    the context this server serves as its context length."""
    model = decoder.target_model
    d = details(decoder)
    template = model.chat_template or ""
    try:  # (the template a request with tools is rendered with: a GGUF's tool_use template, say)
        with_tools = templates.template_source(model, template_used, tools=True)
    except templates.ChatTemplateError:
        with_tools = ""
    fim = model.fim_tokens
    capabilities = ["completion"] + (["tools"] if "tools" in with_tools else []) + \
        (["thinking"] if thinks(decoder, template_used) else [])
    if fim["pre"] >= 0 and fim["suf"] >= 0 and fim["mid"] >= 0:
        capabilities.append("insert")
    info = {"general.architecture": d["family"], f"{d['family']}.context_length": n_ctx,
            "general.basename": name}
    return {"modelfile": f"FROM {decoder.model_path}\n", "parameters": f"num_ctx {n_ctx}", "template": template,
            "details": d, "model_info": info, "capabilities": capabilities,
            "modified_at": _file(decoder)["modified_at"]}


def version() -> Dict[str, str]:
    return {"version": __version__}
