"""A benchmark report records where it ran but no path of the machine that wrote it."""

from __future__ import annotations

import json
import os
import sys

from specllama.provenance import portable_command, portable_settings, provenance


def test_the_output_option_is_left_out_and_paths_become_file_names(tmp_path):
    model = tmp_path / "models" / "target.gguf"
    model.parent.mkdir()
    model.write_bytes(b"")
    argv = [str(tmp_path / "benchmarks" / "serve_bench.py"), "--repeat", "5", "--out", str(tmp_path / "out"),
            "-m", str(model), "--temp", "0.8"]
    assert portable_command(argv) == "serve_bench.py --repeat 5 -m target.gguf --temp 0.8"
    assert portable_command(["bench", f"--out={tmp_path}", f"--model={model}", "-n", "4"]) == \
        "bench --model=target.gguf -n 4"
    assert portable_command(["specllama", "bench", "-o", "bench-out", "-n", "256"]) == "specllama bench -n 256"
    # a benchmark whose output option is --json; elsewhere --json is a flag and stays
    assert portable_command(["replay.py", "--json", "r.json", "--replay", str(model)],
                            output_options=("--json",)) == "replay.py --replay target.gguf"
    assert portable_command(["specllama", "generate", "--json", "hello"]) == "specllama generate --json hello"


def test_settings_lose_the_output_and_keep_file_names(tmp_path):
    settings = {"out": str(tmp_path / "out"), "model": str(tmp_path), "repeat": 5, "temp": 0.8, "servers": "a,b"}
    assert portable_settings(settings) == {"model": tmp_path.name, "repeat": 5, "temp": 0.8, "servers": "a,b"}


def test_a_report_header_holds_no_path_of_this_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "compare.py"), "--out", str(tmp_path / "res")])
    header = json.dumps(provenance({}))
    assert str(tmp_path) not in header
    assert json.loads(header)["command"] == "compare.py"


def test_a_report_header_records_the_llama_cpp_environment(tmp_path, monkeypatch):
    for name in [k for k in os.environ if k.startswith(("GGML_", "LLAMA_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GGML_CUDA_GRAPH_OPT", "1")
    monkeypatch.setenv("LLAMA_GRAPH_REUSE_DISABLE", "0")
    monkeypatch.setenv("GGML_SOME_FILE", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("LLAMA_API_KEY", "sk-not-for-reports")
    monkeypatch.setenv("LLAMA_ARG_HF_TOKEN", "hf-not-for-reports")
    header = provenance({})
    assert header["env"] == {"GGML_CUDA_GRAPH_OPT": "1", "GGML_SOME_FILE": tmp_path.name,
                             "LLAMA_GRAPH_REUSE_DISABLE": "0"}
    assert str(tmp_path) not in json.dumps(header) and "not-for-reports" not in json.dumps(header)


def test_a_report_header_names_the_commit_it_is_told(monkeypatch):
    """SPECLLAMA_COMMIT names the commit measured where the tree is a copy whose git is not its own."""
    monkeypatch.delenv("SPECLLAMA_COMMIT", raising=False)
    here = provenance({})["commit"]
    monkeypatch.setenv("SPECLLAMA_COMMIT", "cec9678")
    assert provenance({})["commit"] == "cec9678" != here
    monkeypatch.setenv("SPECLLAMA_COMMIT", " ")
    assert provenance({})["commit"] == here
