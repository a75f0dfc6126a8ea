"""Chat templates rendered as the model defines them: the GGUF's own Jinja program in a sandbox.

The reference strings in data/chat_templates/references.json were rendered by Hugging Face
transformers (scripts/chat_template_references.py), those in llama_cpp_references.json by
llama-server's /apply-template (benchmarks/template_parity.py --references); these tests run
neither.
"""

import datetime
import json
import os
import re
from pathlib import Path

import pytest

import specllama
from specllama import tools
from specllama.chat import ChatSession
from specllama.templates import ChatTemplateError, render_jinja

DATA = Path(__file__).parent / "data" / "chat_templates"
REFERENCES = json.loads((DATA / "references.json").read_text(encoding="utf-8"))
CASES = [(name, case) for name, t in REFERENCES["templates"].items() for case in t["results"]]


@pytest.mark.parametrize("name, case", CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_render_equals_transformers(name, case):
    """Each family (ChatML with a default system message, Llama 3.1, Gemma 2 without a system
    role, Mistral Nemo, Hermes 2 Pro's tool use, Qwen 2.5, QwQ) renders as transformers renders
    it, tools sections and the templates' own refusals included."""
    ref = REFERENCES["templates"][name]
    spec = dict(REFERENCES["cases"][case])
    messages = spec.pop("messages")
    source = (DATA / f"{name}.jinja").read_text(encoding="utf-8")
    expected = ref["results"][case]
    if "text" in expected:
        assert render_jinja(source, messages, bos_token=ref["bos_token"], eos_token=ref["eos_token"],
                            **spec) == expected["text"]
    else:
        with pytest.raises(ChatTemplateError) as err:
            render_jinja(source, messages, bos_token=ref["bos_token"], eos_token=ref["eos_token"], **spec)
        assert expected["error"] in str(err.value) and "\n" not in str(err.value)


LLAMA_CPP = json.loads((DATA / "llama_cpp_references.json").read_text(encoding="utf-8"))
LLAMA_CPP_CASES = [(name, case) for name, t in LLAMA_CPP["templates"].items() for case in t]
# where llama-server's prompt loses what the template writes, specllama keeps it: llama.cpp gives
# an assistant's thinking and text to this template as content parts, and it writes the first
# part's text only (the answer is lost)
KEPT_HERE = {("unsloth-mistral-Devstral-Small-2507", "past_reasoning"): "[INST]Hi[/INST]Hello.<|im_end|>[INST]Bye"}


# where llama-server's autoparser finds a thinking mode it puts an empty thinking block before a
# message it continues (and before Command R+'s, the template's closing instructions), which the
# template's own rendering of the message has not: there the prompt is checked as the template's
# (test_a_last_assistant_message_is_continued)
PREFILL_AS_THE_TEMPLATE = {
    "ByteDance-Seed-OSS", "CohereForAI-c4ai-command-r-plus-tool_use", "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
    "GLM-4.6", "GLM-4.7-Flash", "HuggingFaceTB-SmolLM3-3B", "Kimi-K2-Instruct", "LFM2-8B-A1B", "LFM2.5-8B-A1B",
    "LFM2.5-Instruct", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "NVIDIA-Nemotron-Nano-v2", "Qwen-QwQ-32B",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "google-gemma-4-31B-it-interleaved", "google-gemma-4-31B-it", "llama-cpp-deepseek-r1",
    "mistralai-Ministral-3-14B-Reasoning-2512", "openai-gpt-oss-120b", "openbmb-MiniCPM5-1B",
    "unsloth-mistral-Devstral-Small-2507"}


def _today(text: str, rendered_on: str) -> str:
    """text with the dates a template wrote on rendered_on (ISO) as it writes them today."""
    then, now = datetime.date.fromisoformat(rendered_on), datetime.date.today()
    for fmt in ("%d %b %Y", "%b %d %Y", "%Y-%m-%d"):
        text = text.replace(then.strftime(fmt), now.strftime(fmt))
    return text


@pytest.fixture(scope="module")
def smollm2(default_pair):
    return specllama._core.Model(default_pair[0])


@pytest.mark.default_pair
@pytest.mark.parametrize("name, case", LLAMA_CPP_CASES, ids=[f"{n}-{c}" for n, c in LLAMA_CPP_CASES])
def test_render_equals_llama_server(smollm2, name, case):
    """Each template renders each conversation (one message; a system message and turns; a
    developer message (a system message but to gpt-oss); tools; a
    turn of two calls with their results; a past turn's thinking) as llama-server renders it with
    the same model, or refuses it where llama-server does: the variables it gives (enable_thinking
    where the template switches thinking, the past thinking kept, today's date, no tools
    undefined), a system message merged into the next where the template has no system role,
    content null as empty, call arguments as JSON text where the template writes them as they
    are, Gemma 4's first template's tool responses in the model's turn."""
    from specllama import templates

    body = LLAMA_CPP["cases"][case]
    expected = LLAMA_CPP["templates"][name][case]
    path = str(DATA / f"{name}.jinja")
    if "error" in expected:
        with pytest.raises(ChatTemplateError):
            templates.render(smollm2, body["messages"], True, path, tools=body.get("tools"))
        return
    ours = templates.render(smollm2, body["messages"], True, path, tools=body.get("tools"))
    if (name, case) in KEPT_HERE:
        assert ours != expected["text"] and KEPT_HERE[name, case] in ours
    elif case == "prefill" and name in PREFILL_AS_THE_TEMPLATE:
        text = body["messages"][-1]["content"]
        assert ours != expected["text"] and ours.endswith(text) and expected["text"].endswith(text)
    else:
        assert ours == _today(expected["text"], LLAMA_CPP["rendered_on"])


@pytest.mark.default_pair
@pytest.mark.parametrize("name", sorted(LLAMA_CPP["templates"]))
def test_a_last_assistant_message_is_continued(smollm2, name):
    """A conversation that ends with an assistant's message (llama-server's prefill) gives the
    prompt the template writes for that message finished, up to where the reply goes on: its text
    as given (trailing space kept) and nothing after it. Where a reasoning model's message has
    thinking and no text yet, the thinking is left open. Two assistant messages at the end are
    refused, as llama-server refuses them."""
    from specllama import templates

    path = str(DATA / f"{name}.jinja")
    first = [{"role": "user", "content": "Name a river."}]
    ours = templates.render(smollm2, first + [{"role": "assistant", "content": "The longest is "}], True, path)
    assert ours.endswith("The longest is ")
    finished = first + [{"role": "assistant", "content": "The longest is the Nile."}]
    assert templates.render(smollm2, finished, False, path).startswith(ours)
    assert templates.render(smollm2, finished, True, path).startswith(ours)  # (the prefill itself)
    with pytest.raises(ChatTemplateError, match="2 or more assistant messages"):
        templates.render(smollm2, finished + finished[1:], True, path)
    with pytest.raises(ChatTemplateError, match="2 or more assistant messages"):
        templates.continued_text(finished + finished[1:])
    thinking = first + [{"role": "assistant", "content": "", "reasoning_content": "The user asks "}]
    assert templates.continued_text(thinking) == "The user asks "
    source = (DATA / f"{name}.jinja").read_text()
    past = first + [{"role": "assistant", "content": "The Nile.", "reasoning_content": "Rivers"}]
    if "Rivers" in templates.render(smollm2, past, False, path):  # (a template that writes past thinking)
        prompt = templates.render(smollm2, thinking, True, path)
        assert prompt.endswith("The user asks ")
        if tools.harmony.is_harmony(source):
            assert tools.harmony.opened_by(prompt) == "<|channel|>analysis<|message|>"
        else:
            markup = specllama.reasoning.template_markup(source)
            assert markup and specllama.reasoning.opened_by(prompt, "The user asks ") == markup
            assert re.search(re.escape(markup[0]) + r"\n?The user asks $", prompt)


@pytest.fixture(scope="module")
def tool_use_models(tmp_path_factory):
    """Tiny models whose GGUFs carry a tool_use template (Hermes 3's) beside the default (Mistral
    Nemo's, of another call format), a tool_use template alone, and one beside ChatML (which shows
    no tools), as converted from a tokenizer_config that lists named templates: (both, alone,
    chatml)."""
    from tiny_models import CHATML, random_weights, vocab, write_model

    d, toks = tmp_path_factory.mktemp("tool_use"), vocab()
    default, tool_use = NEMO.read_text(), HERMES3_TOOL_USE.read_text()
    w = random_weights(len(toks), seed=1)
    both = write_model(d / "both.gguf", toks, w, chat_template=[{"name": "default", "template": default},
                                                                {"name": "tool_use", "template": tool_use}])
    alone = write_model(d / "alone.gguf", toks, w, chat_template=[{"name": "tool_use", "template": tool_use}])
    chatml = write_model(d / "chatml.gguf", toks, w, chat_template=[{"name": "default", "template": CHATML},
                                                                    {"name": "tool_use", "template": tool_use}])
    return str(both), str(alone), str(chatml)


NEMO = DATA / "mistralai-Mistral-Nemo-Instruct-2407.jinja"
HERMES3_TOOL_USE = DATA / "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"


def test_a_gguf_s_tool_use_template_renders_the_requests_with_tools(tool_use_models):
    """Where the GGUF has a tool_use template (Hermes 2 Pro's, Hermes 3's, Command R's), a request
    with tools is rendered with it and its calls read and held in its format, and one without tools
    with the default template, as llama.cpp picks; a GGUF with only a tool_use template uses it for
    every request; a template given by the user is used for both. Negative control: with the
    default template the same request renders and reads calls in the default's format."""
    from specllama import completions, templates
    from test_tools import ASK, CLOCK

    both, alone, _ = tool_use_models
    model = specllama.Model(both)
    tool_use = HERMES3_TOOL_USE.read_text()
    assert model.named_chat_template("tool_use") == tool_use and model.named_chat_template("rag") == ""
    assert templates.template_source(model, None, [CLOCK]) == tool_use
    assert templates.template_source(model) == model.chat_template == NEMO.read_text()
    assert templates.template_source(specllama.Model(alone)) == tool_use
    assert "<tools>" in templates.render(model, ASK, tools=[CLOCK])
    assert templates.render(model, ASK) == templates.render(model, ASK, template=str(NEMO))
    assert "[AVAILABLE_TOOLS]" in templates.render(model, ASK, template=str(NEMO), tools=[CLOCK])
    with specllama.SpeculativeDecoder(both, both, n_ctx=2048) as dec:
        fields = dict(messages=ASK, tools=[CLOCK], tool_choice="required", max_tokens=120)
        for template, want in ((None, tools.hermes), (str(NEMO), tools.mistral.LIST_FLAVOUR)):
            req = completions.parse(fields, "chat")
            completions.prompt_tokens(dec, req, template)
            assert req.tool_format is want
        out = dec.create_chat_completion(ASK, tools=[CLOCK], tool_choice="required", temperature=0.9, seed=1,
                                         max_tokens=120, return_tokens=True)["choices"][0]
        assert out["finish_reason"] == "tool_calls", out
        assert dec.target_model.detokenize(out["tokens"]).lstrip().startswith("<tool_call>")
        assert json.loads(out["message"]["tool_calls"][0]["function"]["arguments"])["zone"] in ("UTC", "CET")


def test_the_server_serves_a_gguf_s_tool_use_template(tool_use_models):
    """A real server on a GGUF with a tool_use template: /props reports both templates, as
    llama-server's does, and an openai client's forced call comes back read in the tool_use
    template's format, whole and streamed, with the next turn served; with --chat-template that
    template is the one reported. Ollama's /api/show says the model takes tools where the tool_use
    template shows them and the default (ChatML) does not."""
    from test_server import running
    from test_tools import openai_forced_call

    both, _, chatml = tool_use_models
    with running(["-m", both, "-d", both, "-c", "2048"]) as s:
        props = s.http.get("/props").json()
        assert (props["chat_template"], props["chat_template_tool_use"]) == \
            (NEMO.read_text(), HERMES3_TOOL_USE.read_text())
        openai_forced_call(s.url)
    with running(["-m", both, "-d", both, "-c", "2048", "--chat-template", str(HERMES3_TOOL_USE)]) as s:
        props = s.http.get("/props").json()
        assert props["chat_template"] == HERMES3_TOOL_USE.read_text() and "chat_template_tool_use" not in props
    with running(["-m", chatml, "-d", chatml, "-c", "2048", "--alias", "tiny"]) as s:
        shown = s.http.post("/api/show", json={"model": "tiny"}).json()
        assert "tools" in shown["capabilities"] and "tools" not in shown["template"]


def test_a_template_that_writes_no_assistant_text_is_continued_after_its_prompt(tiny, tmp_path):
    """Where the template does not write the last assistant message at all (or is one of llama.cpp's
    built-in templates), the continued message goes after the generation prompt."""
    from specllama import templates

    path = tmp_path / "users.jinja"
    path.write_text("{% for m in messages %}{% if m.role == 'user' %}U:{{ m.content }}\n{% endif %}{% endfor %}"
                    "{% if add_generation_prompt %}A:{% endif %}")
    msgs = [{"role": "user", "content": "Name a river."}, {"role": "assistant", "content": "The longest is "}]
    model = specllama.Model(tiny.target)
    assert templates.render(model, msgs, True, str(path)) == "U:Name a river.\nA:The longest is "
    # under a built-in template (llama.cpp's own), after the generation prompt
    assert templates.render(model, msgs, True, "chatml") == \
        "<|im_start|>user\nName a river.<|im_end|>\n<|im_start|>assistant\nThe longest is "
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q, n_ctx=256) as dec:
        reply = dec.create_chat_completion(msgs, chat_template="chatml", max_tokens=4, temperature=0)
        assert reply["choices"][0]["message"]["content"] is not None
    # an assistant's turn of calls is not continued: the reply starts a turn of its own
    qwen = str(DATA / "Qwen-Qwen2.5-7B-Instruct.jinja")
    calls = msgs[:1] + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]
    closed = templates.render(model, calls, False, qwen)
    assert templates.render(model, calls, True, qwen) == closed + "<|im_start|>assistant\n"


