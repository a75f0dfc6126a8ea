"""OpenAI's Responses API (/v1/responses) served over chat completions, as llama-server serves it:
a request's input items become chat messages (instructions a system message first), its function
tools chat tools, text.format a response_format, max_output_tokens max_tokens; the chat answer
becomes a response object, and its chunks the Responses API's events. Nothing is stored, so
previous_response_id and conversation are refused; a client sends the whole conversation as input
items, as with store false."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Dict, List, Optional

from fastapi.responses import JSONResponse

from .. import reasoning
from ..completions import RequestError
from .errors import answer_error

# fields that go to the chat request as they are (the chat parser checks them)
_CHAT = {"model", "temperature", "top_p", "parallel_tool_calls", "metadata", "user", "service_tier",
         # specllama's and llama-server's extensions, as on /v1/chat/completions
         "seed", "top_k", "min_p", "stop", "ignore_eos", "speculative", "n_draft", "drafter", "presence_penalty",
         "frequency_penalty", "repeat_penalty", "repeat_last_n", "logit_bias", "chat_template_kwargs", "grammar",
         "json_schema", "cache_prompt", "id_slot"}
# fields accepted without effect: identifiers of a stored prompt cache or user, and storage (nothing is stored)
_PASSIVE = {"store", "prompt_cache_key", "safety_identifier"}
# fields accepted only at the value that asks for nothing, and what that is
_NEUTRAL = {"background": (False,), "previous_response_id": (), "conversation": (), "prompt": (),
            "truncation": ("disabled",), "top_logprobs": (0,), "max_tool_calls": ()}
# include values that ask for nothing here (no reasoning items are made)
_INCLUDE = {"reasoning.encrypted_content"}
_HANDLED = {"input", "instructions", "tools", "tool_choice", "text", "max_output_tokens", "stream",
            "stream_options", "include", "reasoning"}
# reasoning.summary values: accepted, and no summary is made (the thinking comes back whole, as reasoning_text)
_SUMMARIES = (None, "auto", "concise", "detailed")
FIELDS = _CHAT | _PASSIVE | set(_NEUTRAL) | _HANDLED


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def check_fields(body: Any, fields, neutral: Dict[str, tuple], endpoint: str,
                 why: Optional[Dict[str, str]] = None) -> None:
    """A JSON object of the endpoint's fields, those in neutral only at a value that asks for
    nothing (RequestError naming the first that is not; why: the reason given for a field)."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", None, "invalid_type")
    for name in body:
        if name not in fields:
            raise RequestError(f"unknown field '{name}' (this server does not support it on {endpoint})", name,
                               "unsupported_field")
    for name, values in neutral.items():
        if body.get(name) is not None and body[name] not in values:
            reason = (why or {}).get(name, "this server does not support it")
            raise RequestError(f"'{name}' is not supported ({reason})", name, "unsupported_field")


