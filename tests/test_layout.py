"""The source tree keeps the shape that lets a reader find things: the Python package has no
import cycle (an import inside a function counts too), no function in it runs past 80 lines, and
no file of the native core past 700. These read the sources; nothing is imported or built."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specllama"
MAX_FUNCTION_LINES = 80
MAX_NATIVE_FILE_LINES = 700


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> Dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _native_modules() -> Set[str]:
    """The compiled modules, known by their stubs (specllama._core); they import nothing of the package."""
    return {_module_name(p) for p in PACKAGE.rglob("*.pyi")}


def _resolve(module: str, is_package: bool, level: int, name: Optional[str]) -> str:
    """The absolute name of `from <level dots><name> import ...` written in module."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([name] if name else []))


def import_graph() -> Dict[str, Set[str]]:
    """Each module of the package -> the modules of the package it imports, wherever in the file
    (at the top, inside a function, under TYPE_CHECKING)."""
    sources = _modules()
    modules = set(sources) | _native_modules()
    graph: Dict[str, Set[str]] = {m: set() for m in modules}
    for module, path in sources.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(module, is_package, node.level, node.module) if node.level else node.module or ""
                # `from . import x` imports the submodule x where there is one, else a name of the package
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            for target in targets:
                while target and target not in modules:  # `import specllama.server.app` -> that module
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One cycle of graph as a path that ends where it starts, or None."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_import_graph_sees_relative_and_function_level_imports():
    graph = import_graph()
    assert "specllama._core" in graph["specllama.decoder"]  # from . import _core (the compiled module)
    assert "specllama.decoder" in graph["specllama.completions"]  # from .decoder import ... (module level)
    assert "specllama.models" in graph["specllama.decoder"]  # from .models import ... (inside __init__)
    assert "specllama.completions" in graph["specllama.server.generation"]  # from .. import completions


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_openai_layer_depends_on_the_decoder_and_not_the_other_way():
    graph = import_graph()
    assert "specllama.completions" not in graph["specllama.decoder"]
    assert not any(m.startswith("specllama.server") for m in graph["specllama.decoder"])


def test_no_function_in_the_package_is_longer_than_80_lines():
    long = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, long


def test_the_native_core_is_in_folders_by_concern_and_no_file_is_longer_than_700_lines():
    files = [p for p in (ROOT / "cpp").rglob("*") if p.suffix in (".h", ".cpp")]
    assert files and not [p for p in files if p.parent == ROOT / "cpp"], "a file directly in cpp/"
    long = [f"{p.relative_to(ROOT)} ({n} lines)" for p in files
            if (n := len(p.read_text().splitlines())) > MAX_NATIVE_FILE_LINES]
    assert not long, long
