"""What a benchmark report records about where it ran: the software's versions and commit, the
machine, the threads, the command line, and the models by file name and SHA-256. A report never
holds a path of the machine that made it: paths on the command line and in a benchmark's settings
are reduced to their file names, and where the report itself is written is left out."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's, else platform.processor())."""
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
    """The git commit of the source tree specllama was installed from, when run inside it, or
    SPECLLAMA_COMMIT where that names it: a copy of the tree on another machine (benchmarks/gpu)
    has no git history of its own, or another's."""
    named = os.environ.get("SPECLLAMA_COMMIT", "").strip()
    if named:
        return named
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
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "system": platform.platform(), "gpu": _gpu()}


# options that say where a benchmark or `specllama bench` writes its report (left out of the report)
OUTPUT_OPTIONS = ("--out", "--out-dir", "--output", "-o")


def _pathlike(value: str) -> bool:
    return os.sep in value and (os.path.isabs(value) or os.path.exists(value))


def portable_command(argv: Sequence[str], output_options: Sequence[str] = OUTPUT_OPTIONS) -> str:
    """A command line as a report records it: the program's name, paths reduced to their file
    names, and the output option (with its value) left out."""
    words: List[str] = [Path(argv[0]).name] if argv else []
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
            continue
        name, eq, _ = arg.partition("=")
        if name in output_options:
            skip = not eq
            continue
        if eq and _pathlike(arg[len(name) + 1:]):
            arg = f"{name}={Path(arg[len(name) + 1:]).name}"
        elif _pathlike(arg):
            arg = Path(arg).name
        words.append(arg)
    return " ".join(words)


def portable_settings(settings: Dict[str, Any], output_keys: Iterable[str] = ("out", "output")) -> Dict[str, Any]:
    """A benchmark's settings (its parsed arguments) as a report records them: without where the
    report is written, and with paths reduced to their file names."""
    skip = set(output_keys)
    return {k: Path(v).name if isinstance(v, str) and _pathlike(v) else v
            for k, v in settings.items() if k not in skip}


# environment variables through which llama.cpp and ggml change what they run (CUDA graphs, kernel
# fusion, concurrent streams, graph reuse, ...): a report records those that were set
_ENV_PREFIXES = ("GGML_", "LLAMA_")
_ENV_SECRETS = ("KEY", "TOKEN", "SECRET", "PASS", "AUTH")  # (LLAMA_API_KEY and the like stay out)


def llama_env() -> Dict[str, str]:
    """The GGML_* and LLAMA_* environment variables set for this process (paths reduced to their
    file names), but none whose name says it holds a credential."""
    return {k: Path(v).name if _pathlike(v) else v for k, v in sorted(os.environ.items())
            if k.startswith(_ENV_PREFIXES) and not any(w in k.upper() for w in _ENV_SECRETS)}


def provenance(models: Dict[str, Optional[str]], threads: Optional[int] = None,
               output_options: Sequence[str] = OUTPUT_OPTIONS) -> dict:
    """The header of a report: versions, commit, machine, threads, command, llama.cpp's environment
    variables, models.
    output_options: the command's options that name where it writes its report."""
    from ._core import supports_gpu_offload
    from ._version import __version__
    from .models import sha256

    return {
        "specllama": __version__,
        "commit": _commit(),
        "llama_cpp_python": metadata.version("llama-cpp-python"),
        "gpu_offload_build": supports_gpu_offload(),
        "machine": machine_info(),
        "threads": threads or os.cpu_count(),
        "command": portable_command(sys.argv, output_options),
        "env": llama_env(),
        "models": {role: {"file": Path(p).name, "sha256": sha256(Path(p))} for role, p in models.items() if p},
    }