def test_llama_cpp_variables():
    """The variables llama-server gives a template, under those a request gives."""
    from specllama.templates import llama_cpp_variables

    source = ("{{ tools is defined }} {{ documents is defined }} {{ enable_thinking }} {{ preserve_thinking }} "
              "{{ clear_thinking }} {{ truncate_history_thinking }} {{ drop_thinking }} {{ date_string }}")
    today = datetime.date.today().strftime("%d %b %Y")
    assert render_jinja(source, MESSAGES, **llama_cpp_variables(source, {})) == \
        f"False False False True False False False {today}"
    assert render_jinja(source, MESSAGES, **llama_cpp_variables(source, {"tools": []})).startswith("False False")
    given = {"tools": [{"type": "function"}], "documents": [], "enable_thinking": True,
             "preserve_reasoning": False, "date_string": "1 Jan 2000"}
    assert render_jinja(source, MESSAGES, **llama_cpp_variables(source, given)) == \
        "True True True False True True True 1 Jan 2000"


def test_every_family_is_covered():
    """The references hold a template with a tools section that uses the tools (and a default
    system message, a family without a system role, one refusing roles out of order)."""
    results = {n: t["results"] for n, t in REFERENCES["templates"].items()}
    assert "get_weather" in results["meta-llama-Llama-3.1-8B-Instruct"]["with_tools"]["text"]
    assert "get_weather" in results["NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use"]["with_tools"]["text"]
    assert "You are a helpful AI assistant named SmolLM" in \
        results["HuggingFaceTB-SmolLM2-135M-Instruct"]["one_user_message"]["text"]
    assert "System role not supported" in results["google-gemma-2-2b-it"]["system_and_turns"]["error"]
    assert "alternate" in results["mistralai-Mistral-Nemo-Instruct-2407"]["user_twice"]["error"]


