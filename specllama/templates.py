"""Chat templates: messages rendered as a prompt the way the model defines it.

The default is the GGUF's own template (`tokenizer.chat_template`), a Jinja program, rendered
with jinja2 as llama-server renders it (llama.cpp's Jinja engine and chat code), so a
conversation gives the same prompt here as there. A template can also be one of llama.cpp's
built-in templates by name (rendered natively by llama_chat_apply_template) or a Jinja file.

A template is untrusted input read from a file. It runs in jinja2's immutable sandbox (no access
to files, to Python objects' internals, or to mutating methods but a list's append and pop, on
its own copies of the messages) with a budget: each rendering may take at most MAX_STEPS loop
iterations, calls and attribute look-ups, and build strings of at most MAX_CHARS characters. A
template that raises, exceeds its budget or is not valid Jinja gives a ChatTemplateError (a
ValueError) with a one-line message.

The variables a template sees are those llama-server gives it (render): messages,
add_generation_prompt, bos_token, eos_token, raise_exception, strftime_now, enable_thinking
(true unless asked otherwise), the past turns' thinking kept (preserve_thinking true;
clear_thinking, truncate_history_thinking and drop_thinking false, unless preserve_reasoning is
given false), today's date (date_string, datetime), and tools (undefined when none) with any
further variable given, such as a request's chat_template_kwargs. render_jinja alone gives a
template what transformers gives it (tools and documents none when not given).
"""

from __future__ import annotations

import contextvars
import copy
import datetime
import functools
import json
import operator
import os
import types
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _core, tools

MAX_STEPS = 1_000_000  # loop iterations, calls and look-ups in one rendering
MAX_CHARS = 16 * 1024 * 1024  # characters of the rendered prompt, and of any string or list built on the way


class ChatTemplateError(ValueError):
    """The chat template could not render these messages."""


class _TemplateRaised(Exception):
    """raise_exception() was called by the template."""


class _BudgetExceeded(Exception):
    pass


def builtin_names() -> List[str]:
    """The names of llama.cpp's built-in chat templates ("chatml", "llama3", ...)."""
    return sorted(_core.chat_builtin_templates())


# --- the sandbox -----------------------------------------------------------------------------

class _Budget:
    __slots__ = ("steps",)

    def __init__(self) -> None:
        self.steps = 0

    def tick(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _BudgetExceeded(f"it takes more than {MAX_STEPS:,} steps")


_budget: contextvars.ContextVar[_Budget] = contextvars.ContextVar("specllama_template_budget")


def _tick() -> None:
    _budget.get().tick()


def _sized(value: Any) -> Any:
    if isinstance(value, (str, list, tuple, bytes)) and len(value) > MAX_CHARS:
        raise _BudgetExceeded(f"it builds a value of more than {MAX_CHARS:,} items")
    return value


_LOOP_FILTER = "__specllama_loop"
_LIST_METHODS = frozenset({"append", "pop"})


def _add(left: Any, right: Any) -> Any:
    # as llama.cpp's Jinja engine adds: a string and none or an undefined value make the string
    # (gpt-oss's template writes "// " + tool.description for a tool that may have none), and a
    # string and any other value join as text, the value written as Python writes it (True,
    # [1, 'a'], {'k': 1}) (Functionary 3.2's template adds a schema's enum values, numbers among
    # them, to text)
    from jinja2 import Undefined

    if isinstance(left, str) and not isinstance(right, str):
        return left if right is None or isinstance(right, Undefined) else left + str(right)
    if isinstance(right, str) and not isinstance(left, str):
        return right if left is None or isinstance(left, Undefined) else str(left) + right
    return left + right


_BINOPS = {"*": operator.mul, "**": operator.pow, "+": _add, "%": operator.mod}


def _counted(iterable):
    """A for-loop's items, each one counted against the rendering's budget."""
    for item in iterable:
        _tick()
        yield item


def _tojson(x: Any, ensure_ascii: bool = False, indent: Optional[int] = None, separators=None,
            sort_keys: bool = False) -> str:
    # transformers' tojson (not jinja2's HTML-safe one), so tool schemas render as there; a
    # filter's lazy sequence (tools | map(attribute='function')) is written as the list it yields,
    # as llama.cpp's Jinja engine writes it
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys,
                      default=_json_sequence)


