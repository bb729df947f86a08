"""The layout shows the architecture: the core (``specot``) imports only downward, never the lab
(``specot_lab``) nor an integration (``specot_vllm``, ``specot_llamacpp``), and hides no import in a
function body; the lab and the integrations import the core."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: Core layers, lowest first: a module may import only from its own layer or a lower one.
LAYERS = [
    {"_validation", "envinfo", "geometry", "outputs", "cache_entry"},
    {"sampling"},
    {"laws"},
    {"verifiers", "theory"},
    {"models", "calibration"},
    {"drafting"},
    {"engine"},
    {"plan"},
    {"report"},
    {"measure", "audit"},
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


def test_the_integrations_never_import_each_other():
    bad = [f"{p.relative_to(SRC)}:{line} imports {mod}" for pkg in ("specot_vllm", "specot_llamacpp")
           if (SRC / pkg).is_dir() for p in _modules(pkg) for mod, line, _ in _imports(p, pkg)
           if mod.split(".")[0] in ("specot_vllm", "specot_llamacpp") and mod.split(".")[0] != pkg]
    assert not bad, bad


#: An integration's modules run as ``python -m`` (its benchmark, its sampler harness): leaves that
#: the rest of the integration never imports, so the integration holds only its adapter.
INTEGRATION_LEAVES = ("specot_vllm.bench", "specot_vllm.harness")


def _imported_names(path: Path, src: Path = SRC) -> list[tuple[str, int]]:
    """(absolute module or ``module.name``, line) for every import in ``path``, function bodies too."""
    here = list(path.relative_to(src).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else [])) if node.level \
                else (node.module or "")
            out.append((base, node.lineno))
            out.extend((f"{base}.{a.name}", node.lineno) for a in node.names)
    return out


def _leaf_imports(src: Path) -> list[str]:
    """Imports of the lab or of an integration's leaves (:data:`INTEGRATION_LEAVES`) inside the integrations."""
    return [f"{p.relative_to(src)}:{line} imports {mod}" for pkg in ("specot_vllm", "specot_llamacpp")
            if (src / pkg).is_dir() for p in sorted((src / pkg).rglob("*.py"))
            if _module_name(p, src) not in INTEGRATION_LEAVES for mod, line in _imported_names(p, src)
            if mod.split(".")[0] == "specot_lab" or any(mod == m or mod.startswith(m + ".") for m in INTEGRATION_LEAVES)]


def test_an_integration_never_imports_its_benchmarks_or_the_lab():
    assert not _leaf_imports(SRC), _leaf_imports(SRC)
    if (SRC / "specot_vllm").is_dir():
        assert all((SRC / (m.replace(".", "/") + ".py")).is_file() for m in INTEGRATION_LEAVES)


def test_the_leaf_check_sees_a_planted_import(tmp_path):
    (tmp_path / "specot_vllm").mkdir()
    (tmp_path / "specot_llamacpp").mkdir()
    (tmp_path / "specot_vllm" / "tree.py").write_text("def f():\n    from . import harness\n", encoding="utf-8")
    (tmp_path / "specot_vllm" / "harness.py").write_text("from .tree import f\n", encoding="utf-8")
    (tmp_path / "specot_llamacpp" / "target.py").write_text("import specot_lab.bench\n", encoding="utf-8")
    assert sorted(_leaf_imports(tmp_path)) == ["specot_llamacpp/target.py:1 imports specot_lab.bench",
                                                "specot_vllm/tree.py:2 imports specot_vllm.harness"]


#: Every package under ``src/``: the core, the lab and the integrations.
PACKAGES = ("specot",) + BESIDE


