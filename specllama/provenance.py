"""What a benchmark report records about where it ran: the software's versions and commit, the
machine, the threads, the command line, and the models by file name and SHA-256 (never by a path
on the machine that made the report)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Dict, Optional


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                        platform.processor())
    except OSError:
        return platform.processor()


def _gpu() -> Optional[str]:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None


def _commit() -> Optional[str]:
    """The git commit of the source tree specllama was installed from, when run inside it."""
    here = Path(__file__).resolve().parent.parent
    try:
        r = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    return r.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def machine_info() -> dict:
    """CPU model, core count, OS and GPU (if nvidia-smi names one)."""
    return {"cpu": _cpu(), "cores": os.cpu_count(), "system": platform.platform(), "gpu": _gpu()}


def provenance(models: Dict[str, Optional[str]], threads: Optional[int] = None) -> dict:
    """The header of a report: versions, commit, machine, threads, command, models."""
    from . import __version__, supports_gpu_offload
    from .models import sha256

    return {
        "specllama": __version__,
        "commit": _commit(),
        "llama_cpp_python": metadata.version("llama-cpp-python"),
        "gpu_offload_build": supports_gpu_offload(),
        "machine": machine_info(),
        "threads": threads or os.cpu_count(),
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "models": {role: {"file": Path(p).name, "sha256": sha256(Path(p))} for role, p in models.items() if p},
    }
