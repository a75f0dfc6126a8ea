"""The command line on the tiny models, through click's CliRunner: stdout holds model text only,
stderr the diagnostics; errors are one line and a non-zero exit."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import specllama
from conftest import wait_until_waiting_for_input
from specllama.chat import ChatSession
from specllama.chat import ChatInput
from specllama.cli import _dsi_line, main


@pytest.fixture()
def runner():
    return CliRunner()


def _pair(tiny):
    return ["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "512"]


def test_help_lists_commands(runner):
    r = runner.invoke(main, ["-h"])
    assert r.exit_code == 0
    for cmd in ("chat", "generate", "bench", "draft", "models"):
        assert cmd in r.output


def test_generate_streams_text_to_stdout_and_stats_to_stderr(runner, tiny):
    # a fixed draft length, so that the stats line has drafts to report on any machine (this draft
    # costs what its target does: the adaptive rule may rightly leave it out of every step)
    r = runner.invoke(main, ["generate", "the cat is", *_pair(tiny), "-n", "20", "--temp", "0", "--fixed-draft"])
    assert r.exit_code == 0, r.output
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        want = dec.generate("the cat is", max_tokens=20, temperature=0)
    assert r.stdout == want.text + "\n"
    assert "tokens/s" in r.stderr and "acceptance" in r.stderr and want.text not in r.stderr


def test_generate_device_sampling_flag(runner, tiny):
    """--device-sampling runs the chain in the decode graph (here on the CPU backend) and says so with
    the bytes read back; the text is the host path's; a grammar then samples on the host, saying why."""
    args = ["generate", "the cat is", *_pair(tiny), "-n", "16", "--temp", "0.8", "-s", "3", "--fixed-draft"]
    on = runner.invoke(main, [*args, "--device-sampling"])
    off = runner.invoke(main, [*args, "--no-device-sampling"])
    assert on.exit_code == 0 and off.exit_code == 0, on.output + off.output
    assert on.stdout == off.stdout
    assert re.search(r"sampled on the device \(\d+ bytes of logits per token\)", on.stderr), on.stderr
    assert "sampled on the" not in off.stderr
    g = runner.invoke(main, [*args, "--device-sampling", "--grammar", 'root ::= [a-z ]+'])
    assert g.exit_code == 0 and "sampled on the host (grammar)" in g.stderr, g.output


def test_generate_draft_ahead_flag(runner, tiny):
    """--draft-ahead with --fixed-draft: the text is plain decoding's and the stats line says how many
    tokens were drafted during verifications; without --fixed-draft, and on serve and bench, it is
    refused naming the flag."""
    args = ["generate", "the cat is", "-m", tiny.target_q, "-d", tiny.target_q, "-n", "24", "--temp", "0",
            "--fixed-draft", "--n-draft", "3", "--drafter", "model"]
    r = runner.invoke(main, [*args, "--draft-ahead", "3", "--compare"])
    assert r.exit_code == 0, r.output
    assert re.search(r"\d+ tokens drafted during verifications, [1-9]\d* of them used as drafts", r.stderr), r.stderr
    assert "output identical" in r.stderr
    bad = runner.invoke(main, ["generate", "the cat is", *_pair(tiny), "-n", "4", "--draft-ahead", "2"])
    assert bad.exit_code == 2 and "--draft-ahead" in bad.output and "needs --fixed-draft" in bad.output
    for cmd in (["serve"], ["bench", "-n", "4"]):
        bad = runner.invoke(main, [*cmd, *_pair(tiny), "--fixed-draft", "--draft-ahead", "2"])
        assert bad.exit_code == 2 and "--draft-ahead" in bad.output, bad.output


def test_generate_reads_stdin_and_json(runner, tiny):
    r = runner.invoke(main, ["generate", *_pair(tiny), "-n", "12", "--temp", "0", "--json"], input="the cat is")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["finish_reason"] in ("stop", "length")
    for key in ("n_drafted", "n_accepted", "acceptance_rate", "tokens_per_second"):
        assert key in out["stats"]
    assert out["stats"]["n_generated"] == len(out["tokens"])


