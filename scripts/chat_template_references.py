"""Write tests/data/chat_templates/references.json: each template in tests/data/chat_templates
rendered by Hugging Face transformers (transformers.utils.chat_template_utils.render_jinja_template),
an implementation independent of specllama's, for the conversations below.

The tests compare specllama's rendering with these strings; they never run transformers. To
regenerate (needs network access to PyPI only):

    python3 -m venv /tmp/tf && /tmp/tf/bin/pip install transformers jinja2
    /tmp/tf/bin/python scripts/chat_template_references.py

The .jinja files are copied from llama.cpp's models/templates (the copy in the llama-cpp-python
0.3.36 sdist), which holds each model's template as published with it, and SmolLM2's from its
GGUF (the default target).
"""

import json
from pathlib import Path

import transformers
from transformers.utils.chat_template_utils import render_jinja_template

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "chat_templates"

SPECIAL = {  # the bos and eos tokens each model's tokenizer gives its template
    "HuggingFaceTB-SmolLM2-135M-Instruct": ("<|im_start|>", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "Qwen-Qwen2.5-7B-Instruct": ("", "<|im_end|>"),
    "Qwen-QwQ-32B": ("", "<|im_end|>"),
}

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city's name, e.g. Zürich"}},
                   "required": ["city"]}}}

CASES = {
    "one_user_message": dict(messages=[{"role": "user", "content": "Name three rivers in Europe."}],
                             add_generation_prompt=True),
    "system_and_turns": dict(messages=[
        {"role": "system", "content": "You answer in one line."},
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi. How can I help?"},
        {"role": "user", "content": "What is 2 + 2?"}], add_generation_prompt=True),
    "no_generation_prompt": dict(messages=[
        {"role": "user", "content": "Say 'ok'."},
        {"role": "assistant", "content": "ok"}], add_generation_prompt=False),
    "user_twice": dict(messages=[
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"}], add_generation_prompt=True),
    "with_tools": dict(messages=[{"role": "user", "content": "What is the weather in Zürich?"}],
                       tools=[WEATHER_TOOL], add_generation_prompt=True),
}


def main() -> None:
    out = {"generator": f"transformers {transformers.__version__} render_jinja_template", "cases": CASES,
           "templates": {}}
    for name, (bos, eos) in SPECIAL.items():
        source = (DATA / f"{name}.jinja").read_text(encoding="utf-8")
        results = {}
        for case, spec in CASES.items():
            spec = dict(spec)
            messages = spec.pop("messages")
            try:
                rendered, _ = render_jinja_template([messages], chat_template=source, bos_token=bos, eos_token=eos,
                                                    **spec)
                results[case] = {"text": rendered[0]}
            except Exception as exc:  # the template's raise_exception: recorded as an expected refusal
                results[case] = {"error": str(exc)}
        out["templates"][name] = {"bos_token": bos, "eos_token": eos, "results": results}
    (DATA / "references.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
