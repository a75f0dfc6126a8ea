"""benchmarks/cold_start.py at a tiny size: every way runs each round, the report carries each
prompt's medians and ratios, and a new decoder's steps are recorded step by step with the
drafts kept in each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_cold_start_bench_reports_every_way(tiny, tmp_path):
    out = tmp_path / "cold.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cold_start.py"), "-m", tiny.target_q,
                        "-d", tiny.draft_q, "--prompts", "chat,code", "-n", "12", "--rounds", "2", "-t", "2",
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(out.read_text())
    assert len(report["rounds"]) == 2 and report["n"] == 12
    ways = {"plain", "fixed 3", "adaptive, warm", "adaptive, new decoder"}
    for name in ("chat", "code"):
        assert set(report["summary"][name]) == ways
        assert report["summary"][name]["plain"]["vs_plain"] == 1.0
        assert all(v["tokens_per_second"] > 0 for v in report["summary"][name].values())
        for rd in report["rounds"]:
            steps, kept = rd["new_decoder_steps"][name]["steps"], rd["new_decoder_steps"][name]["kept"]
            assert steps[0] == "." and len(kept) == len(steps), (steps, kept)  # (the first step is plain)
    assert "new decoder's steps: ." in r.stdout and "new decoder's kept:  ." in r.stdout
