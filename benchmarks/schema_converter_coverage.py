"""How the JSON-schema converter specllama uses (specllama.schemas: llama-cpp-python's port of
llama.cpp's json_schema_to_grammar, with llama.cpp's integer bounds and whitespace rule) covers
llama.cpp's own: every case of llama.cpp's tests/test-json-schema-to-grammar.cpp in the pinned sdist
(schema, whether llama.cpp converts it, the grammar it writes) run through it. A case counts as the
same grammar where the rules match line for line once the whitespace rule and the places it stands
are set aside (the two converters put the optional whitespace between a value's tokens in
different rules); otherwise as converted (a grammar llama.cpp parses) or refused; and whether
specllama refuses the schema for a keyword the converter would pass over (specllama.schemas.check).

    python benchmarks/schema_converter_coverage.py
"""

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def cases(source: str):
    """(expected status, name, schema text, expected grammar) of each test({...}) in the file."""
    pat = re.compile(r'test\(\{\s*(SUCCESS|FAILURE),\s*"((?:[^"\\]|\\.)*)",\s*R"""\((.*?)\)""",\s*R"""\((.*?)\)"""',
                     re.S)
    for m in pat.finditer(source):
        yield m.group(1), m.group(2), m.group(3), m.group(4)


def rules(gbnf: str):
    """The grammar's rules, sorted, without the whitespace rule and its uses."""
    lines = [ln.strip() for ln in gbnf.strip().splitlines() if ln.strip() and not ln.strip().startswith("space ::=")]
    return sorted(re.sub(r"\s+", " ", re.sub(r"\bspace\b", "", ln)).strip() for ln in lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    import llama_cpp

    from specllama import schemas
    from specllama.models import pair_paths
    from specllama.provenance import provenance

    src = next(Path.home().glob(".cache/specllama/llama.cpp-*/src/tests/test-json-schema-to-grammar.cpp"), None)
    if src is None:
        sys.exit("the llama.cpp sdist is not unpacked: run benchmarks/build_llama_cpp.sh first")
    target, _ = pair_paths("qwen2.5-coder")
    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    mp.vocab_only = True
    vocab = llama_cpp.llama_model_get_vocab(llama_cpp.llama_model_load_from_file(target.encode(), mp))
    quiet = llama_cpp.llama_log_callback(lambda *a: None)  # (kept referenced while llama.cpp may call it)
    llama_cpp.llama_log_set(quiet, None)

    rows = []
    for status, name, schema, expected in cases(src.read_text()):
        row = {"case": name, "llama_cpp": status.lower()}
        try:
            schemas.check(json.loads(schema))
            row["specllama"] = "accepts"
        except ValueError as exc:
            row["specllama"] = f"refuses: {exc}"[:160]
        try:
            ours = schemas.convert(json.loads(schema))
        except ValueError as exc:
            row["port"] = "refused"
            row["why"] = str(exc)[:160]
            rows.append(row)
            continue
        smpl = llama_cpp.llama_sampler_init_grammar(vocab, ours.encode(), b"root")
        if not smpl:
            row["port"] = "does not parse"
        else:
            llama_cpp.llama_sampler_free(smpl)
            row["port"] = "same grammar" if status == "SUCCESS" and rules(ours) == rules(expected) else "converted"
        rows.append(row)

    table = {}
    for r in rows:
        key = f"llama.cpp {r['llama_cpp']}, port {r['port']}"
        table[key] = table.get(key, 0) + 1
    for k, v in sorted(table.items()):
        print(f"{v:4d}  {k}")
    refused = [r for r in rows if r["specllama"] != "accepts"]
    print(f"{len(refused):4d}  refused by specllama for a keyword the port passes over")
    for r in rows:
        if r["port"] in ("refused", "does not parse") or r["specllama"] != "accepts":
            print(f"  {r['case']} (llama.cpp: {r['llama_cpp']}): port {r['port']}"
                  f"{' (' + r['why'] + ')' if 'why' in r else ''}; specllama {r['specllama']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"provenance": provenance({"target": target}, 1), "source": src.name, "summary": table, "cases": rows}
    (out / "schema_converter_coverage.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out / 'schema_converter_coverage.json'}")


if __name__ == "__main__":
    main()
