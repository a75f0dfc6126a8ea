"""Chat templates rendered as llama.cpp renders them: every template llama.cpp bundles
(models/templates in the pinned sdist) renders a set of conversations (one message; a system
message and turns; a developer message; tools offered; a turn of two calls sent back with their
results; an assistant's message to continue, llama-server's prefill; a past turn's
reasoning_content) through llama-server's /apply-template (--jinja --chat-template-file) and
through specllama's sandbox (specllama.templates.render) with the same model, and the two prompts
are compared. Both refusing a conversation counts as agreeing.

  python benchmarks/template_parity.py [--model GGUF] [--out DIR]
  python benchmarks/template_parity.py --references tests/data/chat_templates/llama_cpp_references.json
      (writes the llama.cpp renderings of the templates in tests/data/chat_templates, which
      tests/test_templates.py compares against)

llama-server comes from benchmarks/build_llama_cpp.sh (built from the llama-cpp-python 0.3.36 sdist).
"""

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from serve_bench import free_port, llama_cpp_bin, stop, wait_healthy  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "get_time", "description": "The time in a zone.", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "description": "An IANA zone, e.g. Europe/Zürich"},
                                     "hours": {"type": "integer"}},
    "required": ["zone"]}}}]
CALLS = [{"id": "abcdefghi", "type": "function",
          "function": {"name": "get_time", "arguments": '{"zone": "UTC", "hours": 3}'}},
         {"id": "jklmnopqr", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "CET"}'}}]
CASES = {
    "one_message": {"messages": [{"role": "user", "content": "Name three rivers in Europe."}]},
    "system_and_turns": {"messages": [
        {"role": "system", "content": "You answer in one line."}, {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi. How can I help?"}, {"role": "user", "content": "What is 2 + 2?"}]},
    "developer": {"messages": [{"role": "developer", "content": "Answer in French."},
                               {"role": "user", "content": "Hi"}]},
    "tools": {"messages": [{"role": "user", "content": "What time is it in Zürich?"}], "tools": TOOLS},
    "calls_and_results": {"messages": [
        {"role": "system", "content": "Use the tools."}, {"role": "user", "content": "Time in UTC+3 and CET?"},
        {"role": "assistant", "content": None, "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "15:00"},
        {"role": "tool", "tool_call_id": "jklmnopqr", "content": "13:00"}], "tools": TOOLS},
    "prefill": {"messages": [{"role": "user", "content": "Name a river."},
                             {"role": "assistant", "content": "The longest is "}]},
    "past_reasoning": {"messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", "reasoning_content": "They greet me."},
        {"role": "user", "content": "Bye"}]},
}


def llama_cpp_renderings(llama_bin: Path, model: str, template: Path) -> dict:
    """Each case as llama-server renders it with the template: {"text": ...} or {"error": ...}."""
    port = free_port()
    cmd = [str(llama_bin / "llama-server"), "-m", model, "--jinja", "--chat-template-file", str(template),
           "-c", "512", "-t", "1", "-ngl", "0", "--port", str(port), "--host", "127.0.0.1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = {}
    try:
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc, timeout=60)
        except RuntimeError as exc:  # (llama-server refuses a template it cannot parse at start)
            return {case: {"error": f"llama-server did not start: {exc}"} for case in CASES}
        for case, body in CASES.items():
            r = httpx.post(url + "/apply-template", json=body, timeout=60)
            out[case] = {"text": r.json()["prompt"]} if r.status_code == 200 else \
                {"error": r.json().get("error", {}).get("message", r.text)[:200]}
    finally:
        stop(proc)
    return out


def specllama_rendering(model, template: Path, case: str) -> dict:
    from specllama import templates

    body = CASES[case]
    try:
        return {"text": templates.render(model, body["messages"], True, str(template), tools=body.get("tools"))}
    except (templates.ChatTemplateError, ValueError) as exc:
        return {"error": str(exc)[:200]}


def compare(ours: dict, theirs: dict) -> dict:
    if "error" in ours or "error" in theirs:
        if "error" in ours and "error" in theirs:
            return {"result": "both refuse"}
        who = "specllama" if "error" in ours else "llama.cpp"
        return {"result": f"{who} refuses", "error": (ours if who == "specllama" else theirs)["error"]}
    a, b = ours["text"], theirs["text"]
    if a == b:
        return {"result": "same"}
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return {"result": "differs", "at": at, "specllama": a[max(0, at - 40):at + 80],
            "llama.cpp": b[max(0, at - 40):at + 80]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a GGUF both render with (its BOS and EOS; default: the default pair's target)")
    ap.add_argument("--templates", help="a folder of .jinja files (default: llama.cpp's models/templates)")
    ap.add_argument("--references", help="write llama.cpp's renderings of tests/data/chat_templates here instead")
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    from specllama import _core, models
    from specllama.provenance import provenance

    model_path = args.model or str(models.default_pair()[0])
    llama_bin = llama_cpp_bin()
    root = Path(args.templates) if args.templates else \
        HERE.parent / "tests" / "data" / "chat_templates" if args.references else \
        next(Path.home().glob(".cache/specllama/llama.cpp-*/src/models/templates"))
    if args.references:
        refs = {"generator": "llama-server /apply-template (llama-cpp-python 0.3.36 sdist), "
                             "benchmarks/template_parity.py --references",
                "model": Path(model_path).name, "rendered_on": datetime.date.today().isoformat(), "cases": CASES,
                "templates": {p.stem: llama_cpp_renderings(llama_bin, model_path, p)
                              for p in sorted(root.glob("*.jinja"))}}
        Path(args.references).write_text(json.dumps(refs, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {args.references}")
        return
    model = _core.Model(model_path)
    rows = []
    for path in sorted(root.glob("*.jinja")):
        theirs = llama_cpp_renderings(llama_bin, model_path, path)
        cases = {case: compare(specllama_rendering(model, path, case), theirs[case]) for case in CASES}
        agree = sum(c["result"] in ("same", "both refuse") for c in cases.values())
        rows.append({"template": path.stem, "agree": agree, "cases": cases})
        print(f"{agree}/{len(CASES)}  {path.stem}" + "".join(
            f"\n      {k}: {v['result']}" for k, v in cases.items() if v["result"] not in ("same", "both refuse")))
    summary = {"templates": len(rows), "all cases agree": sum(r["agree"] == len(CASES) for r in rows),
               "cases": len(rows) * len(CASES), "cases agree": sum(r["agree"] for r in rows),
               "templates agreeing, by case": {case: sum(r["cases"][case]["result"] in ("same", "both refuse")
                                                         for r in rows) for case in CASES}}
    print(json.dumps(summary))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"provenance": provenance({"model": model_path}, 1), "source": root.parents[2].name if not
              args.templates else str(root), "cases": CASES, "summary": summary, "templates": rows}
    (out / "template_parity.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {out / 'template_parity.json'}")


if __name__ == "__main__":
    main()
