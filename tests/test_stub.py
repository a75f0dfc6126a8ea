"""specllama/_core.pyi, the typed stub of the native module, is what pybind11-stubgen makes of
the extension as built: regenerate it with
`pybind11-stubgen specllama._core -o STUBDIR && cp STUBDIR/specllama/_core.pyi specllama/`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import specllama


def test_stub_matches_the_extension(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pybind11_stubgen", "specllama._core", "-o", str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    made = (tmp_path / "specllama" / "_core.pyi").read_text()
    committed = (Path(specllama.__file__).resolve().parent / "_core.pyi").read_text()
    assert made == committed, "specllama/_core.pyi is out of date: regenerate it (see this test's module docstring)"