def _module_name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports(path: Path, modules: set[str], *, in_functions: bool = False, src: Path = SRC) -> set[str]:
    """The modules of ``modules`` that ``path`` imports when it is imported: statements at module
    level (in ``try`` / ``if`` blocks too), not those in a function body (unless ``in_functions``)
    or under ``if TYPE_CHECKING``; ``from pkg import name`` counts as importing ``pkg.name`` where
    that is a module, else ``pkg``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path, src)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def owner(mod: str) -> str | None:
        while mod and mod not in modules:
            mod = mod.rpartition(".")[0]
        return mod or None

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not in_functions:
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                out.update(m for a in child.names if (m := owner(a.name)))
            elif isinstance(child, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - child.level + 1] if child.level else []
                mod = ".".join(base + ([child.module] if child.module else []))
                for a in child.names:
                    m = f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else owner(mod)
                    if m:
                        out.add(m)
            visit(child)

    visit(tree)
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph`` (module -> the modules it imports): one per strongly connected
    component of more than one module, as a closed path ``[a, b, ..., a]`` (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_closed_path(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _closed_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A cycle through the first module of ``component``, within it (breadth-first back to it)."""
    start = min(component)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for u in frontier:
            for w in sorted(graph.get(u, set()) & component):
                if w == start:
                    path = [u]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] if u != start else [start, start]
                if w not in prev:
                    prev[w] = u
                    nxt.append(w)
        frontier = nxt
    return sorted(component)  # pragma: no cover - a component always closes


def _import_cycles(src: Path, packages: tuple[str, ...], *, in_functions: bool) -> tuple[dict[str, set[str]], list[list[str]]]:
    """(the import graph of every module of ``packages`` under ``src``, its cycles); imports in
    function bodies counted when ``in_functions``."""
    paths = [p for pkg in packages if (src / pkg).is_dir() for p in sorted((src / pkg).rglob("*.py"))]
    modules = {_module_name(p, src) for p in paths}
    graph = {_module_name(p, src): _module_level_imports(p, modules, in_functions=in_functions, src=src) for p in paths}
    return graph, _cycles(graph)


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert len(_cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}})) == 2


def test_no_import_cycles_between_modules():
    """No module of ``src/`` imports, at module level, one that imports it back (directly or through
    others). An import inside a function body runs on use, after both modules are loaded: it is not
    part of the graph (the integrations defer their heavy or optional imports so)."""
    paths = [p for pkg in PACKAGES if (SRC / pkg).is_dir() for p in _modules(pkg)]
    modules = {_module_name(p) for p in paths}
    graph = {_module_name(p): _module_level_imports(p, modules) for p in paths}
    assert sum(map(len, graph.values())) > 100  # the graph was read
    for pkg in PACKAGES:  # every package beside the core is in the graph, its modules' imports read
        if (SRC / pkg).is_dir():
            assert any(graph[m] for m in modules if m.partition(".")[0] == pkg), pkg
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_import_cycles_in_any_package_even_through_function_bodies():
    """No module of any package under ``src/`` (the core, the lab, the integrations) imports one that
    imports it back, counting the imports in function bodies: a deferred import is an import all
    the same (an integration defers its engine's imports, never its own modules' order)."""
    graph, cycles = _import_cycles(SRC, PACKAGES, in_functions=True)
    for pkg in PACKAGES:  # every package was read
        if (SRC / pkg).is_dir():
            assert any(graph[m] for m in graph if m.partition(".")[0] == pkg), pkg
    assert "specot.cli.generate" in graph["specot.cli.main"]  # a deferred import was read
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("pkg", PACKAGES)
def test_a_planted_circle_fails_the_check_in_any_package(tmp_path, pkg):
    """The cycle check fails on a circle planted in any package — one whose back edge is an
    import inside a function, which a check of module-level imports alone misses."""
    root = tmp_path / "src" / pkg
    (root / "inner").mkdir(parents=True)
    for name, text in {"__init__.py": "", "inner/__init__.py": "",
                       "a.py": f"from {pkg}.inner import b\n",
                       "inner/b.py": "import os\n\n\ndef late():\n    from .. import a\n    return a, os\n"}.items():
        (root / name).write_text(text, encoding="utf-8")
    _, cycles = _import_cycles(tmp_path / "src", PACKAGES, in_functions=True)
    assert cycles == [[f"{pkg}.a", f"{pkg}.inner.b", f"{pkg}.a"]]
    assert _import_cycles(tmp_path / "src", PACKAGES, in_functions=False)[1] == []  # module level alone: missed