# -- the sandbox ------------------------------------------------------------------------------

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ raise_exception.__globals__.os }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{% set x = messages[0].update(role='system') %}",  # a dict's mutators, and a list's
    "{% set x = messages.extend([1]) %}",  # other than append and pop, are not llama.cpp's either
])
def test_escapes_are_refused(source):
    with pytest.raises(ChatTemplateError, match="the chat template failed: SecurityError"):
        render_jinja(source, MESSAGES)


def test_lists_take_append_and_pop_on_copies():
    """A list's append and pop work, as in llama.cpp's Jinja engine (Kimi K2's template gathers
    call ids with them); the caller's messages and tools are left as they were."""
    msgs = [{"role": "user", "content": "hi", "tags": ["a"]}]
    tools = [{"type": "function", "function": {"name": "f"}}]
    source = ("{% set ids = [] %}{% set _ = ids.append(1) %}{% set _ = ids.append(2) %}{{ ids.pop() }}{{ ids }}"
              "{% set _ = messages.append({'role': 'x'}) %}{% set _ = messages[0].tags.pop() %}"
              "{% set _ = tools.pop() %}{{ messages | length }}{{ messages[0].tags }}{{ tools }}")
    assert render_jinja(source, msgs, tools=tools) == "2[1]2[][]"
    assert msgs == [{"role": "user", "content": "hi", "tags": ["a"]}]
    assert tools == [{"type": "function", "function": {"name": "f"}}]


