"""The layout shows the architecture: the core (``specot``) imports only downward, never the lab
(``specot_lab``) nor an integration (``specot_vllm``, ``specot_llamacpp``), and hides no import in a
function body; the lab and the integrations import the core."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: Core layers, lowest first: a module may import only from its own layer or a lower one.
LAYERS = [
    {"_validation", "envinfo"},
    {"sampling"},
    {"laws"},
    {"verifiers", "theory"},
    {"models"},
    {"drafting"},
    {"engine"},
    {"plan"},
    {"report"},
    {"measure"},
    {"api"},
    {"cli"},
]
#: The packages beside the core: they import it, it never imports them.
BESIDE = ("specot_lab", "specot_vllm", "specot_llamacpp")
LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _modules(pkg: str) -> list[Path]:
    return sorted((SRC / pkg).rglob("*.py"))


def _imports(path: Path, pkg: str) -> list[tuple[str, int, bool]]:
    """(imported absolute module, line, inside a function) for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(SRC).with_suffix("").parts  # e.g. ("specot", "engine", "loop")
    here = list(rel[:-1]) if rel[-1] != "__init__" else list(rel[:-1])
    out = []

    def visit(node: ast.AST, in_func: bool) -> None:
        for child in ast.iter_child_nodes(node):
            f = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, f) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = here[: len(here) - child.level + 1]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                out.append((mod, child.lineno, f))
            visit(child, f)

    visit(tree, False)
    return out


def _part(mod: str) -> str | None:
    parts = mod.split(".")
    if parts[0] != "specot":
        return None
    return parts[1] if len(parts) > 1 else ""


def test_the_core_never_imports_the_lab_or_an_integration():
    bad = [f"{p.relative_to(SRC)}:{line} imports {mod}" for p in _modules("specot")
           for mod, line, _ in _imports(p, "specot") if mod.split(".")[0] in BESIDE]
    assert not bad, bad


#: The one deliberate exception: the ``specot`` command imports its sub-commands (and with them
#: torch and transformers, about 6 s) inside ``main``'s Ctrl-C handling, so that an interrupt during
#: start-up is reported like any other.
DEFERRED_IMPORTS = {"specot/cli/main.py"}


def test_the_core_has_no_function_local_imports_of_itself():
    bad = [f"{p.relative_to(SRC)}:{line} imports {mod} inside a function" for p in _modules("specot")
           for mod, line, in_func in _imports(p, "specot")
           if in_func and mod.split(".")[0] == "specot" and p.relative_to(SRC).as_posix() not in DEFERRED_IMPORTS]
    assert not bad, bad


def test_core_layers_import_only_downward():
    bad = []
    for p in _modules("specot"):
        src_part = _part(".".join(p.relative_to(SRC).with_suffix("").parts))
        if src_part in ("", "__init__", None) or src_part not in LAYER_OF:
            continue
        for mod, line, _ in _imports(p, "specot"):
            dst = _part(mod)
            if dst in (None, "") or dst not in LAYER_OF:
                continue
            if LAYER_OF[dst] > LAYER_OF[src_part]:
                bad.append(f"{p.relative_to(SRC)}:{line} ({src_part}) imports {mod} ({dst}, a higher layer)")
    assert not bad, bad


def test_no_import_cycles_between_core_packages():
    graph: dict[str, set[str]] = defaultdict(set)
    for p in _modules("specot"):
        src_part = _part(".".join(p.relative_to(SRC).with_suffix("").parts))
        for mod, _, _ in _imports(p, "specot"):
            dst = _part(mod)
            if src_part and dst and dst != src_part:
                graph[src_part].add(dst)
    seen: dict[str, int] = {}

    def dfs(u: str, stack: list[str]) -> None:
        seen[u] = 1
        for v in graph[u]:
            assert seen.get(v) != 1, f"import cycle: {' -> '.join(stack + [u, v])}"
            if v not in seen:
                dfs(v, stack + [u])
        seen[u] = 2

    for u in list(graph):
        if u not in seen:
            dfs(u, [])


def test_the_packages_beside_the_core_use_it():
    for pkg in BESIDE:
        if (SRC / pkg).is_dir():
            mods = {mod for p in _modules(pkg) for mod, _, _ in _imports(p, pkg)}
            assert any(m.startswith("specot.") or m == "specot" for m in mods), pkg
