"""A reasoning effort reaches the chat template as llama-server gives it one: OpenAI's
reasoning_effort, the Responses API's reasoning.effort, Anthropic's output_config.effort and
Ollama's think levels through real servers and their clients, --reasoning-effort and --reasoning
on the command line; "none" asks the template not to think. Checked on the rendered prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import specllama
from specllama import RequestError, reasoning
from specllama.templates import render_jinja
from test_server import running

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
# a template that writes what it is given about reasoning: a level before the conversation, the
# thinking switch where the reply starts (so that, as llama-server, thinking is on by default)
TEMPLATE = ("{% if reasoning_effort is defined %}Effort {{ reasoning_effort }}/{{ reasoning_strength }}.\n{% endif %}"
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined %}"
            "{{ 'Think first.' if enable_thinking else 'Answer at once.' }}\n{% endif %}{% endif %}")
MESSAGES = [{"role": "user", "content": "the cat"}]
TURN = "<|im_start|>user\nthe cat<|im_end|>\n<|im_start|>assistant\n"


def test_an_effort_as_template_variables():
    """"none" turns the thinking off and drops a level; a level is reasoning_effort and
    reasoning_strength (gpt-oss's template writes it into its system message)."""
    assert reasoning.with_effort({"x": 1}, None) == {"x": 1}
    assert reasoning.with_effort({"reasoning_effort": "high", "reasoning_strength": "high"}, "none") == \
        {"enable_thinking": False}
    assert reasoning.with_effort({"enable_thinking": False}, "low") == \
        {"enable_thinking": False, "reasoning_effort": "low", "reasoning_strength": "low"}
    for bad in ("", "  ", 3, None, ["low"]):
        with pytest.raises(ValueError, match="'reasoning_effort' must be a level"):
            reasoning.check_effort(bad)
    source = (TEMPLATES / "openai-gpt-oss-120b.jinja").read_text(encoding="utf-8")
    for effort, line in ((None, "Reasoning: medium\n"), ("low", "Reasoning: low\n"), ("high", "Reasoning: high\n")):
        text = render_jinja(source, MESSAGES, add_generation_prompt=True, bos_token="", eos_token="",
                            **reasoning.with_effort({}, effort))
        assert line in text


@pytest.fixture(scope="module")
def template_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("effort_template") / "effort.jinja"
    path.write_text(TEMPLATE)
    return str(path)


def test_a_chat_request_with_an_effort(tiny, template_file):
    """create_chat_completion's reasoning_effort renders the prompt with it (usage counts its
    tokens); it wins over chat_template_kwargs' own; a bad one is a RequestError naming it."""
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256) as dec:
        def n_prompt(**variables):
            return len(dec.chat_tokens(MESSAGES, template=template_file, **variables))

        counts = {v: n_prompt(**reasoning.with_effort({}, v)) for v in (None, "none", "low", "a very high level")}
        assert len(set(counts.values())) == len(counts), counts  # (each prompt has its own length)
        for given, effort in (({"reasoning_effort": "low"}, "low"), ({"reasoning_effort": "none"}, "none"),
                              ({"chat_template_kwargs": {"reasoning_effort": "a very high level"},
                                "reasoning_effort": "low"}, "low"),
                              ({"chat_template_kwargs": {"reasoning_effort": "a very high level",
                                                         "reasoning_strength": "a very high level"}},
                               "a very high level"), ({}, None)):
            out = dec.create_chat_completion(MESSAGES, chat_template=template_file, max_tokens=1, **given)
            assert out["usage"]["prompt_tokens"] == counts[effort], given
        for bad in (3, "", ["low"]):
            with pytest.raises(RequestError) as e:
                dec.create_chat_completion(MESSAGES, chat_template=template_file, max_tokens=1, reasoning_effort=bad)
            assert e.value.param == "reasoning_effort"
        with pytest.raises(RequestError) as e:
            dec.create_completion("the cat", max_tokens=1, reasoning_effort="low")
        assert e.value.param == "reasoning_effort"


@pytest.fixture(scope="module")
def effort_server(tiny, template_file):
    with running(["-m", tiny.target, "-d", tiny.draft, "-c", "256", "--chat-template", template_file,
                  "--alias", "tiny", "--reasoning-effort", "high", "--reasoning", "off"]) as s:
        yield s


def _prompt(server, **body) -> str:
    r = server.post("/apply-template", dict(messages=MESSAGES, **body))
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