def test_internals_render_as_nothing():
    """An unsafe attribute that is only printed is undefined (empty), as in jinja2's sandbox."""
    assert render_jinja("[{{ messages.__class__ }}{{ raise_exception.__code__ }}]", MESSAGES) == "[]"


@pytest.mark.parametrize("source, why", [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"),
    ("{% for m in messages * 1000 %}{% for n in messages * 1000 %}{{ '' }}{% endfor %}{% endfor %}", "steps"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
     "value of more than"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "value of more"),
    ("{{ 'x' * 10**12 }}", "value of more than"),
    ("{{ 7 ** (10 ** 9) }}", "million bits"),
    ("{% for i in range(99999) %}{{ 'y' * 99999 }}{% endfor %}", "writes more than"),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recurses too deeply"),
])
def test_runaway_templates_are_stopped(source, why):
    """A template's loops, strings and recursion have a budget: a runaway one is stopped with a
    clear error instead of running on or filling the memory."""
    with pytest.raises(ChatTemplateError, match="the chat template was stopped") as err:
        render_jinja(source, MESSAGES)
    assert why in str(err.value)


def test_template_errors_are_one_line():
    with pytest.raises(ChatTemplateError, match=r"not valid Jinja \(line 1\)"):
        render_jinja("{% for m in messages %}{{ m.content }}", MESSAGES)
    with pytest.raises(ChatTemplateError, match="refused the messages: no users here"):
        render_jinja("{{ raise_exception('no users here') }}", MESSAGES)
    with pytest.raises(ChatTemplateError, match="the chat template failed: ZeroDivisionError"):
        render_jinja("{{ 1 // 0 }}", MESSAGES)


