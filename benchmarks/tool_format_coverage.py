"""Which chat templates' tool calls specllama reads: every template llama.cpp bundles
(models/templates in the pinned sdist) renders a past turn of one call, get_time(zone="UTC",
hours=3), after a user's message; the text after the template's generation prompt (up to an
end-of-turn tag) is what the model writes for that call, and the call format specllama picks for the
template (specllama.tools.format_of) reads it back, or not. A template that writes no call (no
tool support in its history) or fails to render is counted apart.

    python benchmarks/tool_format_coverage.py
"""

import argparse
import json
import sys
from pathlib import Path

CALL = {"id": "abcdefghi", "type": "function",
        "function": {"name": "get_time", "arguments": {"zone": "UTC", "hours": 3}}}
TOOLS = [{"type": "function", "function": {"name": "get_time", "description": "The time in a zone.", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}, "hours": {"type": "integer"}},
    "required": ["zone", "hours"]}}}]
ENDS = ("<|eot_id|>", "</s>", "<|im_end|>", "<|end_of_text|>", "<|eom_id|>", "<end_of_turn>")


def reply_of(source: str):
    """The text a template writes for the call as a reply (None: it writes none)."""
    from specllama import templates

    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "", "tool_calls": [CALL]}]
    whole = templates.render_jinja(source, templates.template_messages(source, msgs), False, "<s>", "</s>", tools=TOOLS)
    prompt = templates.render_jinja(source, templates.template_messages(source, msgs[:1]), True, "<s>", "</s>",
                                    tools=TOOLS)
    reply = whole[len(prompt):] if whole.startswith(prompt) else whole[whole.rfind("Hi") + 2:]
    if "get_time" not in reply:
        return None
    for end in ENDS:
        at = reply.find(end, 1)
        reply = reply[:at] if at > 0 else reply
    return reply


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    from specllama import tools
    from specllama.provenance import provenance

    root = next(Path.home().glob(".cache/specllama/llama.cpp-*/src/models/templates"), None)
    if root is None:
        sys.exit("the llama.cpp sdist is not unpacked: run benchmarks/build_llama_cpp.sh first")
    rows = []
    for path in sorted(root.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        fmt = tools.format_of(source)
        row = {"template": path.stem, "format": getattr(fmt, "__name__", repr(fmt)).replace("specllama.tools.", "")}
        try:
            reply = reply_of(source)
        except Exception as exc:  # (a template this sandbox cannot render: counted, not fatal)
            row.update(result="does not render", why=str(exc)[:120])
            rows.append(row)
            continue
        if reply is None:
            row["result"] = "writes no call"
        else:
            calls = fmt.parse(reply, TOOLS)[1]
            got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]
            row.update(result="read" if got == [("get_time", CALL["function"]["arguments"])] else "not read",
                       reply=reply[:160])
        rows.append(row)
    kinds = ("read", "not read", "writes no call", "does not render")
    summary = {k: sum(r["result"] == k for r in rows) for k in kinds}
    for k, v in summary.items():
        print(f"{v:4d}  {k}")
    for r in rows:
        if r["result"] != "read":
            print(f"  {r['template']} ({r['format']}): {r['result']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"provenance": provenance({}, 1), "source": root.parents[2].name, "summary": summary,
              "templates": rows}
    (out / "tool_format_coverage.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out / 'tool_format_coverage.json'}")


if __name__ == "__main__":
    main()
