"""benchmarks/cold_start.py at a tiny size: every way runs each round (a new decoder whose first
steps meet a busy spell too, and one that resumes an adaptive memory), the report carries each
prompt's medians and ratios, and the new decoders' steps are recorded step by step with the drafts
kept in each, beside their prompts' times."""

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
                        "--busy", "1", "--busy-steps", "3", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(out.read_text())
    assert len(report["rounds"]) == 2 and report["n"] == 12 and report["busy"] == 1 and report["busy_steps"] == 3
    new_ways = {"adaptive, new decoder", "adaptive, new decoder, 1 busy", "adaptive, resumed"}
    for name in ("chat", "code"):
        assert set(report["summary"][name]) == {"plain", "fixed 3", "adaptive, warm"} | new_ways
        assert report["summary"][name]["plain"]["vs_plain"] == 1.0
        assert all(v["tokens_per_second"] > 0 for v in report["summary"][name].values())
        for rd in report["rounds"]:
            assert set(rd["new_decoder_steps"][name]) == set(rd["new_decoder_prompt_ms"][name]) == new_ways
            for way in new_ways:
                steps, kept = rd["new_decoder_steps"][name][way]["steps"], rd["new_decoder_steps"][name][way]["kept"]
                # (the first step is plain: p where the model is paused, as a resumed memory may have it)
                assert steps[0] in ".p" and len(kept) == len(steps), (steps, kept)
                assert steps[0] == "." or way == "adaptive, resumed"
                assert rd["new_decoder_prompt_ms"][name][way] > 0
    assert "  adaptive, new decoder, 1 busy: prompt " in r.stdout
    assert "    steps: ." in r.stdout and "    kept:  ." in r.stdout
