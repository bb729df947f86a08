"""One name per quantity in the public signatures of every package: the draft length γ is ``gamma``
(``max_gamma`` is the cap of an adaptive γ, another quantity), the number of drafts at the root is
``n`` and the branching of a tree node ``children``. ``drafts`` names draft tokens (a tensor, a list,
a tree's children map), never a count; ``depth`` / ``depths`` stay the depth of a node or of a drawn
tree.

Public: functions, methods (and ``__init__``) and class fields (annotated class attributes: the
fields of a dataclass, a NamedTuple, a TypedDict) whose names and enclosing classes do not start
with ``_``, in modules whose path has no part starting with ``_`` (``__init__.py`` included). Read
with ``ast`` from ``src/``, nothing imported.

``num_speculative_tokens`` is vLLM's own name for γ (its ``SpeculativeConfig``): allowed inside
``specot_vllm``, where it mirrors vLLM, and nowhere else."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGES = ("specot", "specot_llamacpp", "specot_vllm", "specot_lab")

#: Other names for the draft length γ (use ``gamma``).
GAMMA_SYNONYMS = frozenset({"max_depth", "L", "draft_length", "num_speculative_tokens", "gamma_len", "spec_len"})
#: Other names for the number of drafts n / the children per node (use ``n`` / ``children``).
WIDTH_SYNONYMS = frozenset({"K", "drafts_per_node", "num_drafts", "n_drafts", "num_children", "branching"})
#: A name that is only a synonym when it annotates a count: ``drafts: int`` (use ``n``).
COUNT_ONLY = frozenset({"drafts"})
#: (package, name) pairs a package may keep: vLLM's own spelling of γ inside the vLLM plugin.
ALLOWED = frozenset({("specot_vllm", "num_speculative_tokens")})


def _is_int(annotation: ast.expr | None) -> bool:
    """True for ``int``, ``int | None``, ``Optional[int]`` (written as such)."""
    if annotation is None:
        return False
    text = ast.unparse(annotation).replace(" ", "")
    return text in {"int", "int|None", "None|int", "Optional[int]", "typing.Optional[int]"}


def _public_names(tree: ast.Module) -> Iterator[tuple[str, int, str, ast.expr | None]]:
    """``(name, line, where, annotation)`` of every parameter and class field of a public signature."""

    def visit(node: ast.AST, owner: str) -> Iterator[tuple[str, int, str, ast.expr | None]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if child.name.startswith("_") and child.name != "__init__":
                    continue
                a = child.args
                for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                    yield arg.arg, arg.lineno, f"{owner}{child.name}()", arg.annotation
            elif isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
                for st in child.body:
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                        yield st.target.id, st.lineno, f"{owner}{child.name}", st.annotation
                yield from visit(child, f"{owner}{child.name}.")

    yield from visit(tree, "")


def _public_modules(src: Path, package: str) -> list[Path]:
    return [p for p in sorted((src / package).rglob("*.py"))
            if not any(part.startswith("_") and part != "__init__.py" for part in p.relative_to(src).parts)]


def offenders(src: Path = SRC, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """``"file:line where: name"`` for every public parameter or field named by a synonym."""
    out = []
    for package in packages:
        for path in _public_modules(src, package):
            for name, line, where, ann in _public_names(ast.parse(path.read_text(encoding="utf-8"))):
                banned = name in GAMMA_SYNONYMS or name in WIDTH_SYNONYMS or (name in COUNT_ONLY and _is_int(ann))
                if banned and (package, name) not in ALLOWED:
                    out.append(f"{path.relative_to(src)}:{line} {where}: {name}")
    return out


def test_public_signatures_use_one_name_per_quantity():
    found = offenders()
    assert not found, ("public signatures name γ `gamma`, the drafts at the root `n` and the branching "
                       "per node `children`; rename:\n" + "\n".join(found))


#: Signatures where γ or n used to go by another name (``depth``, ``max_depth``, ``drafts``, ``K``,
#: ``L``): ``(file, qualified name, names it must have)``. ``depth`` cannot be banned outright (a
#: node's depth is another quantity), so these pin the draft length where it is a parameter.
ANCHORS = [
    ("specot/drafting/base.py", "Drafter.propose", {"gamma"}),
    ("specot/drafting/base.py", "Drafter.depth_limit", {"gamma"}),
    ("specot/drafting/model.py", "draft_chain", {"gamma"}),
    ("specot/drafting/model.py", "draft_tree_from_model", {"gamma"}),
    ("specot/drafting/tree.py", "TreeBudget", {"children", "gamma"}),
    ("specot/drafting/eagle/static_tree.py", "StaticTreeDraft.__init__", {"gamma", "children"}),
    ("specot/drafting/eagle/sampled.py", "draft_sampled", {"gamma"}),
    ("specot/drafting/eagle/reranked.py", "draft_reranked", {"gamma"}),
    ("specot/api.py", "generate", {"n", "gamma"}),
    ("specot/plan/plan.py", "make_plan", {"n", "gamma"}),
    ("specot/plan/auto.py", "auto_choice", {"n", "gamma"}),
    ("specot/plan/step_work.py", "measure_suffix_step_work", {"gamma"}),
    ("specot_lab/bench/paths.py", "draw_paths", {"n", "gamma"}),
    ("specot_lab/bench/pair.py", "draw_context", {"n", "gamma"}),
    ("specot_lab/bench/speedup.py", "Method", {"n", "gamma"}),
]


def _signature_names(path: Path, qualname: str) -> set[str]:
    """The parameter names of a function / method, or the field names of a class, at ``qualname``."""
    node: ast.AST = ast.parse(path.read_text(encoding="utf-8"))
    for part in qualname.split("."):
        node = next(c for c in ast.iter_child_nodes(node)
                    if isinstance(c, (ast.FunctionDef, ast.ClassDef)) and c.name == part)
    if isinstance(node, ast.ClassDef):
        return {st.target.id for st in node.body if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)}
    a = node.args
    return {arg.arg for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs)}


def test_the_draft_length_and_the_number_of_drafts_keep_their_names():
    missing = [f"{path}: {qualname} lacks {sorted(want - _signature_names(SRC / path, qualname))}"
               for path, qualname, want in ANCHORS if not want <= _signature_names(SRC / path, qualname)]
    assert not missing, "\n".join(missing)


def test_the_check_finds_a_planted_synonym(tmp_path):
    pkg = tmp_path / "specot" / "drafting"
    pkg.mkdir(parents=True)
    (pkg / "planted.py").write_text(
        "from dataclasses import dataclass\n"
        "def propose(context, max_depth, sampling, *, drafts: int | None = None):\n"
        "    pass\n"
        "def verify(p, q, drafts):\n"  # draft tokens: allowed
        "    pass\n"
        "def _private(L, K):\n"  # private: not checked
        "    pass\n"
        "@dataclass(frozen=True)\n"
        "class Method:\n"
        "    K: int\n"
        "    gamma: int\n"
        "    def run(self, num_speculative_tokens: int):\n"
        "        pass\n", encoding="utf-8")
    (pkg / "_hidden.py").write_text("def f(max_depth):\n    pass\n", encoding="utf-8")
    vllm = tmp_path / "specot_vllm"
    vllm.mkdir()
    (vllm / "config.py").write_text("def speculative_config(num_speculative_tokens: int):\n    pass\n",
                                    encoding="utf-8")
    found = offenders(tmp_path, ("specot", "specot_vllm"))
    assert found == [
        "specot/drafting/planted.py:2 propose(): max_depth",
        "specot/drafting/planted.py:2 propose(): drafts",
        "specot/drafting/planted.py:10 Method: K",
        "specot/drafting/planted.py:12 Method.run(): num_speculative_tokens",
    ], found