def test_the_vllm_integration_has_no_import_cycle_even_through_deferred_imports():
    """Within ``specot_vllm`` no module imports one that imports it back, counting the imports in
    function bodies too (the integration defers its vLLM imports, not its own modules' order): the
    adapter imports the logic modules, they never import the adapter or each other in a circle."""
    pkg = "specot_vllm"
    if not (SRC / pkg).is_dir():
        return
    paths = [p for p in _modules(pkg) if p.name != "__init__.py"]
    modules = {_module_name(p) for p in paths}
    graph = {_module_name(p): _module_level_imports(p, modules, in_functions=True) for p in paths}
    assert graph[f"{pkg}.adapter"]  # the graph was read
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
    assert not [m for m, deps in graph.items() if f"{pkg}.adapter" in deps and m not in (f"{pkg}.harness", f"{pkg}.cli")]


def _imported_from(tree: ast.AST, owners: tuple[str, ...]) -> set[str]:
    """The names ``tree`` binds to modules under one of ``owners`` (``import vllm.x as name``,
    ``from vllm.x import name``)."""
    foreign: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            foreign.update((a.asname or a.name.split(".")[0]) for a in node.names if a.name.split(".")[0] in owners)
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in owners:
            foreign.update(a.asname or a.name for a in node.names)
    return foreign


def _replaced_attributes(source: str, where: str, owners: tuple[str, ...]) -> list[str]:
    """``name.attr = ...`` and ``setattr(name, ...)`` in ``source`` where ``name`` was imported from
    a module under one of ``owners`` (``import vllm.x as name``, ``from vllm.x import name``)."""
    tree = ast.parse(source)
    foreign = _imported_from(tree, owners)
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for el in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id in foreign:
                    found.append(f"{where}:{node.lineno} {el.value.id}.{el.attr} = ...")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in foreign):
            found.append(f"{where}:{node.lineno} setattr({node.args[0].id}, ...)")
    return found


def test_the_replaced_attribute_finder_finds_them():
    source = "import vllm.a as m\nfrom vllm.b import C\nimport os\nm.f = 1\nC.g, x = 2, 3\nsetattr(C, 'h', 4)\nos.sep = '/'\n"
    assert len(_replaced_attributes(source, "probe.py", ("vllm",))) == 3


def test_only_the_vllm_adapter_replaces_vllm_code():
    """Every replacement of vLLM's (and the standard library's) code in ``specot_vllm`` is in
    ``specot_vllm/adapter.py``, where each names the upstream extension point that would remove it."""
    pkg = SRC / "specot_vllm"
    if not pkg.is_dir():
        return
    bad = [hit for p in _modules("specot_vllm") if p.name != "adapter.py"
           for hit in _replaced_attributes(p.read_text(encoding="utf-8"), str(p.relative_to(SRC)),
                                           ("vllm", "importlib", "torch"))]
    assert not bad, bad
    adapter = (pkg / "adapter.py").read_text(encoding="utf-8").splitlines()
    replaced = [i for i, line in enumerate(adapter) if "_replace(" in line and not line.lstrip().startswith("def ")]
    assert replaced and all(adapter[i - 1].lstrip().startswith("# Removed by:") for i in replaced), replaced


#: Size limits: a function longer than this many lines, or a module longer than that, is split.
MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 800


def test_no_function_or_module_is_over_its_size_limit():
    too_long = []
    for pkg in PACKAGES:
        for p in _modules(pkg) if (SRC / pkg).is_dir() else []:
            text = p.read_text(encoding="utf-8")
            where = p.relative_to(SRC)
            if len(text.splitlines()) > MAX_MODULE_LINES:
                too_long.append(f"{where}: {len(text.splitlines())} lines (module limit {MAX_MODULE_LINES})")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                    n = node.end_lineno - first + 1
                    if n > MAX_FUNCTION_LINES:
                        too_long.append(f"{where}:{node.lineno} {node.name}: {n} lines (limit {MAX_FUNCTION_LINES})")
    assert not too_long, too_long