def test_template_sees_what_the_ecosystem_provides():
    source = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}:{{ m.content }};{% endfor %}"
              "{% if tools %}tools={{ tools | tojson }};{% endif %}{% if documents %}{{ documents | length }} docs;"
              "{% endif %}{{ strftime_now('%Y') | length }}{% if add_generation_prompt %}>{% endif %}{{ eos_token }}")
    tools = [{"name": "météo", "x": "<b>"}]
    out = render_jinja(source, MESSAGES, True, "<s>", "</s>", tools=tools, documents=[{"text": "a"}])
    assert out == '<s>user:hi;tools=[{"name": "météo", "x": "<b>"}];1 docs;4></s>'
    assert render_jinja(source, MESSAGES, False) == "user:hi;4"


def test_messages_are_checked_and_content_parts_joined(tiny):
    with specllama.SpeculativeDecoder(tiny.target, n_ctx=256) as dec:
        parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
        assert dec.apply_chat_template(parts) == "<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\n"
        for bad, match in [([{"content": "x"}], r"messages\[0\] has no 'role'"),
                           ([{"role": "user"}], r"messages\[0\] has no 'content'"),
                           ([{"role": "user", "content": None}], r"messages\[0\]: 'content' is null"),
                           ([{"role": "tool", "content": None, "tool_calls": []}], r"messages\[0\]: 'content' is null"),
                           (["hi"], r"messages\[0\] must be an object"),
                           ("hi", "messages must be a list"),
                           ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
                            "only text content is supported, not a 'image_url' part")]:
            with pytest.raises(ValueError, match=match):
                dec.apply_chat_template(bad)


def test_a_gguf_without_a_template_needs_one(tmp_path):
    from tiny_models import random_weights, vocab, write_model

    toks = vocab()
    path = write_model(tmp_path / "plain.gguf", toks, random_weights(len(toks), seed=1), chat_template=None)
    with specllama.SpeculativeDecoder(str(path), n_ctx=128) as dec:
        with pytest.raises(ChatTemplateError, match="has no chat template; give one"):
            dec.apply_chat_template(MESSAGES)
        assert dec.apply_chat_template(MESSAGES, template="chatml").startswith("<|im_start|>user")


# -- conversations ----------------------------------------------------------------------------