def _json_sequence(value: Any) -> list:
    if isinstance(value, (types.GeneratorType, map, filter, range)):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _length(x: Any) -> int:
    # as llama.cpp's Jinja engine counts: none (an assistant's content beside its tool calls, as
    # OpenAI's clients send it) has length 0 (Ministral 3's template counts it)
    return 0 if x is None else len(x)


def _safe(value: Any) -> Any:
    # nothing is escaped here (no autoescape), so |safe leaves a value as it is, as in llama.cpp's
    # Jinja engine (jinja2's Markup would escape the text added to it: Functionary 3.1's template
    # adds tool schemas to a |safe string)
    return value


def _raise_exception(message: Any = "") -> None:
    raise _TemplateRaised(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=1)
def _environment():
    from jinja2 import nodes
    from jinja2.compiler import CodeGenerator
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

    class GenerationTag(Extension):
        """Hugging Face's {% generation %} tag, which marks assistant text and renders its body."""
        tags = {"generation"}

        def parse(self, parser):
            parser.stream.skip(1)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    class Generator(CodeGenerator):
        def visit_Concat(self, node, frame):  # the ~ operator: the result's length is checked
            self.write("environment.sized(")
            super().visit_Concat(node, frame)
            self.write(")")

    class Environment(ImmutableSandboxedEnvironment):
        code_generator_class = Generator
        intercepted_binops = frozenset(_BINOPS)

        def _parse(self, source, name, filename):
            tree = super()._parse(source, name, filename)
            for loop in tree.find_all(nodes.For):  # every loop counts its iterations
                loop.iter = nodes.Filter(loop.iter, _LOOP_FILTER, [], [], None, None, lineno=loop.lineno)
            return tree

        def sized(self, value):
            return _sized(value)

        def call_binop(self, context, op, left, right):
            if op == "*" and (isinstance(left, int) or isinstance(right, int)):
                seq, n = (left, right) if isinstance(right, int) else (right, left)
                if isinstance(seq, (str, list, tuple)) and len(seq) * max(n, 0) > MAX_CHARS:
                    raise _BudgetExceeded(f"it builds a value of more than {MAX_CHARS:,} items")
            if op == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 \
                    and right * abs(left).bit_length() > 1_000_000:
                raise _BudgetExceeded("it computes a number of more than a million bits")
            return _sized(_BINOPS[op](left, right))

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja2's signature)
            _tick()
            return _sized(super().call(__context, __obj, *args, **kwargs))

        def is_safe_attribute(self, obj, attr, value):
            # a list's append and pop, which llama.cpp's Jinja engine has (Kimi K2's template
            # gathers tool call ids with append); the rendering's inputs are its own copies
            if isinstance(obj, list) and attr in _LIST_METHODS:
                return SandboxedEnvironment.is_safe_attribute(self, obj, attr, value)
            return super().is_safe_attribute(obj, attr, value)

        def getattr(self, obj, attribute):
            _tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            _tick()
            return super().getitem(obj, argument)

    env = Environment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = _tojson
    env.filters["safe"] = _safe
    env.filters["length"] = env.filters["count"] = _length
    env.filters[_LOOP_FILTER] = _counted
    return env


@functools.lru_cache(maxsize=32)
def _compile(source: str):
    from jinja2 import TemplateSyntaxError

    try:
        return _environment().from_string(source)
    except TemplateSyntaxError as exc:
        raise ChatTemplateError(f"the chat template is not valid Jinja (line {exc.lineno}): {exc.message}") from None
    except RecursionError:
        raise ChatTemplateError("the chat template is nested too deeply to compile") from None