def _vllm_reads(source: str, where: str, owners: tuple[str, ...] = ("vllm",)) -> list[str]:
    """Reads of vLLM objects' attributes in ``source``:

    * ``name.attr`` where ``name`` was imported from a module under ``owners`` — but not an
      ALL_CAPS constant (an enum member of an interface, e.g. ``AttentionType.DECODER``) nor a
      dunder (``vllm.__version__``): those are vLLM's API, not its internals;
    * ``arg.attr`` and ``getattr(arg, ...)`` in a method of a class derived from such a name, where
      ``arg`` is one of the method's arguments (not ``self`` / ``cls``) without a type or typed
      ``Any``: vLLM calls the method with its own records (``CommonAttentionMetadata``, a KV-cache
      spec); an argument typed otherwise (``Tensor``, specot's own classes) is not one."""
    tree = ast.parse(source)
    foreign = _imported_from(tree, owners)

    def api(attr: str) -> bool:
        return attr.isupper() or (attr.startswith("__") and attr.endswith("__"))

    found = [f"{where}:{n.lineno} {n.value.id}.{n.attr}" for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name)
             and n.value.id in foreign and not api(n.attr)]
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        bases = [b.value if isinstance(b, ast.Subscript) else b for b in cls.bases]
        if not any(isinstance(b, ast.Name) and b.id in foreign for b in bases):
            continue
        for fn in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
            theirs = {a.arg for a in args if a.arg not in ("self", "cls")
                      and (a.annotation is None or ast.unparse(a.annotation) in ("Any", "typing.Any"))}
            for n in ast.walk(fn):
                if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name)
                        and n.value.id in theirs):
                    found.append(f"{where}:{n.lineno} {cls.name}.{fn.name}: {n.value.id}.{n.attr}")
                elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr"
                      and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id in theirs):
                    found.append(f"{where}:{n.lineno} {cls.name}.{fn.name}: getattr({n.args[0].id}, ...)")
    return found


def _vllm_reads_outside_the_adapter(root: Path) -> list[str]:
    """:func:`_vllm_reads` of every module of the package at ``root`` but its ``adapter.py``."""
    return [hit for p in sorted(root.rglob("*.py")) if p.name != "adapter.py"
            for hit in _vllm_reads(p.read_text(encoding="utf-8"), str(p.relative_to(root.parent)))]


def test_the_vllm_read_finder_finds_planted_reads(tmp_path):
    pkg = tmp_path / "plugin"
    pkg.mkdir()
    (pkg / "adapter.py").write_text("from vllm.x import Runner\nRunner.requests\n")  # the adapter may
    (pkg / "clean.py").write_text(
        "from typing import Any\nfrom torch import Tensor\n"
        "from vllm.v1.attention.backend import AttentionType, Builder\n"
        "import vllm\nKIND, VERSION = AttentionType.DECODER, vllm.__version__\n"
        "class B(Builder[int]):\n"
        "    def build(self, n: int, cm: Any, x: Tensor, own: 'Plan'):\n"
        "        return self.reader.batch(cm), x.shape, own.rows\n")
    assert _vllm_reads_outside_the_adapter(pkg) == []
    (pkg / "planted.py").write_text(
        "from typing import Any\nfrom vllm.v1.sample.metadata import SamplingMetadata as SM\n"
        "from vllm.v1.attention.backend import AttentionMetadataBuilder\n"
        "def f():\n    return SM.temperature\n"  # a read of an imported vLLM name
        "class B(AttentionMetadataBuilder[int]):\n"
        "    def build(self, common_prefix_len: int, cm: Any, spec=None):\n"
        "        return cm.seq_lens, getattr(spec, 'block_size')\n")  # reads of vLLM's records
    hits = _vllm_reads_outside_the_adapter(pkg)
    assert [h.split(" ", 1)[1] for h in hits] == ["SM.temperature", "B.build: cm.seq_lens",
                                                  "B.build: getattr(spec, ...)"], hits


def test_only_the_vllm_adapter_reads_vllm_internals():
    """Outside ``specot_vllm/adapter.py`` no module reads an attribute of a vLLM object: the adapter
    hands the rest of the integration specot's own records (``RunnerView``, ``BatchSampling``,
    ``AttentionReader``), so a vLLM release that renames a field breaks one module."""
    pkg = SRC / "specot_vllm"
    if not pkg.is_dir():
        return
    bad = _vllm_reads_outside_the_adapter(pkg)
    assert not bad, bad
