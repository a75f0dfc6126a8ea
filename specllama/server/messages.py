"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) served over chat completions,
as llama-server serves it: system and messages become chat messages (tool_use blocks an
assistant's tool_calls, tool_result blocks tool messages), tools chat tools, tool_choice and
output_config.format the chat's; the chat answer becomes a message with text and tool_use blocks,
and its chunks Anthropic's stream events. Errors have Anthropic's shape."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from fastapi.responses import JSONResponse

from .. import reasoning
from ..completions import RequestError
from .native_completion import stopping_word
from .responses import check_fields, new_id

# fields that go to the chat request as they are (the chat parser checks them)
_CHAT = {"model", "max_tokens", "temperature", "top_p", "top_k", "stream",
         # specllama's and llama-server's extensions, as on /v1/chat/completions
         "seed", "min_p", "ignore_eos", "speculative", "n_draft", "drafter", "presence_penalty", "frequency_penalty",
         "repeat_penalty", "repeat_last_n", "logit_bias", "chat_template_kwargs", "grammar", "json_schema",
         "cache_prompt", "id_slot"}
_PASSIVE = {"metadata", "service_tier", "cache_control"}  # (the slot's cache is always reused)
_NEUTRAL = {"container": (), "mcp_servers": ([],), "context_management": ()}
_HANDLED = {"system", "messages", "tools", "tool_choice", "stop_sequences", "output_config", "thinking"}
FIELDS = _CHAT | _PASSIVE | set(_NEUTRAL) | _HANDLED
# Anthropic's error types by HTTP status
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def chat_body(body: Any, count_only: bool = False) -> Dict[str, Any]:
    """The /v1/chat/completions body a /v1/messages body asks for (RequestError where it cannot);
    count_only: for count_tokens, where max_tokens is not required."""
    check_fields(body, FIELDS, _NEUTRAL, "/v1/messages")
    if body.get("max_tokens") is None and not count_only:
        raise RequestError("'max_tokens' is required", "max_tokens", "invalid_value")
    out = {k: v for k, v in body.items() if k in _CHAT}
    out["messages"] = _system(body.get("system")) + _messages(body.get("messages"))
    if body.get("stream"):
        out["stream_options"] = {"include_usage": True}
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise RequestError("'stop_sequences' must be a list of strings", "stop_sequences", "invalid_type")
        out["stop"] = stops
    if body.get("tools") is not None:
        out["tools"] = _tools(body["tools"])
    choice = body.get("tool_choice")
    if choice is not None:
        out["tool_choice"], parallel = _tool_choice(choice)
        if parallel is not None:
            out["parallel_tool_calls"] = parallel
    fmt = _format(body.get("output_config"), out)
    if fmt is not None:
        out["response_format"] = fmt
    _thinking(body.get("thinking"), out)
    return out


def _thinking(thinking: Any, out: Dict[str, Any]) -> None:
    """Anthropic's thinking: {"type": "enabled", "budget_tokens": N} asks the template to think
    (enable_thinking) with a budget of N tokens (llama-server's reasoning_budget_tokens);
    {"type": "adaptive"} asks it to think with no budget (the model decides how much);
    {"type": "disabled"} changes nothing."""
    if thinking is None or thinking == {"type": "disabled"}:
        return
    if thinking == {"type": "adaptive"}:
        out["chat_template_kwargs"] = {"enable_thinking": True, **(out.get("chat_template_kwargs") or {})}
        return
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled" or isinstance(budget, bool) or \
            not isinstance(budget, int) or budget < 0 or set(thinking) - {"type", "budget_tokens"}:
        raise RequestError("'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N}, "
                           "{\"type\": \"adaptive\"} or {\"type\": \"disabled\"}", "thinking", "invalid_value")
    out["reasoning_budget_tokens"] = budget
    out["chat_template_kwargs"] = {"enable_thinking": True, **(out.get("chat_template_kwargs") or {})}


def _system(system: Any) -> List[Dict[str, Any]]:
    if system is None or system == "" or system == []:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    return [{"role": "system", "content": _text_of(system, "system", ("text",))}]


def _text_of(blocks: Any, where: str, kinds) -> str:
    """The text of a content given as blocks (the kinds allowed), or as a string."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise RequestError(f"'{where}' must be a text or a list of content blocks", where.split(".")[0],
                           "invalid_type")
    out = []
    for b in blocks:
        kind = b.get("type") if isinstance(b, dict) else None
        if kind not in kinds:
            raise RequestError(f"{where}: content blocks of type {kind!r} are not supported (this server takes "
                               f"{', '.join(kinds)})", where.split(".")[0].split("[")[0], "unsupported_value")
        if not isinstance(b.get("text"), str):
            raise RequestError(f"{where}: a text block needs its text", where.split("[")[0], "invalid_value")
        out.append(b["text"])
    return "".join(out)


def _messages(messages: Any) -> List[Dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of messages", "messages",
                           "invalid_value" if isinstance(messages, list) else "invalid_type")
    out: List[Dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise RequestError(f"{where} must be a message whose role is user or assistant", "messages",
                               "invalid_value")
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
        elif isinstance(content, list):
            out += (_assistant if m["role"] == "assistant" else _user)(content, where)
        else:
            raise RequestError(f"{where}.content must be a text or a list of content blocks", "messages",
                               "invalid_type")
    return out


def _assistant(blocks: List[Any], where: str) -> List[Dict[str, Any]]:
    """An assistant's blocks: its text, its tool_use blocks as tool_calls, and its thinking blocks'
    text as reasoning_content (templates that show past thinking read it; redacted thinking has none)."""
    text, calls, thought = [], [], []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            text.append(_text_of([b], f"{where}.content[{j}]", ("text",)))
        elif kind == "tool_use":
            if not isinstance(b.get("id"), str) or not isinstance(b.get("name"), str) or not isinstance(
                    b.get("input", {}), dict):
                raise RequestError(f"{where}.content[{j}]: a tool_use block needs id, name and input", "messages",
                                   "invalid_value")
            calls.append({"id": b["id"], "type": "function",
                          "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))}})
        elif kind == "thinking":
            if not isinstance(b.get("thinking"), str):
                raise RequestError(f"{where}.content[{j}]: a thinking block needs its thinking", "messages",
                                   "invalid_value")
            thought.append(b["thinking"])
        elif kind != "redacted_thinking":
            raise RequestError(f"{where}.content[{j}]: an assistant's blocks of type {kind!r} are not supported "
                               "(text, tool_use and thinking are)", "messages", "unsupported_value")
    msg: Dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        msg["tool_calls"] = calls
    if "".join(thought):
        msg["reasoning_content"] = "".join(thought)
    return [msg] if text or calls else []


def _user(blocks: List[Any], where: str) -> List[Dict[str, Any]]:
    """A user's blocks: tool_result blocks as tool messages (first: they answer the calls before),
    then the text as a user message."""
    results, text = [], []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "tool_result":
            if not isinstance(b.get("tool_use_id"), str):
                raise RequestError(f"{where}.content[{j}]: a tool_result block needs its tool_use_id", "messages",
                                   "invalid_value")
            content = _text_of(b.get("content", ""), f"{where}.content[{j}].content", ("text",))
            results.append({"role": "tool", "tool_call_id": b["tool_use_id"],
                            "content": f"Error: {content}" if b.get("is_error") else content})
        else:
            text.append(_text_of([b], f"{where}.content[{j}]", ("text", "tool_result")))
    return results + ([{"role": "user", "content": "".join(text)}] if text else [])


def _tools(tools: Any) -> List[Dict[str, Any]]:
    """Chat tools of Anthropic's client tools (server tools, such as web search, are Anthropic's to run)."""
    if not isinstance(tools, list):
        raise RequestError("'tools' must be a list of tools", "tools", "invalid_type")
    out = []
    for t in tools:
        if not isinstance(t, dict) or t.get("type", "custom") != "custom" or "input_schema" not in t:
            kind = t.get("type") if isinstance(t, dict) else None
            raise RequestError(f"tools of type {kind!r} are not supported (only client tools with an input_schema)",
                               "tools", "unsupported_value")
        fn = {"name": t.get("name"), "parameters": t["input_schema"]}
        if t.get("description"):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any):
    """The chat's tool_choice and parallel_tool_calls (None: not given) of Anthropic's tool_choice."""
    kind = choice.get("type") if isinstance(choice, dict) else None
    chat = {"auto": "auto", "any": "required", "none": "none"}.get(kind)
    if kind == "tool" and isinstance(choice.get("name"), str):
        chat = {"type": "function", "function": {"name": choice["name"]}}
    if chat is None:
        raise RequestError("'tool_choice' must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"none\"} or "
                           "{\"type\": \"tool\", \"name\": ...}", "tool_choice", "invalid_value")
    parallel = choice.get("disable_parallel_tool_use")
    return chat, (None if parallel is None else not parallel)


def _format(config: Any, out: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The response_format of output_config.format (None where it has none); its effort goes to the
    chat request as reasoning_effort (the template's reasoning level, as llama-server reads it)."""
    if config is None:
        return None
    if not isinstance(config, dict) or set(config) - {"format", "effort"}:
        raise RequestError("'output_config' may hold a format and an effort", "output_config", "invalid_value")
    if config.get("effort") is not None:
        try:
            out["reasoning_effort"] = reasoning.check_effort(config["effort"], "output_config.effort")
        except ValueError as exc:
            raise RequestError(str(exc), "output_config", "invalid_value") from None
    fmt = config.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise RequestError("'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}",
                           "output_config", "invalid_value")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}