def chat_body(body: Any) -> Dict[str, Any]:
    """The /v1/chat/completions body a /v1/responses body asks for (RequestError where it cannot)."""
    check_fields(body, FIELDS, _NEUTRAL, "/v1/responses",
                 {name: "responses are not stored: send the conversation as input items"
                  for name in ("previous_response_id", "conversation")})
    include = body.get("include")
    if include is not None and (not isinstance(include, list) or not set(include) <= _INCLUDE):
        raise RequestError(f"'include' may hold only {sorted(_INCLUDE)} here", "include", "unsupported_field")
    so = body.get("stream_options")
    if so is not None and (not isinstance(so, dict) or set(so) - {"include_obfuscation"}):
        raise RequestError("'stream_options' may hold only include_obfuscation", "stream_options", "invalid_value")
    out = {k: v for k, v in body.items() if k in _CHAT}
    out["messages"] = _messages(body.get("input"), body.get("instructions"))
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    if body.get("stream") is not None:
        out["stream"] = body["stream"]
        out["stream_options"] = {"include_usage": True}
    if body.get("tools") is not None:
        out["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    fmt = _format(body.get("text"))
    if fmt is not None:
        out["response_format"] = fmt
    effort = _effort(body.get("reasoning"))
    if effort is not None:
        out["reasoning_effort"] = effort
    return out


def _effort(config: Any) -> Optional[str]:
    """The reasoning_effort of a reasoning object ({"effort": ..., "summary": ...}; None: no effort)."""
    if config is None:
        return None
    if not isinstance(config, dict) or set(config) - {"effort", "summary", "generate_summary"} or \
            config.get("summary") not in _SUMMARIES or config.get("generate_summary") not in _SUMMARIES:
        raise RequestError("'reasoning' must be {\"effort\": LEVEL, \"summary\": \"auto\"|\"concise\"|\"detailed\"}",
                           "reasoning", "invalid_value")
    if config.get("effort") is None:
        return None
    try:
        return reasoning.check_effort(config["effort"], "reasoning.effort")
    except ValueError as exc:
        raise RequestError(str(exc), "reasoning", "invalid_value") from None


def _messages(items: Any, instructions: Any) -> List[Dict[str, Any]]:
    """Chat messages of instructions and input (a text, or a list of input items)."""
    if instructions is not None and not isinstance(instructions, str):
        raise RequestError("'instructions' must be a string", "instructions", "invalid_type")
    messages = [{"role": "system", "content": instructions}] if instructions else []
    if isinstance(items, str):
        return messages + [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise RequestError("'input' must be a text or a non-empty list of input items", "input",
                           "invalid_value" if isinstance(items, list) else "invalid_type")
    thought = ""  # a reasoning item's text: the reasoning_content of the assistant's output that follows it
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("type") == "reasoning":
            thought = _reasoning_text(item.get("content"), f"input[{i}]")
            continue
        _add_item(messages, item, f"input[{i}]")
        if thought and messages[-1]["role"] == "assistant":
            messages[-1].setdefault("reasoning_content", thought)
        thought = ""
    return messages


def _add_item(messages: List[Dict[str, Any]], item: Any, where: str) -> None:
    """Append one input item to messages: a message, a function call (merged into the assistant
    message before it) or a call's output."""
    if not isinstance(item, dict):
        raise RequestError(f"{where} must be an object", "input", "invalid_type")
    kind = item.get("type", "message")
    last = messages[-1] if messages and messages[-1]["role"] == "assistant" else None
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise RequestError(f"{where}.role must be user, system, developer or assistant", "input", "invalid_value")
        text = _text(item.get("content"), f"{where}.content", assistant=role == "assistant")
        if role == "assistant" and last is not None and not last.get("content"):
            last["content"] = text
        else:
            messages.append({"role": "system" if role == "developer" else role, "content": text})
    elif kind == "function_call":
        if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
            raise RequestError(f"{where}: a function_call needs call_id, name and arguments as strings", "input",
                               "invalid_value")
        call = {"id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]}}
        if last is None:
            messages.append(last := {"role": "assistant", "content": None})
        last.setdefault("tool_calls", []).append(call)
    elif kind == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            raise RequestError(f"{where}: a function_call_output needs its call_id", "input", "invalid_value")
        messages.append({"role": "tool", "tool_call_id": item["call_id"],
                         "content": _text(item.get("output"), f"{where}.output")})
    else:
        raise RequestError(f"{where}: input items of type {kind!r} are not supported (message, function_call, "
                           "function_call_output and reasoning are)", "input", "unsupported_value")


def _reasoning_text(content: Any, where: str) -> str:
    """The text of a reasoning item's content (its reasoning_text parts; none: empty)."""
    if content is None:
        return ""
    parts = content if isinstance(content, list) else None
    if parts is None or not all(isinstance(p, dict) and p.get("type") == "reasoning_text"
                                and isinstance(p.get("text"), str) for p in parts):
        raise RequestError(f"{where}.content must be a list of reasoning_text parts", "input", "invalid_value")
    return "".join(p["text"] for p in parts)


def _text(content: Any, where: str, assistant: bool = False) -> str:
    """The text of a message's content: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(f"{where} must be a text or a list of content parts", "input", "invalid_type")
    kinds = ("output_text", "input_text", "refusal") if assistant else ("input_text", "output_text")
    out = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            raise RequestError(f"{where}: content parts of type {kind!r} are not supported (this server takes text: "
                               f"{', '.join(kinds)})", "input", "unsupported_value")
        text = part.get("refusal" if kind == "refusal" else "text")
        if not isinstance(text, str):
            raise RequestError(f"{where}: a {kind} part needs its text", "input", "invalid_value")
        out.append(text)
    return "".join(out)


def _tools(tools: Any) -> List[Dict[str, Any]]:
    """Chat tools of the Responses API's function tools (other kinds are the hosted tools of
    OpenAI's platform, which a local model cannot run)."""
    if not isinstance(tools, list):
        raise RequestError("'tools' must be a list of tools", "tools", "invalid_type")
    out = []
    for t in tools:
        if not isinstance(t, dict) or t.get("type") != "function":
            kind = t.get("type") if isinstance(t, dict) else None
            raise RequestError(f"tools of type {kind!r} are not supported (only function tools)", "tools",
                               "unsupported_value")
        out.append({"type": "function", "function": {k: v for k, v in t.items() if k != "type"}})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    if choice in ("auto", "none", "required"):
        return choice
    raise RequestError("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": "
                       "...}", "tool_choice", "invalid_value")


def _format(text: Any) -> Optional[Dict[str, Any]]:
    """The response_format of text.format (None for plain text)."""
    if text is None:
        return None
    if not isinstance(text, dict) or set(text) - {"format", "verbosity"}:
        raise RequestError("'text' may hold format (and verbosity)", "text", "invalid_value")
    fmt = text.get("format")
    if fmt is None or fmt == {"type": "text"}:
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and "schema" in fmt:
        return {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
    raise RequestError("'text.format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": "
                       "\"json_schema\", \"name\": ..., \"schema\": ...}", "text", "invalid_value")


def _usage(u: Dict[str, Any]) -> Dict[str, Any]:
    return {"input_tokens": u["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": u.get("prompt_tokens_details", {}).get("cached_tokens", 0)},
            "output_tokens": u["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u["total_tokens"]}


class Response:
    """A response object for one /v1/responses request: its id and the request's settings, whole
    (from a chat answer) or built up from a chat stream's chunks (events())."""

    def __init__(self, body: Dict[str, Any], model: str) -> None:
        self.body, self.model = body, model
        self.id, self.created = new_id("resp"), int(time.time())
        self.seq = 0
        self.output: List[Dict[str, Any]] = []
        self.message: Optional[Dict[str, Any]] = None  # the message item being streamed
        self.thought: Optional[Dict[str, Any]] = None  # the reasoning item being streamed
        self.finish: Optional[str] = None

    def object(self, status: str, usage: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        b = self.body
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "completed_at": int(time.time()) if status == "completed" else None,
                "error": None, "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete"
                                                      else None),
                "instructions": b.get("instructions"), "max_output_tokens": b.get("max_output_tokens"),
                "model": self.model, "output": self.output if status != "in_progress" else [],
                "parallel_tool_calls": b.get("parallel_tool_calls", True), "previous_response_id": None,
                "reasoning": {"effort": (b.get("reasoning") or {}).get("effort"),
                              "summary": (b.get("reasoning") or {}).get("summary")}, "store": False,
                "temperature": b.get("temperature"), "top_p": b.get("top_p"),
                "text": b.get("text") or {"format": {"type": "text"}}, "tool_choice": b.get("tool_choice", "auto"),
                "tools": b.get("tools") or [], "truncation": "disabled", "usage": usage,
                "metadata": b.get("metadata") or {}, "user": b.get("user")}

    @staticmethod
    def error(exc: RequestError) -> JSONResponse:
        return answer_error(exc)

    @staticmethod
    def finished(out) -> List[Dict[str, str]]:
        return []

    def whole(self, answer: Dict[str, Any], outs=None) -> Dict[str, Any]:
        """The response object of a whole chat answer."""
        choice = answer["choices"][0]
        msg = choice["message"]
        if msg.get("reasoning_content"):
            self.output.append(self._reasoning_item(msg["reasoning_content"], "completed"))
        if msg.get("content"):
            self.output.append(self._message_item(msg["content"], "completed"))
        for call in msg.get("tool_calls") or []:
            self.output.append(self._call_item(call))
        return self.object(self._status(choice["finish_reason"]), _usage(answer["usage"]))

    @staticmethod
    def _status(finish_reason: Optional[str]) -> str:
        return "incomplete" if finish_reason == "length" else "completed"

    @staticmethod
    def _message_item(text: str, status: str) -> Dict[str, Any]:
        return {"type": "message", "id": new_id("msg"), "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}

    @staticmethod
    def _reasoning_item(text: str, status: str) -> Dict[str, Any]:
        return {"type": "reasoning", "id": new_id("rs"), "status": status, "summary": [],
                "content": [{"type": "reasoning_text", "text": text}] if text else []}

    @staticmethod
    def _call_item(call: Dict[str, Any]) -> Dict[str, Any]:
        return {"type": "function_call", "id": new_id("fc"), "call_id": call["id"],
                "name": call["function"]["name"], "arguments": call["function"]["arguments"], "status": "completed"}

    # -- streamed ----------------------------------------------------------------------------------

    def _event(self, kind: str, **data) -> Dict[str, str]:
        """One server-sent event, named as its type (as OpenAI's are), numbered in sequence."""
        data = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return {"event": kind, "data": json.dumps(data)}

    def start(self, n_prompt: int = 0) -> List[Dict[str, str]]:
        return [self._event("response.created", response=self.object("in_progress")),
                self._event("response.in_progress", response=self.object("in_progress"))]

    def events(self, chunk: Dict[str, Any]) -> List[Dict[str, str]]:
        """The events of one chat chunk (an error's body ends the response as failed)."""
        if "error" in chunk:
            err = chunk["error"]
            failed = dict(self.object("failed"), error={"code": err.get("code"), "message": err.get("message")})
            return [self._event("error", code=err.get("code"), message=err.get("message"), param=err.get("param")),
                    self._event("response.failed", response=failed)]
        out = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._thinking(delta["reasoning_content"])
            if delta.get("content"):
                out += self._close_thought() + self._text(delta["content"])
            for call in delta.get("tool_calls") or []:
                out += self._close_thought() + self._close_message() + self._call(call)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
                out += self._close_thought() + self._close_message()
        if chunk.get("usage"):
            status = self._status(self.finish)
            out.append(self._event(f"response.{status}", response=self.object(status, _usage(chunk["usage"]))))
        return out

    def _text(self, text: str) -> List[Dict[str, str]]:
        out = []
        if self.message is None:
            self.message = self._message_item("", "in_progress")
            self.message["content"] = []
            self.output.append(self.message)
            out.append(self._event("response.output_item.added", output_index=len(self.output) - 1,
                                   item=self.message))
            out.append(self._event("response.content_part.added", item_id=self.message["id"],
                                   output_index=len(self.output) - 1, content_index=0,
                                   part={"type": "output_text", "text": "", "annotations": [], "logprobs": []}))
            self.message = dict(self.message, text="")
        self.message["text"] += text
        out.append(self._event("response.output_text.delta", item_id=self.message["id"],
                               output_index=len(self.output) - 1, content_index=0, delta=text, logprobs=[]))
        return out

    def _thinking(self, text: str) -> List[Dict[str, str]]:
        out = []
        if self.thought is None:
            self.thought = self._reasoning_item("", "in_progress")
            self.output.append(self.thought)
            out.append(self._event("response.output_item.added", output_index=len(self.output) - 1,
                                   item=self.thought))
            self.thought = dict(self.thought, text="")
        self.thought["text"] += text
        out.append(self._event("response.reasoning_text.delta", item_id=self.thought["id"],
                               output_index=len(self.output) - 1, content_index=0, delta=text))
        return out

    def _close_thought(self) -> List[Dict[str, str]]:
        if self.thought is None:
            return []
        index, text = len(self.output) - 1, self.thought.pop("text")
        item = dict(self._reasoning_item(text, "completed"), id=self.thought["id"])
        self.output[index] = item
        self.thought = None
        return [self._event("response.reasoning_text.done", item_id=item["id"], output_index=index, content_index=0,
                            text=text),
                self._event("response.output_item.done", output_index=index, item=item)]

    def _close_message(self) -> List[Dict[str, str]]:
        if self.message is None:
            return []
        index, text = len(self.output) - 1, self.message.pop("text")
        item = self._message_item(text, "completed")
        item["id"] = self.message["id"]
        self.output[index] = item
        self.message = None
        part = item["content"][0]
        return [self._event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                            text=text, logprobs=[]),
                self._event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                            part=part),
                self._event("response.output_item.done", output_index=index, item=item)]

    def _call(self, call: Dict[str, Any]) -> List[Dict[str, str]]:
        item = self._call_item(call)
        self.output.append(item)
        index, args = len(self.output) - 1, item["arguments"]
        return [self._event("response.output_item.added", output_index=index,
                            item=dict(item, arguments="", status="in_progress")),
                self._event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                            delta=args),
                self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                            name=item["name"], arguments=args),
                self._event("response.output_item.done", output_index=index, item=item)]
