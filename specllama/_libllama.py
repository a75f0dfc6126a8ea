"""Make sure this process maps exactly one libllama.

llama-cpp-python's ctypes loader opens ``llama_cpp/lib/libllama.so`` by path. Our extension
needs ``libllama.so.0`` (the library's SONAME). Loading that same file first means the dynamic
linker satisfies our dependency by SONAME with the copy llama_cpp uses (or will use), whichever
of the two is imported first. Without this, importing specllama before llama_cpp would map a
second libllama (``libllama.so.0``, a separate file in the wheel).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys


def preload() -> None:
    if not sys.platform.startswith(("linux", "freebsd")):
        return
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("specllama needs llama-cpp-python==0.3.36 (pip install llama-cpp-python==0.3.36)")
    for location in spec.submodule_search_locations:
        lib = os.path.join(location, "lib", "libllama.so")
        if os.path.exists(lib):
            ctypes.CDLL(lib)
            return
    raise ImportError("llama-cpp-python is installed but its lib/libllama.so is missing")