def test_the_servers_effort_and_a_requests(effort_server):
    """/apply-template shows the prompt a chat request renders: --reasoning-effort high and
    --reasoning off unless the request gives its own level (reasoning_effort over
    chat_template_kwargs') or asks for thinking, "none" asks for no thinking and drops the level;
    bad values are 400s naming the field."""
    s = effort_server
    no, yes = "Answer at once.\n", "Think first.\n"
    assert _prompt(s) == "Effort high/high.\n" + TURN + no
    assert _prompt(s, reasoning_effort="low") == "Effort low/low.\n" + TURN + no
    assert _prompt(s, reasoning_effort="none") == TURN + no
    assert _prompt(s, chat_template_kwargs={"reasoning_effort": "medium"}) == "Effort medium/high.\n" + TURN + no
    assert _prompt(s, chat_template_kwargs={"enable_thinking": True}) == "Effort high/high.\n" + TURN + yes
    assert _prompt(s, reasoning_effort="low", chat_template_kwargs={"enable_thinking": True}) == \
        "Effort low/low.\n" + TURN + yes
    for bad in (7, "", {"level": "low"}):
        r = s.post("/apply-template", {"messages": MESSAGES, "reasoning_effort": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning_effort", r.text
    r = s.post("/v1/completions", {"prompt": "the cat", "max_tokens": 1, "reasoning_effort": "low"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning_effort", r.text


def test_each_apis_effort_reaches_the_prompt(effort_server):
    """OpenAI's reasoning_effort, the Responses API's reasoning (effort, with a summary asked for:
    none is made, the thinking comes back whole), Anthropic's output_config.effort and Ollama's
    think levels (a level also asks for the thinking), and Anthropic's adaptive thinking (thinking
    asked for, with no budget), sent by each API's own client, render the prompt /apply-template shows for that
    effort (the prompt's token count in each answer's usage)."""
    import ollama
    from anthropic import Anthropic
    from openai import OpenAI

    s = effort_server

    def tokens(**body) -> int:
        r = s.post("/tokenize", {"content": _prompt(s, **body), "add_special": True, "parse_special": True})
        assert r.status_code == 200, r.text
        return len(r.json()["tokens"])

    thinks = {"enable_thinking": True}
    counts = {e: tokens(reasoning_effort=e) for e in ("high", "low", "none")}
    counts["low, thinking"] = tokens(reasoning_effort="low", chat_template_kwargs=thinks)
    counts["thinking"] = tokens(chat_template_kwargs=thinks)
    assert len(set(counts.values())) == len(counts), counts
    kw = dict(model="tiny", max_tokens=1)
    with OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
        for effort in ("low", "none"):
            chat = client.chat.completions.create(messages=MESSAGES, reasoning_effort=effort, **kw)
            assert chat.usage.prompt_tokens == counts[effort]
        assert client.chat.completions.create(messages=MESSAGES, **kw).usage.prompt_tokens == counts["high"]
        r = client.responses.create(model="tiny", input="the cat", max_output_tokens=16,
                                    reasoning={"effort": "low", "summary": "auto"})
        assert r.usage.input_tokens == counts["low"]
        assert (r.reasoning.effort, r.reasoning.summary) == ("low", "auto")
    with Anthropic(base_url=s.url, api_key="none", max_retries=0, timeout=600) as client:
        for given, expected in (({"output_config": {"effort": "low"}}, "low"),
                                ({"thinking": {"type": "adaptive"}}, "thinking")):
            m = client.messages.create(messages=MESSAGES, **given, **kw)
            assert m.usage.input_tokens + m.usage.cache_read_input_tokens == counts[expected]  # (as Anthropic counts)
    with ollama.Client(host=s.url, timeout=600) as client:
        reply = client.chat(model="tiny", messages=MESSAGES, think="low", options={"num_predict": 1})
    assert reply.prompt_eval_count == counts["low, thinking"]


@pytest.mark.parametrize("path, body, param", [
    ("/v1/responses", {"input": "x", "reasoning": {"effort": 3}}, "reasoning"),
    ("/v1/responses", {"input": "x", "reasoning": {"effort": "low", "summary": "everything"}}, "reasoning"),
    ("/v1/responses", {"input": "x", "reasoning": "low"}, "reasoning"),
    ("/v1/messages", {"max_tokens": 1, "messages": MESSAGES, "output_config": {"effort": ""}}, "output_config"),
    ("/v1/messages", {"max_tokens": 1, "messages": MESSAGES, "output_config": {"speed": 1}}, "output_config"),
    ("/api/chat", {"messages": MESSAGES, "think": "max"}, "think"),
    ("/api/chat", {"messages": MESSAGES, "think": 1}, "think"),
])
def test_bad_efforts_are_clear_errors(effort_server, path, body, param):
    r = effort_server.post(path, dict(body, model="tiny"))
    assert r.status_code == 400, r.text
    error = r.json()["error"]  # (Ollama's is a message, Anthropic's names no field but in its message)
    assert param in json.dumps(error), r.text
    if isinstance(error, dict) and "param" in error:
        assert error["param"] == param


def test_the_command_lines_reasoning_options(tiny, template_file):
    """generate --chat with --reasoning off, --reasoning-effort LEVEL (none: no thinking), and
    --chat-template-kwargs under them; a bad level is a usage error."""
    from click.testing import CliRunner

    from specllama.cli import main

    with specllama.SpeculativeDecoder(tiny.target, None, n_ctx=256) as dec:
        def expected(**variables):
            return len(dec.chat_tokens(MESSAGES, template=template_file, **variables))

        cases = [(["--reasoning", "off", "--reasoning-effort", "medium"],
                  {"enable_thinking": False, "reasoning_effort": "medium", "reasoning_strength": "medium"}),
                 (["--reasoning-effort", "low"], {"reasoning_effort": "low", "reasoning_strength": "low"}),
                 (["--reasoning-effort", "none", "--chat-template-kwargs", '{"reasoning_effort": "high"}'],
                  {"enable_thinking": False}),
                 (["--reasoning", "on", "--reasoning-effort", "a very high level"],
                  {"enable_thinking": True, "reasoning_effort": "a very high level",
                   "reasoning_strength": "a very high level"}),
                 ([], {})]
        counts = [expected(**v) for _, v in cases]
        assert len(set(counts)) == len(counts), counts
    base = ["generate", "the cat", "--chat", "-m", tiny.target, "--no-draft", "--chat-template", template_file,
            "-n", "1", "-c", "256", "--json"]
    for (args, _), n in zip(cases, counts):
        r = CliRunner().invoke(main, base + args)
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["stats"]["n_prompt"] == n, args
    r = CliRunner().invoke(main, base + ["--reasoning-effort", " "])
    assert r.exit_code == 2 and "--reasoning-effort" in r.stderr
