"""benchmarks/text_switch.py at a tiny size: one decoder runs every prompt in turn, plainly and then
speculatively, each round; the report carries each generation's speeds, its ratio, its paused steps
and its step pattern, and the medians of the ratios; sampled runs record their temperature and seed;
an unknown prompt is refused by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = str(ROOT / "benchmarks" / "text_switch.py")


def test_the_text_switch_bench_reports_every_generation(tiny, tmp_path):
    out = tmp_path / "switch.json"
    r = subprocess.run([sys.executable, BENCH, "-m", tiny.target_q, "-d", tiny.draft_q, "--prompts", "chat,code",
                        "-n", "12", "--rounds", "2", "-t", "2", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["prompts"] == ["chat", "code"] and report["n"] == 12 and len(report["rounds"]) == 2
    for rd in report["rounds"]:
        assert list(rd) == ["chat", "code"]
        for row in rd.values():
            assert row["plain"] > 0 and row["speculative"] > 0
            assert row["vs_plain"] == row["speculative"] / row["plain"]
            assert row["steps"] and set(row["steps"]) <= set(".pPL+123456789")
            assert len(row["kept"]) == len(row["steps"]) and set(row["kept"]) <= set(".+0123456789")
            assert 0 <= row["paused_steps"] <= len(row["steps"]) - 1  # (the first step is plain, not paused)
    assert set(report["summary"]) == {"chat", "code"}
    assert "round 2 code" in r.stdout and "speculative over plain, median of rounds: chat" in r.stdout



def test_the_text_switch_bench_samples_at_a_temperature(tiny, tmp_path):
    out = tmp_path / "switch.json"
    r = subprocess.run([sys.executable, BENCH, "-m", tiny.target_q, "-d", tiny.draft_q, "--prompts", "code",
                        "-n", "8", "--rounds", "1", "-t", "2", "--temp", "0.8", "--seed", "5", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["temperature"] == 0.8 and report["seed"] == 5
    assert report["rounds"][0]["code"]["speculative"] > 0


def test_the_text_switch_bench_refuses_an_unknown_prompt(tiny):
    r = subprocess.run([sys.executable, BENCH, "-m", tiny.target_q, "-d", tiny.draft_q, "--prompts", "chat,poem"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "unknown prompts ['poem']" in r.stderr
