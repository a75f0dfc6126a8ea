"""Chat templates: the model's own, one of llama.cpp's built-in ones by name, or a Jinja file.

llama.cpp's built-in templates are rendered natively (llama_chat_apply_template). A Jinja file is
rendered with jinja2's sandboxed environment: the file is untrusted input, so it gets no access to
files or to Python objects' internals, only the variables chat templates expect (messages,
add_generation_prompt, bos_token, eos_token, raise_exception, strftime_now).
"""

from __future__ import annotations

import datetime
import os
from typing import List, Optional, Sequence

from . import _core


def builtin_names() -> List[str]:
    """The names of llama.cpp's built-in chat templates ("chatml", "llama3", ...)."""
    return sorted(_core.chat_builtin_templates())


def _raise_exception(message: str):
    raise ValueError(f"the chat template refused the messages: {message}")


def render_jinja(source: str, messages: Sequence[dict], add_generation_prompt: bool, bos_token: str = "",
                 eos_token: str = "") -> str:
    """Render a Jinja chat template in a sandbox."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        return env.from_string(source).render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                              bos_token=bos_token, eos_token=eos_token)
    except TemplateError as exc:
        raise ValueError(f"the chat template failed: {exc}") from None


def render(model: "_core.Model", messages: Sequence[dict], add_generation_prompt: bool = True,
           template: Optional[str] = None) -> str:
    """Messages as a prompt for model: with its own template (template None), a built-in one by
    name, or a Jinja file by path."""
    pairs = [(str(m["role"]), str(m["content"])) for m in messages]
    if template is None:
        tmpl = model.chat_template
        if not tmpl:
            raise ValueError(f"{model.path} has no chat template; give one (--chat-template NAME|FILE), "
                             f"for example one of: {', '.join(builtin_names())}")
        return _core.chat_apply_template(tmpl, pairs, add_generation_prompt)
    if template in builtin_names():
        return _core.chat_apply_template(template, pairs, add_generation_prompt)
    if os.path.isfile(template):
        with open(template, encoding="utf-8") as f:
            source = f.read()
        bos, eos = (model.token_to_piece(t, True).decode("utf-8", "replace") if t >= 0 else ""
                    for t in (model.bos, model.eos))
        return render_jinja(source, [dict(role=r, content=c) for r, c in pairs], add_generation_prompt, bos, eos)
    raise ValueError(f"chat template {template!r} is neither a built-in template of llama.cpp "
                     f"({', '.join(builtin_names())}) nor a file")