def error_response(exc: RequestError) -> JSONResponse:
    """A request error in Anthropic's shape ({"type": "error", "error": {"type", "message"}})."""
    body = {"type": "error", "error": {"type": _ERROR_TYPES.get(exc.status, "api_error"), "message": exc.message}}
    return JSONResponse(body, status_code=exc.status, headers={"Retry-After": "1"} if exc.status == 503 else None)


def _usage(u: Dict[str, Any]) -> Dict[str, Any]:
    """Anthropic's usage: input_tokens are the prompt's tokens not read from the cache."""
    cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return {"input_tokens": u["prompt_tokens"] - cached, "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0, "output_tokens": u["completion_tokens"]}


class Message:
    """The answer to one /v1/messages request: a message whole (from a chat answer), or built up
    as stream events from a chat stream's chunks."""

    def __init__(self, body: Dict[str, Any], model: str, decoder) -> None:
        self.body, self.model, self.decoder = body, model, decoder
        self.id = new_id("msg")
        self.stops = list(body.get("stop_sequences") or [])
        self.blocks = 0  # content blocks opened
        self.open_block: Optional[str] = None  # the type of the block being streamed ("thinking", "text")
        self.stop_sequence: Optional[str] = None
        self.finish: Optional[str] = None

    @staticmethod
    def error(exc: RequestError) -> JSONResponse:
        return error_response(exc)

    def finished(self, out) -> List[Dict[str, str]]:
        """Note which stop sequence ended the generation (out: its result)."""
        self.stop_sequence = stopping_word(self.decoder, out, self.stops) or None
        return []

    def _stop_reason(self, finish_reason: Optional[str]) -> str:
        if finish_reason == "length":
            return "max_tokens"
        if finish_reason == "tool_calls":
            return "tool_use"
        return "stop_sequence" if self.stop_sequence else "end_turn"

    def _message(self, content, stop_reason, usage) -> Dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": stop_reason, "stop_sequence": self.stop_sequence, "usage": usage}

    def whole(self, answer: Dict[str, Any], outs) -> Dict[str, Any]:
        """The message of a whole chat answer (outs: the generation's results)."""
        self.finished(outs[0])
        choice = answer["choices"][0]
        msg = choice["message"]
        content = [self._thinking(msg["reasoning_content"])] if msg.get("reasoning_content") else []
        content += [{"type": "text", "text": msg["content"]}] if msg.get("content") else []
        content += [self._tool_use(c) for c in msg.get("tool_calls") or []]
        return self._message(content, self._stop_reason(choice["finish_reason"]), _usage(answer["usage"]))

    @staticmethod
    def _thinking(text: str) -> Dict[str, Any]:
        return {"type": "thinking", "thinking": text, "signature": ""}  # (nothing to sign: a local model's)

    @staticmethod
    def _tool_use(call: Dict[str, Any]) -> Dict[str, Any]:
        try:
            arguments = json.loads(call["function"]["arguments"])
        except ValueError:
            arguments = {}
        return {"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": arguments}

    # -- streamed ----------------------------------------------------------------------------------

    @staticmethod
    def _event(kind: str, **data) -> Dict[str, str]:
        return {"event": kind, "data": json.dumps({"type": kind, **data})}

    def start(self, n_prompt: int) -> List[Dict[str, str]]:
        usage = {"input_tokens": n_prompt, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
                 "output_tokens": 0}
        return [self._event("message_start", message=self._message([], None, usage))]

    def events(self, chunk: Dict[str, Any]) -> List[Dict[str, str]]:
        """The events of one chat chunk (an error's body ends the stream with an error event)."""
        if "error" in chunk:
            err = chunk["error"]
            kind = "overloaded_error" if err.get("code") == "server_busy" else "api_error"
            return [self._event("error", error={"type": kind, "message": err.get("message")})]
        out = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._streamed("thinking", self._thinking(""),
                                      {"type": "thinking_delta", "thinking": delta["reasoning_content"]})
            if delta.get("content"):
                out += self._streamed("text", {"type": "text", "text": ""},
                                      {"type": "text_delta", "text": delta["content"]})
            for call in delta.get("tool_calls") or []:
                out += self._close_block()
                block = dict(self._tool_use(call), input={})
                out += [self._event("content_block_start", index=self.blocks, content_block=block),
                        self._event("content_block_delta", index=self.blocks,
                                    delta={"type": "input_json_delta", "partial_json": call["function"]["arguments"]}),
                        self._event("content_block_stop", index=self.blocks)]
                self.blocks += 1
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
                out += self._close_block()
        if chunk.get("usage"):
            out += [self._event("message_delta", delta={"stop_reason": self._stop_reason(self.finish),
                                                        "stop_sequence": self.stop_sequence},
                                usage=_usage(chunk["usage"])),
                    self._event("message_stop")]
        return out

    def _streamed(self, kind: str, start: Dict[str, Any], delta: Dict[str, Any]) -> List[Dict[str, str]]:
        """A delta of the block of this kind (start: how it opens), opened after closing another."""
        out = []
        if self.open_block != kind:
            out = self._close_block() + [self._event("content_block_start", index=self.blocks, content_block=start)]
            self.open_block = kind
        return out + [self._event("content_block_delta", index=self.blocks, delta=delta)]

    def _close_block(self) -> List[Dict[str, str]]:
        if self.open_block is None:
            return []
        self.open_block = None
        self.blocks += 1
        return [self._event("content_block_stop", index=self.blocks - 1)]