TURN_COUNTER = ("<|im_start|>system\nThis conversation has {{ messages | length }} messages.<|im_end|>\n"
                "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.mark.parametrize("template", [None, "turn-counter"])
def test_multi_turn_chat_equals_the_whole_conversation_rendered_fresh(tiny, tmp_path, template):
    """Turn by turn, the prompt is the whole conversation rendered fresh, and the reply equals a
    fresh decoder's for that prompt. With a prefix-stable template (the model's own) each turn
    processes only its new tokens; with one that rewrites its first line every turn the cache is
    reused up to that line."""
    if template:
        path = tmp_path / "turns.jinja"
        path.write_text(TURN_COUNTER)
        template = str(path)
    gen = dict(max_tokens=10, temperature=0)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec, \
            specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as fresh:
        session = ChatSession(dec, template=template)
        previous = 0
        for turn, text in enumerate(["the cat is", "on the hot word", "and then"]):
            prompt = session.prompt_for(text)
            expected = fresh.chat_tokens(session.messages + [{"role": "user", "content": text}], template=template)
            assert prompt == expected
            chunks = list(session.send(text, **gen))
            fresh.reset()
            assert "".join(c.text for c in chunks) == fresh.generate(expected, **gen).text
            stats = chunks[-1].stats
            if template is None and turn:
                assert stats.n_prompt_cached >= previous  # the earlier turns were not processed again
            if template and turn:
                assert stats.n_prompt_cached < previous  # the first line changed: reused up to it
                assert stats.n_prompt_cached > 0
            previous = len(prompt)


@pytest.mark.default_pair
def test_prompt_tokens_equal_llama_cpp_pythons(default_pair):
    """On the default pair the prompt tokens of a chat are those llama-cpp-python's
    create_chat_completion evaluates for the same messages (its default system message included)."""
    import llama_cpp

    target, draft = default_pair
    conversations = [
        [{"role": "user", "content": "Name three rivers in Europe."}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"},
         {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "How are you?"}],
    ]
    llm = llama_cpp.Llama(target, n_ctx=512, verbose=False)
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512) as dec:
        for messages in conversations:
            llm.create_chat_completion(messages, max_tokens=1, temperature=0)
            theirs = list(llm.input_ids[:llm.n_tokens])  # the prompt: the one sampled token is never evaluated
            assert dec.chat_tokens(messages) == theirs


@pytest.mark.default_pair
def test_chat_reply_equals_llama_cpp_pythons(default_pair, tmp_path):
    """`generate --chat` on the default pair answers as llama-cpp-python's create_chat_completion
    does at temperature 0 (plain decoding on both sides: the same prompt, the same engine)."""
    import subprocess
    import sys

    import llama_cpp

    target, draft = default_pair
    message = "Name three rivers in Europe."
    llm = llama_cpp.Llama(target, n_ctx=512, verbose=False)
    theirs = llm.create_chat_completion([{"role": "user", "content": message}], max_tokens=24,
                                        temperature=0)["choices"][0]["message"]["content"]
    r = subprocess.run([sys.executable, "-m", "specllama", "generate", "--chat", message, "-m", target, "--no-draft",
                        "-n", "24", "--temp", "0"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == theirs.strip()
    assert theirs.startswith("1. Danube:")


def test_cli_template_errors_are_one_line(tiny, tmp_path):
    from click.testing import CliRunner

    from specllama.cli import main

    bad = tmp_path / "bad.jinja"
    bad.write_text("{{ raise_exception('only system messages here') }}")
    r = CliRunner().invoke(main, ["generate", "hi", "-m", tiny.target, "--chat", "--chat-template", str(bad), "-n", "2", "-c", "256"])
    assert r.exit_code == 1
    assert r.stderr.strip() == "Error: the chat template refused the messages: only system messages here"


def test_a_template_file_is_read_again_once_it_changes(tmp_path):
    """A template file is read once per version (a server reads it for every request): an edited
    file is read anew, and one that is not UTF-8 is a clear error."""
    from specllama.templates import template_source

    path = tmp_path / "t.jinja"
    path.write_text("first")
    assert template_source(None, str(path)) == "first"
    path.write_text("second, longer")
    os.utime(path, ns=(1, 1))
    assert template_source(None, str(path)) == "second, longer"
    path.write_bytes(b"\xff\xfe not text")
    with pytest.raises(ChatTemplateError, match="cannot read the chat template"):
        template_source(None, str(path))