def _error_text(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def render_jinja(source: str, messages: Sequence[dict], add_generation_prompt: bool = True, bos_token: str = "",
                 eos_token: str = "", tools: Optional[list] = None, documents: Optional[list] = None,
                 **variables: Any) -> str:
    """Render the Jinja chat template source in the sandbox, with the variables transformers
    gives it (tools and documents are None when not given, as there) and any further ones
    (one given as UNDEFINED is left undefined)."""
    template = _compile(source)
    context = {"tools": tools, "documents": documents}
    context.update(variables)
    context = copy.deepcopy({k: v for k, v in context.items() if v is not UNDEFINED})  # (the template's own copies)
    context.update(messages=copy.deepcopy([dict(m) for m in messages]),
                   add_generation_prompt=bool(add_generation_prompt), bos_token=bos_token, eos_token=eos_token,
                   raise_exception=_raise_exception, strftime_now=_strftime_now)
    token = _budget.set(_Budget())
    try:
        pieces: List[str] = []
        n_chars = 0
        for piece in template.root_render_func(template.new_context(context)):
            n_chars += len(piece)
            if n_chars > MAX_CHARS:
                raise _BudgetExceeded(f"it writes more than {MAX_CHARS:,} characters")
            pieces.append(piece)
        return "".join(pieces)
    except _TemplateRaised as exc:
        raise ChatTemplateError(f"the chat template refused the messages: {exc}") from None
    except _BudgetExceeded as exc:
        raise ChatTemplateError(f"the chat template was stopped: {exc}") from None
    except RecursionError:
        raise ChatTemplateError("the chat template was stopped: it recurses too deeply") from None
    except MemoryError:
        raise ChatTemplateError("the chat template was stopped: it ran out of memory") from None
    except Exception as exc:  # noqa: BLE001 (any failure of an untrusted program is the template's error)
        raise ChatTemplateError(f"the chat template failed: {_error_text(exc)}") from None
    finally:
        _budget.reset(token)


# --- messages --------------------------------------------------------------------------------

def _text_of(content: Any, where: str) -> Any:
    """A message's content as templates expect it: a string (OpenAI content parts of type
    "text" joined with newlines, as llama-server joins them)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(f"{where}: only text content is supported, not a {kind!r} part")
            texts.append(part["text"])
        return "\n".join(texts)
    raise ValueError(f"{where}: content must be a string or a list of text parts, not {type(content).__name__}")


def normalize_messages(messages: Sequence[Any]) -> List[Dict[str, Any]]:
    """Check chat messages ([{"role": ..., "content": ...}, ...]) and return copies with text
    content. A ValueError names the first bad message."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValueError("messages must be a list of {'role': ..., 'content': ...} objects")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ValueError(f"{where} must be an object with 'role' and 'content', not {type(m).__name__}")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"{where} has no 'role' (a string such as 'system', 'user' or 'assistant')")
        _core.check_text(role, f"{where}.role")
        if "content" not in m and not m.get("tool_calls"):
            raise ValueError(f"{where} has no 'content'")
        if m.get("content") is None and role != "assistant":
            raise ValueError(f"{where}: 'content' is null; only an assistant's message may leave it out")
        msg = dict(m)
        msg["content"] = _text_of(m.get("content"), where)
        if msg["content"] is not None:
            _core.check_text(msg["content"], f"{where}.content")
        out.append(msg)
    return out


# --- rendering and tokenizing for a model ----------------------------------------------------

def _special_text(model: "_core.Model", token: int) -> str:
    return model.token_text(token) if 0 <= token < model.n_vocab else ""


def template_source(model: "_core.Model", template: Optional[str] = None, tools: Any = None) -> str:
    """The Jinja source of the model's own template (template None) or of a template file; a
    built-in template name is returned as it is. The model's own is its tool_use template where
    tools are given and it has one (Hermes 2 Pro's and Hermes 3's GGUFs, Command R's), or where it
    has no other, as llama.cpp picks."""
    if template is None:
        tool_use = model.named_chat_template("tool_use")
        source = tool_use if tool_use and (tools or not model.chat_template) else model.chat_template
        if not source:
            raise ChatTemplateError(f"{model.path} has no chat template; give one (--chat-template NAME|FILE), "
                                    f"for example one of: {', '.join(builtin_names())}")
        return source
    if template in builtin_names():
        return template
    if os.path.isfile(template):
        try:
            st = os.stat(template)
            return _file_text(template, st.st_mtime_ns, st.st_size)
        except (OSError, UnicodeDecodeError) as exc:
            raise ChatTemplateError(f"cannot read the chat template {template}: {exc}") from None
    raise ChatTemplateError(f"chat template {template!r} is neither a built-in template of llama.cpp "
                            f"({', '.join(builtin_names())}) nor a file")


@functools.lru_cache(maxsize=8)
def _file_text(path: str, mtime_ns: int, size: int) -> str:
    """A template file's text, read once per version of the file (a server reads its template for
    every request: to render it, and for its thinking markup)."""
    with open(path, encoding="utf-8") as f:
        return f.read()


def render(model: "_core.Model", messages: Sequence[dict], add_generation_prompt: bool = True,
           template: Optional[str] = None, **variables: Any) -> str:
    """Messages as a prompt for model: with its own template (template None), a built-in one by
    name, or a Jinja file by path. variables (tools, documents, ...) reach Jinja templates, with
    those llama-server gives them (llama_cpp_variables), and the messages as llama.cpp's chat code
    shapes them (template_messages). With add_generation_prompt, a last assistant message without
    calls is continued (_continued; under a built-in template, after the generation prompt), as
    llama-server's prefill continues it."""
    if template is not None and template in builtin_names():
        checked = normalize_messages(messages)
        continued = continued_text(checked) if add_generation_prompt else None
        pairs = [(m["role"], m["content"] or "") for m in (checked if continued is None else checked[:-1])]
        return _core.chat_apply_template(template, pairs, add_generation_prompt) + (continued or "")
    source = template_source(model, template, variables.get("tools"))
    checked = normalize_messages(messages)
    special = (_special_text(model, model.bos), _special_text(model, model.eos))
    variables = llama_cpp_variables(source, variables)
    if add_generation_prompt and _continues(checked):
        return _continued(source, checked, special, variables)
    text = render_jinja(source, template_messages(source, checked), add_generation_prompt, *special, **variables)
    return _model_turn_opened(source, text) if add_generation_prompt else text


_SENTINEL = "specllamacontinuesfromhere"


def _continues(messages: List[dict]) -> bool:
    """Whether a reply continues the conversation's last message, as llama-server's prefill does:
    an assistant's message without calls (ChatTemplateError where two assistant messages end it)."""
    if not messages or messages[-1]["role"] != "assistant" or messages[-1].get("tool_calls"):
        return False
    if len(messages) >= 2 and messages[-2]["role"] == "assistant":
        raise ChatTemplateError("cannot have 2 or more assistant messages at the end of the conversation")
    return True


def continued_text(messages: Sequence[Any]) -> Optional[str]:
    """The text a reply continues where the conversation ends with an assistant's message without
    calls (llama-server's prefill): that message's content, or its reasoning_content where it has
    thinking and no content yet; None where the reply starts a turn of its own. (Only the last two
    messages are looked at: whether one continues follows from them.)"""
    checked = normalize_messages(list(messages[-2:]))
    return checked[-1].get(_continued_field(checked[-1])) or "" if _continues(checked) else None


def _continued_field(last: dict) -> str:
    return "reasoning_content" if last.get("reasoning_content") and not last.get("content") else "content"


def _continued(source: str, messages: List[dict], special: Tuple[str, str], variables: Dict[str, Any]) -> str:
    """The prompt that has the reply continue the last (assistant's) message of checked messages, as
    llama-server's prefill has it: the conversation rendered up to where that message's text starts
    (its content, or its reasoning_content where it has thinking and no content yet, the thinking
    then left open), the text as given after it. The message is marked before the messages are
    shaped for the template (template_messages), so that the text is found wherever they move it.
    Where the template does not write the message, the earlier ones with the generation prompt and
    the text after them."""
    last = messages[-1]
    field = _continued_field(last)
    marked = template_messages(source, messages[:-1] + [dict(last, **{field: _SENTINEL})])
    text = render_jinja(source, marked, False, *special, **variables)
    at = text.rfind(_SENTINEL)
    if at < 0:
        earlier = template_messages(source, messages[:-1])
        text = _model_turn_opened(source, render_jinja(source, earlier, True, *special, **variables))
        at = len(text)
    return text[:at] + (last.get(field) or "")


UNDEFINED = object()  # a variable given as this is left undefined in the template


def llama_cpp_variables(source: str, variables: Dict[str, Any]) -> Dict[str, Any]:
    """The variables llama-server gives the template source (see the module's doc) under those
    given; tools and documents undefined where not given (or no tools), as there."""
    preserve = variables.get("preserve_reasoning", True)
    now = datetime.datetime.now()
    out: Dict[str, Any] = {"enable_thinking": _switches_thinking(source), "date_string": now.strftime("%d %b %Y"),
                           "datetime": now.strftime("%b %d %Y"), "documents": UNDEFINED}
    if isinstance(preserve, bool):
        out.update(preserve_thinking=preserve, clear_thinking=not preserve, truncate_history_thinking=not preserve,
                   drop_thinking=not preserve)
    out.update(variables)
    if not out.get("tools"):
        out["tools"] = UNDEFINED
    return out


def template_messages(source: str, messages: Sequence[Any]) -> List[Dict[str, Any]]:
    """Checked messages (normalize_messages) as the Jinja template source takes them, as llama.cpp's
    chat code gives them to it: a developer message as a system message (gpt-oss's template reads
    both alike); a system message put before the next where the template has no system role; an
    assistant's call arguments as an object, or as the JSON text OpenAI sends where the template
    writes them as they are; the content of an assistant's turn of calls an empty string where it
    is null; its reasoning_content where the template reads past thinking; under Gemma 4's first
    template, tool responses in the model's turn."""
    msgs = tools.call_arguments(normalize_messages(messages), as_text=_writes_arguments_as_text(source))
    msgs = [dict(m, role="system") if m["role"] == "developer" else m for m in msgs]
    if msgs and msgs[0]["role"] == "system" and not _takes_system_role(source):
        msgs = _system_merged(msgs)
    if _GEMMA4_CALL in source and _GEMMA4_OPENAI not in source:
        msgs = _gemma4_model_turns(msgs)
    msgs = _thinking_field(source, _thinking_blocks(source, msgs))
    return [dict(m, content="") if m.get("tool_calls") and "content" in m and m["content"] is None else m
            for m in msgs]


@functools.lru_cache(maxsize=32)
def _takes_system_role(source: str) -> bool:
    """Whether the template writes a system message's text (Gemma 2's refuses the role)."""
    text = _probe(source, [{"role": "system", "content": _PROBE}, {"role": "user", "content": "Hi"}], True)
    return text is not None and _PROBE in text


def _system_merged(messages: List[dict]) -> List[dict]:
    """messages with the system message's text put before the next message's (or dropped where
    it is the only one), as llama.cpp's chat code gives them to a template without a system role."""
    system, rest = messages[0], messages[1:]
    if rest:
        rest[0] = dict(rest[0], content=f"{system['content'] or ''}\n{rest[0]['content'] or ''}")
    return rest


_GEMMA4_CALL, _GEMMA4_OPENAI = "'<|tool_call>call:'", "{#- OpenAI Chat Completions:"


def _gemma4_model_turns(messages: List[dict]) -> List[dict]:
    """messages as Gemma 4's first templates take them (those that read no tool messages): an
    assistant's calls, the tool messages after them as its tool_responses ({"name", "response"},
    a response's JSON text parsed) and the assistant's text after them as its content, one model
    turn, as llama.cpp's chat code gives them."""
    out, i = [], 0
    while i < len(messages):
        m = messages[i]
        if m["role"] != "assistant" or not isinstance(m.get("tool_calls"), list) or not m["tool_calls"]:
            out.append(m)
            i += 1
            continue
        calls, responses = m["tool_calls"], []
        i += 1
        while i < len(messages) and messages[i]["role"] == "tool":
            tool = messages[i]
            try:
                response = json.loads(tool["content"])
            except (TypeError, ValueError, RecursionError):
                response = tool["content"]
            fn = calls[len(responses)].get("function") if len(responses) < len(calls) else None
            name = fn.get("name") if isinstance(fn, dict) else None
            responses.append({"name": name or tool.get("tool_call_id", ""), "response": response})
            i += 1
        turn = {"role": "assistant", "tool_calls": calls}
        if responses:
            turn["tool_responses"] = responses
        if i < len(messages) and messages[i]["role"] == "assistant" and not messages[i].get("tool_calls") \
                and messages[i].get("content"):
            turn["content"] = messages[i]["content"]
            i += 1
        if isinstance(m.get("reasoning_content"), str):
            turn["reasoning_content"] = m["reasoning_content"]
        out.append(turn)
    return out


@functools.lru_cache(maxsize=32)
def _switches_thinking(source: str) -> bool:
    """Whether enable_thinking changes how the template starts the reply (the text after the
    user's message), llama-server's test of a template's thinking mode: enable_thinking is true
    by default where it does (Qwen3's, DeepSeek's, Gemma 4's, ...), false where it does not
    (Apertus' writes the switch into its system turn)."""
    if "enable_thinking" not in source:
        return False
    on, off = (_probe(source, [{"role": "user", "content": _PROBE}], True, enable_thinking=v) for v in (True, False))
    return on is not None and off is not None and on[on.rfind(_PROBE):] != off[off.rfind(_PROBE):]


_PROBE = "specllama-probe"
_PROBE_ARGUMENTS = {"arg": _PROBE}


def _probe(source: str, messages: List[dict], add_generation_prompt: bool, **variables: Any) -> Optional[str]:
    """What the template writes for a probe of its ways (tools an empty list unless given, as
    llama.cpp's probes give them), or None where it refuses."""
    try:
        return render_jinja(source, messages, add_generation_prompt, **{"tools": [], **variables})
    except ChatTemplateError:
        return None


@functools.lru_cache(maxsize=32)
def _writes_arguments_as_text(source: str) -> bool:
    """Whether the template writes a call's arguments as they are given (Functionary 3.2's
    '\n' + arguments), where an object would come out as Python's repr of it."""
    call = {"id": "call00001", "type": "function", "function": {"name": "tool1", "arguments": _PROBE_ARGUMENTS}}
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    probe_tools = [{"type": "function", "function": {"name": "tool1", "description": "A tool", "parameters": {
        "type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}}]
    text = _probe(source, messages, False, tools=probe_tools)
    return text is not None and str(_PROBE_ARGUMENTS) in text


def _thinking_blocks(source: str, messages: List[dict]) -> List[dict]:
    """messages with an assistant's reasoning_content as a thinking block before its text, where
    the template reads past thinking only from content blocks (Ministral 3's and Magistral's), as
    llama.cpp's chat code gives it to them."""
    if "[THINK]" not in source or "'thinking'" not in source:
        return messages
    out = []
    for m in messages:
        thought = m.get("reasoning_content") if m.get("role") == "assistant" else None
        if isinstance(thought, str) and thought:
            content = m.get("content")
            blocks = content if isinstance(content, list) else \
                [{"type": "text", "text": content}] if isinstance(content, str) and content else []
            m = {k: v for k, v in m.items() if k != "reasoning_content"}
            m["content"] = [{"type": "thinking", "thinking": thought}] + blocks
        out.append(m)
    return out


def _thinking_field(source: str, messages: List[dict]) -> List[dict]:
    """messages with an assistant's reasoning_content as its thinking, where the template reads past
    thinking from there (gpt-oss's harmony format, LFM2's), as llama.cpp's chat code gives it; under
    gpt-oss's, without the content of a turn of calls where it has thinking or none (the template
    takes one or the other as the calls' analysis, and fails on null)."""
    harmony = tools.harmony.is_harmony(source)
    if not (harmony or tools.lfm2.is_lfm2(source)):
        return messages
    out = []
    for m in messages:
        if m.get("role") == "assistant":
            thought, calls = m.get("reasoning_content"), m.get("tool_calls")
            m = {k: v for k, v in m.items() if k != "reasoning_content"}
            if isinstance(thought, str):
                m["thinking"] = thought
            if harmony and calls and (isinstance(thought, str) or m.get("content") is None):
                m.pop("content", None)
        out.append(m)
    return out


_GEMMA4_TURN_END, _GEMMA4_MODEL_TURN = "<turn|>\n", "<|turn>model\n"


def _model_turn_opened(source: str, prompt: str) -> str:
    """prompt with the model's turn opened where Gemma 4's template left it closed: after a model
    turn that held calls, their responses and text, the template ends the turn and opens no new one
    (it expects the model to go on after a response); the reply then starts a new model turn, as
    llama.cpp's chat code has it."""
    if "<|turn>model" in source and prompt.endswith(_GEMMA4_TURN_END):
        return prompt + _GEMMA4_MODEL_TURN
    return prompt


def prompt_text(model: "_core.Model", prompt: str) -> str:
    """A rendered chat prompt as it is tokenized (with add_special and parse_special): a BOS
    token the template wrote is taken off where the tokenizer adds one, so that there is one, as
    llama-server does."""
    bos = _special_text(model, model.bos)
    if model.add_bos and bos and prompt.startswith(bos):
        return prompt[len(bos):]
    return prompt