def test_generate_no_draft_and_chat_template(runner, tiny):
    r = runner.invoke(main, ["generate", "hi", *_pair(tiny), "--no-draft", "--chat", "-n", "8", "--temp", "0",
                             "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["stats"]["n_drafted"] == 0


def test_generate_with_prompt_lookup_needs_no_draft(runner, tiny):
    # the tiny target repeats itself after this prompt: lookup finds its own text again
    text = "on the hot word on the hot word on the hot word on the hot word on the"
    r = runner.invoke(main, ["generate", text, "-m", tiny.target_q, "--drafter", "lookup", "--fixed-draft", "-n", "20",
                             "--temp", "0", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)["stats"]
    assert s["n_lookup_drafted"] == s["n_drafted"] > 0


def test_generate_compare(runner, tiny):
    r = runner.invoke(main, ["generate", "the cat is", *_pair(tiny), "-n", "30", "--temp", "0", "--compare"])
    assert r.exit_code == 0, r.output
    assert "plain decoding" in r.stderr and "output identical" in r.stderr


def test_a_seeded_run_is_plain_decodings_sample(runner, tiny):
    """-s at --temp > 0 draws keyed: --compare's plain decoding draws the same tokens, and the
    output is the Python API's with acceptance='keyed' (not the rejection rule's)."""
    for seed in ("1", "2"):
        args = ["generate", "the cat is", *_pair(tiny), "-n", "30", "--temp", "0.9", "-s", seed]
        r = runner.invoke(main, [*args, "--compare"])
        assert r.exit_code == 0, r.output
        assert "output identical" in r.stderr
        r = runner.invoke(main, [*args, "--json"])
        with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
            kw = dict(max_tokens=30, temperature=0.9, seed=int(seed))
            assert json.loads(r.stdout)["tokens"] == dec.generate("the cat is", acceptance="keyed", **kw).tokens


def test_chat_transcript(runner, tiny):
    """Two turns, /stats, /exit: stdout is exactly the two replies; the cache is reused."""
    gen = dict(max_tokens=16, temperature=0.0, top_k=40, top_p=0.95, min_p=0.05, seed=None)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        session = ChatSession(dec)
        replies = ["".join(c.text for c in session.send(q, **gen)) for q in ("hello there", "and the cat")]
        assert session.stats.turns == 2
    r = runner.invoke(main, ["chat", *_pair(tiny), "-n", "16", "--temp", "0"],
                      input="hello there\n/stats\nand the cat\n/exit\n")
    assert r.exit_code == 0, r.output
    assert r.stdout == replies[0] + "\n" + replies[1] + "\n"
    assert "/exit" in r.stderr  # it says how to leave
    assert "1 replies" in r.stderr  # /stats after the first turn


@pytest.mark.parametrize("typed, message", [
    ("one line\n", "one line"),
    ("two \\\nlines\n", "two \nlines"),  # a trailing backslash continues the message
    ('"""\nfirst\n  second\n"""\n', "\nfirst\n  second\n"),  # a block, pasted
    ('"""inline"""\n', "inline"),
    ('"""\nunterminated\n', "\nunterminated\nnext"),  # runs to the end of input
    ("", None),
])
def test_chat_input_reads_messages_of_several_lines(monkeypatch, typed, message):
    monkeypatch.setattr("sys.stdin", io.StringIO(typed + "next\n"))
    reader = ChatInput()
    assert not reader.interactive
    assert reader.read() == (message if typed else "next")


def test_chat_multiline_message_is_one_turn(runner, tiny):
    """A block and a continued line are one message each: the replies are those to the joined
    text, and /stats counts two turns."""
    gen = dict(max_tokens=12, temperature=0.0, top_k=40, top_p=0.95, min_p=0.05, seed=None)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        session = ChatSession(dec)
        replies = ["".join(c.text for c in session.send(q, **gen)) for q in ("the cat\n/is on", "the \nhot word")]
    r = runner.invoke(main, ["chat", *_pair(tiny), "-n", "12", "--temp", "0"],
                      input='"""\nthe cat\n/is on\n"""\nthe \\\nhot word\n/stats\n/exit\n')
    assert r.exit_code == 0, r.output
    assert r.stdout == replies[0] + "\n" + replies[1] + "\n"
    assert "2 replies" in r.stderr and "unknown command" not in r.stderr


def test_chat_on_a_terminal_edits_lines(tiny, tmp_path):
    """On a terminal the chat reads through readline: arrow keys move the cursor instead of
    landing in the message (typed: "/stts", left twice, "a" -> "/stats"), Ctrl-C discards a
    half-typed line, and a paste of several lines (bracketed by the terminal) is one message."""
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm", PYTHONPATH=str(Path(specllama.__file__).parent.parent))
    p = subprocess.Popen([sys.executable, "-m", "specllama", "chat", *_pair(tiny), "-n", "4", "--temp", "0"],
                         stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    os.close(slave)
    screen = b""

    def read_until(marker: bytes, start: int = 0) -> None:
        nonlocal screen
        while marker not in screen[start:]:
            ready, _, _ = select.select([master], [], [], 60)
            assert ready, f"no {marker!r} on the terminal: {screen!r}"
            screen += os.read(master, 4096)

    try:
        read_until(b">>> ")  # the prompt goes to the terminal with the input
        assert b"\x1b[?2004h" in screen  # it asks the terminal to bracket pastes
        start = len(screen)
        os.write(master, b"/stts\x1b[D\x1b[Da\r")
        read_until(b">>> ", start)  # the next prompt: the line was taken
        start = len(screen)
        os.write(master, b"/res")  # half typed, then Ctrl-C: discarded
        read_until(b"/res", start)
        start = len(screen)
        wait_until_waiting_for_input(p.pid)
        p.send_signal(signal.SIGINT)
        read_until(b">>> ", start)
        os.write(master, b"/stats\r")
        start = len(screen)
        read_until(b">>> ", start)
        start = len(screen)
        os.write(master, b"\x1b[200~the cat\nis on\x1b[201~\r")  # a paste of two lines, so bracketed
        read_until(b">>> ", start)
        os.write(master, b"/stats\r")
        start = len(screen)
        read_until(b">>> ", start)
        os.write(master, b"/exit\r")
        err = p.communicate(timeout=60)[1].decode()
        assert p.returncode == 0, err
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        os.close(master)
    assert err.count("no replies yet") == 2 and "input discarded" in err and "unknown command" not in err, err
    assert "1 replies" in err, err  # the paste was one message


def test_chat_end_of_input_and_reset(runner, tiny):
    r = runner.invoke(main, ["chat", *_pair(tiny), "-n", "4", "--temp", "0"], input="hi\n/reset\n/nope\n")
    assert r.exit_code == 0, r.output
    assert "conversation cleared" in r.stderr and "unknown command /nope" in r.stderr


def test_chat_context_full_offers_to_start_over(runner, tiny):
    r = runner.invoke(main, ["chat", *_pair(tiny)[:4], "-c", "256", "-n", "8", "--temp", "0"],
                      input=("the cat " * 200) + "\ny\nhi\n/exit\n")
    assert r.exit_code == 0, r.output
    assert "context is full" in r.stderr and "conversation cleared" in r.stderr


def test_bench_writes_json_and_png(runner, tiny, tmp_path):
    out = tmp_path / "bench"
    r = runner.invoke(main, ["bench", *_pair(tiny), "-n", "8", "--sweep-n-draft", "1-2", "--prompts", "code,list",
                             "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    for key in ("speedup", "plain_tokens_per_second", "speculative_tokens_per_second", "acceptance_rate"):
        assert isinstance(rep[key], float)
    assert [(e["mode"], e["n_draft"]) for e in rep["sweep"]] == [("fixed", 1), ("fixed", 2), ("adaptive", 10)]
    assert rep["speedup"] == rep["adaptive_speedup"] and rep["best_n_draft"] in (1, 2)
    assert rep["drafter"] == "model+lookup"  # what the default, auto, runs with a draft model
    assert json.loads((out / "report.json").read_text())["speedup"] == rep["speedup"]
    assert (out / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("drafter", ["model", "lookup"])
def test_bench_measures_the_drafter_asked_for(runner, tiny, tmp_path, drafter):
    r = runner.invoke(main, ["bench", *_pair(tiny), "-n", "40", "--prompts", "code", "--drafter", drafter,
                             "--fixed-draft", "--n-draft", "3", "-o", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["drafter"] == drafter
    models = rep["provenance"]["models"]
    assert models["target"]["file"] == Path(tiny.target_q).name and len(models["target"]["sha256"]) == 64
    assert "draft" not in models if drafter == "lookup" else models["draft"]["file"] == Path(tiny.draft_q).name
    assert rep["provenance"]["specllama"] == specllama.__version__ and rep["provenance"]["llama_cpp_python"]
    assert tiny.dir.name not in json.dumps(rep)  # no path of this machine
    [s] = [run["stats"] for run in rep["runs"] if run["mode"] == "fixed"]
    assert s["n_drafted"] > 0
    assert s["n_lookup_drafted"] == (s["n_drafted"] if drafter == "lookup" else 0)


def test_bench_rounds_sample_with_their_own_seeds(runner, tiny, tmp_path):
    """When sampling, each round of a configuration draws another sample (seed + round), so that
    a median is over samples, not over one sample's timing; every configuration of a round shares
    its seed."""
    r = runner.invoke(main, ["bench", *_pair(tiny), "-n", "24", "--temp", "1", "--seed", "7", "--prompts", "code",
                             "--sweep-n-draft", "2", "--repeats", "3", "-o", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    runs = json.loads(r.stdout)["all_runs"]
    for mode in ("plain", "fixed", "adaptive"):
        assert [run["seed"] for run in runs if run["mode"] == mode] == [7, 8, 9]


def test_bench_needs_a_draft(runner, tiny):
    r = runner.invoke(main, ["bench", "-m", tiny.target, "--no-draft"])
    assert r.exit_code == 2 and "drop --no-draft" in r.stderr


def test_draft_makes_a_loadable_gguf(runner, tiny, tmp_path):
    out = tmp_path / "d.gguf"
    r = runner.invoke(main, ["draft", tiny.target, "--type", "q8_0", "-o", str(out)])
    assert r.exit_code == 0, r.output
    m = specllama.Model(str(out))
    assert specllama.vocab_difference(specllama.Model(tiny.target), m) == ""  # the target's own vocabulary


def test_draft_sweep(runner, tiny, tmp_path):
    r = runner.invoke(main, ["draft", tiny.target, "--sweep", "--types", "q8_0,q4_0", "-n", "8", "-o",
                             str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert [d["type"] for d in rep["drafts"]] == ["q8_0", "q4_0"]
    assert rep["recommended"]["type"] in ("q8_0", "q4_0")
    assert all(0 <= d["acceptance_rate"] <= 1 and d["cost_ratio"] > 0 and d["measured_speedup"] > 0
               for d in rep["drafts"])


def test_draft_sweep_measures_candidates_of_any_vocabulary(runner, tiny, tmp_path):
    """--candidate drafts already on disk, one of the target's vocabulary and one of another, are
    measured beside a quantized type and ranked; the table names each one's vocabulary."""
    args = ["draft", tiny.target, "--sweep", "--types", "q8_0", "--candidate", tiny.draft_q, "--candidate",
            tiny.bigger_vocab, "-n", "8", "-o", str(tmp_path)]
    r = runner.invoke(main, args + ["--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert [(d["name"], d["vocab"]) for d in rep["drafts"]] == [
        ("q8_0", "same"), ("draft_q4_1.gguf", "same"), ("bigger_vocab.gguf", "intersection")]
    assert rep["drafts"][2]["vocab_target_share"] > 0.9 and rep["drafts"][2]["path"] == tiny.bigger_vocab
    assert rep["fastest_measured"]["name"] in [d["name"] for d in rep["drafts"]]
    r = runner.invoke(main, ["draft", tiny.target, "--sweep", "--types", "", "--candidate", tiny.bigger_vocab,
                             "-n", "8"])
    assert r.exit_code == 0, r.output
    assert "bigger_vocab.gguf" in r.stdout and "other (" in r.stdout and "fastest measured" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["generate", "hi", "-m", "/nonexistent/x.gguf"], "model file not found: /nonexistent/x.gguf"),
    (["generate", "hi", "-m", "{not_gguf}"], "not a GGUF file"),
    (["generate", "hi", "-m", "{target}", "-d", "{other}"], "with the target"),
])
def test_errors_are_one_line(runner, tiny, tmp_path, args, message):
    bad = tmp_path / "bad.gguf"
    bad.write_text("hello")
    args = [a.format(not_gguf=bad, target=tiny.target, other=tiny.alien_vocab, out=tmp_path) for a in args]
    r = runner.invoke(main, args)
    assert r.exit_code == 1
    assert r.stderr.strip().count("\n") == 0 and message in r.stderr
    assert "Traceback" not in r.output


@pytest.mark.parametrize("args, option", [
    (["generate", "hi", "--top-p", "1.5"], "--top-p"),
    (["generate", "hi", "--n-draft", "0"], "--n-draft"),
    (["generate", "hi", "--temp", "-1"], "--temp"),
    (["draft", "{target}", "--type", "q9_9"], "--type"),
    (["draft", "{target}", "--sweep", "--types", "q8_0,q9_9"], "unknown quantization type(s) q9_9"),
    (["bench", "--sweep-n-draft", "0-3"], "n_draft values"),
    (["draft", "{target}", "--vocab-top", "100"], "--vocab-top"),  # (an SPM vocabulary has no merges to cut)
    (["draft", "{target}", "--vocab-top", "100", "--sweep"], "--sweep"),
])
def test_bad_parameter_is_a_usage_error(runner, tiny, args, option):
    r = runner.invoke(main, [a.format(target=tiny.target) for a in args] + ["-m", tiny.target][: 2 * (args[0] != "draft")])
    assert r.exit_code == 2 and option in r.stderr


def test_simulate(runner, tmp_path):
    r = runner.invoke(main, ["simulate", "--target-ms", "20", "--draft-ms", "5", "--accept", "0.8", "-n", "64",
                             "--sp", "3", "--repeats", "5"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[1].split()[0] == "non-SI" and lines[2].split()[0] == "SI" and lines[3].split()[0] == "DSI"
    ms = {line.split()[0]: float(line.split()[1]) for line in lines[1:4]}
    assert ms["non-SI"] == 64 * 20 and ms["DSI"] <= ms["SI"] <= ms["non-SI"]


def test_generate_dsi_mode(runner, tiny):
    plain = runner.invoke(main, ["generate", "the cat is", *_pair(tiny), "-n", "24", "--temp", "0", "--no-draft"])
    r = runner.invoke(main, ["generate", "the cat is", *_pair(tiny), "-n", "24", "--temp", "0", "--mode", "dsi",
                             "--sp", "2", "--lookahead", "3", "--compare"])
    assert r.exit_code == 0, r.output
    assert r.stdout == plain.stdout
    assert "DSI with 2 target server(s), lookahead 3" in r.stderr and "verification tasks" in r.stderr
    assert "output identical" in r.stderr
    j = runner.invoke(main, ["generate", "the cat is", *_pair(tiny), "-n", "8", "--temp", "0", "--mode", "dsi",
                             "--json"])
    assert j.exit_code == 0, j.output
    d = json.loads(j.stdout)["dsi"]
    assert d["sp"] == 1 and d["lookahead"] == 4 and d["n_checked"] + d["n_target_only"] == 8
    bad = runner.invoke(main, ["generate", "hi", *_pair(tiny), "--mode", "dsi", "--drafter", "lookup"])
    assert bad.exit_code == 2 and "mode 'dsi' drafts with the draft model" in bad.stderr


def test_dsi_line_says_what_the_draft_read_in_its_thread(slow):
    """The draft decodes the prompt in its thread (this pair's draft cannot copy the target's keys and
    values): the stats line says how many tokens it read, and nothing where it read none."""
    kw = dict(max_tokens=8, temperature=0, ignore_eos=True, mode="dsi", wait_for_drafts=True)
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=256) as dec:
        prompt = dec.tokenize("the cat is on the hot word and they were all there")
        read = dec.generate(prompt, **kw).dsi
        again = dec.generate(prompt, **kw).dsi  # (its cache holds the prompt)
    assert read.n_draft_prompt == len(prompt) - 1 and again.n_draft_prompt == 0
    assert f"the draft read {len(prompt) - 1} prompt tokens in its thread" in _dsi_line(read)
    assert "prompt tokens" not in _dsi_line(again)


def test_chat_dsi_mode(runner, tiny):
    r = runner.invoke(main, ["chat", *_pair(tiny), "-n", "8", "--temp", "0", "--mode", "dsi", "--sp", "2"],
                      input="hello there\n/exit\n")
    assert r.exit_code == 0, r.output
    assert "DSI with 2 target server(s)" in r.stderr and r.stdout.strip()


def test_bench_dsi(runner, tiny, tmp_path):
    r = runner.invoke(main, ["bench", *_pair(tiny), "-n", "8", "--prompts", "code", "--mode", "dsi", "--sp", "1,2",
                             "--lookahead", "2", "-o", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    dsi = [e for e in rep["sweep"] if e["mode"] == "dsi"]
    assert [(e["sp"], e["n_draft"]) for e in dsi] == [(1, 2), (2, 2)]
    assert all(e["outputs_identical"] == 1 and 0 <= e["verify_hidden_share"] <= 1 for e in dsi)
    assert rep["dsi_speedup"] == max(e["speedup"] for e in dsi)
    table = runner.invoke(main, ["bench", *_pair(tiny), "-n", "8", "--prompts", "code", "--mode", "dsi",
                                 "-o", str(tmp_path)])
    assert table.exit_code == 0 and "DSI sp 1 lookahead 4" in table.stdout and "best DSI" in table.stdout


def test_simulate_online(runner):
    r = runner.invoke(main, ["simulate", "--target-ms", "10", "--draft-ms", "2", "--accept", "0.8", "-n", "30",
                             "--sp", "3", "--repeats", "3", "--online"])
    assert r.exit_code == 0, r.output
    online = {line.split()[0]: float(line.split()[1]) for line in r.stdout.splitlines()
              if line.startswith("  ") and "offline model on the same pattern" in line}
    assert set(online) == {"non-SI", "SI", "DSI"}
    assert online["non-SI"] >= 30 * 10 and online["DSI"] < online["non-SI"]


def test_stats_line_counts_prompt_lookup(runner, tiny):
    quoting = "the cat is on the hot word and they were all there. the cat is on the hot word and"
    r = runner.invoke(main, ["generate", quoting, "-m", tiny.target_q, "-c", "512", "--drafter", "lookup",
                             "--fixed-draft", "-n", "60", "--temp", "0"])
    assert r.exit_code == 0, r.output
    assert re.search(r"acceptance [\d.]+% \(\d+/(\d+)\) \(prompt lookup: \d+/\1\)", r.stderr), r.stderr


@pytest.mark.default_pair
def test_generate_says_when_the_model_ends_at_once_without_its_chat_template(runner, default_pair):
    """The default pair, given raw text, ends its reply before any token (greedy: its first choice
    is the end token); the command says so and points to --chat, which is not needed with it."""
    target, draft = default_pair
    prompt = "Explain speculative decoding in one paragraph."
    r = runner.invoke(main, ["generate", prompt, "-m", target, "-d", draft, "-n", "16", "--temp", "0"])
    assert r.exit_code == 0, r.output
    assert "0 tokens" in r.stderr and "may need --chat" in r.stderr
    r = runner.invoke(main, ["generate", prompt, "-m", target, "-d", draft, "-n", "16", "--temp", "0", "--chat"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() and "may need --chat" not in r.stderr


def test_chat_template_by_name_or_jinja_file(runner, tiny, tmp_path):
    """A built-in template of llama.cpp by name, or a Jinja file rendered in a sandbox (no escape
    to Python's internals), instead of the model's own; anything else is a clear error."""
    with specllama.SpeculativeDecoder(tiny.target, n_ctx=256) as dec:
        msgs = [{"role": "user", "content": "the cat"}]
        assert dec.apply_chat_template(msgs, template="chatml") == "<|im_start|>user\nthe cat<|im_end|>\n<|im_start|>assistant\n"
        jinja = tmp_path / "t.jinja"
        jinja.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                         "{% if add_generation_prompt %}[assistant]{% endif %}")
        assert dec.apply_chat_template(msgs, template=str(jinja)) == "[user] the cat\n[assistant]"
        escape = tmp_path / "escape.jinja"
        escape.write_text("{{ ''.__class__.__mro__[1].__subclasses__() }}")
        with pytest.raises(ValueError, match="the chat template failed"):
            dec.apply_chat_template(msgs, template=str(escape))
        with pytest.raises(ValueError, match="neither a built-in template"):
            dec.apply_chat_template(msgs, template="no-such-template")
    for tmpl in ("chatml", str(jinja)):
        r = runner.invoke(main, ["generate", "the cat", *_pair(tiny), "-n", "2", "--temp", "0", "--chat",
                                 "--chat-template", tmpl])
        assert r.exit_code == 0, r.output


@pytest.mark.skipif(specllama.supports_gpu_offload(), reason="this build offloads: nothing to warn about")
def test_gpu_layers_without_gpu_offload_warn_in_one_line(runner, tiny):
    r = runner.invoke(main, ["generate", "the cat", *_pair(tiny), "-n", "2", "--temp", "0", "-ngl", "-1"])
    assert r.exit_code == 0, r.output
    assert "specllama: warning: n_gpu_layers has no effect" in r.stderr and "RuntimeWarning" not in r.stderr


def test_serve_fits_the_layers_to_every_slots_cache(runner, tiny, monkeypatch):
    """With room on the GPU (its free memory set here) for the models and one cache of -c positions
    each, one slot gets every layer; four slots (four caches each, and the first decoder's) leave
    the target only some, and the warning says so."""
    import specllama.server
    from specllama import _core, placement

    n_ctx = 8192
    t, d = (_core.model_footprint(p) for p in (tiny.target_q, tiny.draft_q))
    free = placement.MARGIN + placement.whole_bytes(d, n_ctx, 512, 5) + placement.whole_bytes(t, n_ctx, 512)
    monkeypatch.setattr(_core, "default_devices", lambda: [("GPU0", free)])
    seen = []
    monkeypatch.setattr(specllama.server, "serve",
                        lambda dec, config, **kw: seen.append((dec.n_gpu_layers, dec.n_gpu_layers_draft)))
    args = ["serve", "-m", tiny.target_q, "-d", tiny.draft_q, "-c", str(n_ctx), "--port", "0"]
    one = runner.invoke(main, args)
    assert one.exit_code == 0, one.output
    assert "warning" not in one.stderr and seen == [(-1, -1)]
    assert "on the GPU: target: every layer, draft: every layer" in one.stderr
    four = runner.invoke(main, [*args, "-np", "4"])
    assert four.exit_code == 0, four.output
    assert seen[1][1] == -1 and 0 <= seen[1][0] < t["n_layer"]
    assert re.search(r"warning: the target needs about .* with 5 caches of 8192 positions", four.stderr)
