"""specot on llama.cpp, measured: ``specot bench llamacpp cost|run`` (also ``python -m specot_lab.bench.llamacpp``).

``cost``: the target's cost curve t(B)/t(1) in three ways of running a pass
(:meth:`specot_llamacpp.LlamaCppTarget.time_passes`: logits on all rows, on the last row, as a
two-branch tree) and, from it, the break-even acceptance of every chain length and the best chain
per acceptance (the speedup model below); JSON on stdout or ``--out``.

``run``: tokens/s on prompt sets (JSONL files of ``{"prompt": ...}`` lines), at each temperature, of

* ``plain``: llama-cpp-python's high-level ``Llama.generate`` on the same GGUF (llama.cpp's own
  decoding and sampling; the baseline);
* ``prompt-lookup``: the same with its ``LlamaPromptLookupDecoding`` draft (``num_pred_tokens``
  10, its default);
* ``specot-ar``: specot's loop on :class:`~specot_llamacpp.LlamaCppTarget` without a draft;
* ``specot-ngram``: n-gram chains of γ (``--gamma``; prompt lookup + the pydoc n-gram table);
* ``specot-suffix``: suffix-decoding trees, ``make_plan("suffix")`` (4 children per node, depth
  ``--suffix-depth``), priced by the target's ``pass_cost``;
* ``specot-suffix-llamacpp``: ``draft="auto"`` on this backend (:data:`specot_llamacpp.auto.AUTO_TABLE`):
  suffix chains after matches of 4+, whose adaptive budget prices a pass of 1 + N tokens by the
  target's calibrated curve (with ``--price-by-run``: by the curve this run measures);
* ``specot-draft``: chains of the distilled draft converted to GGUF (:mod:`specot_llamacpp.draft`);
* ``specot-hf-auto`` (only with ``--with-transformers``): specot's ``auto`` on the transformers backend.
* ``specot:DRAFT`` (any number): specot's plan for the draft name DRAFT as ``specot generate
  --draft DRAFT`` makes it (:func:`specot.plan.make_plan`, per temperature), e.g. ``specot:auto``,
  ``specot:none``, ``specot:xvocab-slem:PATH.gguf`` or ``specot:suffix+xvocab-slem:PATH.gguf``;
  ``;KEY=VALUE`` after it sets a drafter option over the plan's, ``auto``'s table included
  (``specot:auto;suffix_copy_anchor=false``: auto without the copy anchor); ``specot:auto-table``:
  the backend's table alone (``auto`` without the draft models ``specot calibrate --draft`` measured
  to pay); ``specot:auto+DRAFT``: the table with the draft model DRAFT added as ``auto`` adds one
  (:func:`specot.plan.auto.with_draft_model`), at every temperature.

``--target``: the target (default the embedded SmolLM2; a packaged model's name such as
``qwen2.5-coder-1.5b``, or a ``.gguf`` path), loaded once on llama.cpp for every method.

Every method decodes every prompt of a set from a cold cache (prompt included in the time), at
most ``--max-new-tokens`` tokens, stopping at EOS, ``--repeats`` times (T > 0: seeds 0..r−1); the
methods alternate prompt by prompt so drifts of the machine hit them alike. A set's tokens/s is its
tokens over its seconds, end to end; ``decode_tokens_per_s`` leaves out the time to the first
emitted tokens (the prompt's pass) and those tokens — at T > 0 the methods' answers end at
different lengths, and a shorter answer spreads the same prompt pass over fewer tokens; each specot method also records its passes, tree sizes and acceptance, and
the speedup over ``specot-ar`` that the measured cost curve predicts for those passes
(:func:`specot.plan.draft_verdict.predicted_speedup`). ``outside_decode_ms_per_token``: each method's time
outside ``llama_decode`` per token (its loop's own work; the passes' share of machine noise left
out), the measure of how close a loop is to llama-cpp-python's. JSON on stdout or ``--out``;
progress on stderr.

**The speedup model with a cost curve.** specot's model (:mod:`specot.theory.speedup`, Leviathan et
al. 2023 Thm 3.8; SpecTr's block efficiency for trees) charges a target pass the same whatever its
width. On llama.cpp on a CPU a pass over B tokens costs r(B) = t(B)/t(1) one-token passes
(:class:`specot.calibration.PassCostCurve`), so a chain of γ drafts with i.i.d. acceptance α and
draft cost c per draft token (in one-token target passes) gives ``E(α, γ) / (r(1 + γ) + γ·c)``
(:func:`chain_speedup`); a draft tree of N nodes with per-depth acceptance a_1..a_L
``(1 + Σ_d Π_{j≤d} a_j) / (r(1 + N) + L·c)`` (:func:`tree_speedup`); a run, from its iterations,
``Σ n_i / Σ (r(1 + N_i) + c_i)`` (:func:`specot.plan.draft_verdict.predicted_speedup`). The break-even acceptance of a chain is
:func:`specot.calibration.break_even_alpha`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from specot.calibration import PassCostCurve, break_even_alpha
from specot.cli.command import number
from specot.drafting.hybrid import model_drafter
from specot.envinfo import environment_info
from specot.outputs import check_output, dumps, json_has, write_json
from specot.plan import make_plan
from specot.plan.draft_verdict import predicted_speedup
from specot.theory.speedup import block_efficiency, expected_tokens
from specot_llamacpp.loading import load_target
from specot_llamacpp.target import PASS_WAYS, LlamaCppTarget, default_threads

__all__ = ["main", "add_arguments", "run", "METHODS", "fit_linear_cost", "measure_cost_curve", "chain_speedup",
           "tree_speedup", "best_chain", "ChainChoice", "QUIET_CURVE", "auto_drafter"]

METHODS = ("plain", "prompt-lookup", "specot-ar", "specot-ngram", "specot-suffix", "specot-suffix-llamacpp",
           "specot-draft")
COST_CONTEXT = ("Explain in two sentences what a Python generator is, then give a short example that uses yield "
                "to produce the squares of the first ten numbers.")
#: The pass widths B timed by default: every one up to 11 (an even width can cost what the odd one
#: below it costs, which interpolation would miss).
DEFAULT_WIDTHS = tuple(range(1, 12))


# ----------------------------------------------------------------------------- the speedup model
def chain_speedup(alpha: float, gamma: int, curve: PassCostCurve, c: float = 0.0) -> float:
    """Predicted speedup of a γ-chain over autoregressive decoding on a target with cost ``curve``
    (module docstring); ``γ = 0`` gives 1.

    Raises:
        ValueError: α outside [0, 1], γ < 0 or c < 0.
    """
    if gamma < 0 or c < 0:
        raise ValueError(f"gamma must be >= 0 and c >= 0, got {gamma} and {c}")
    if gamma == 0:
        return 1.0
    return float(expected_tokens(alpha, gamma)) / (curve.ratio(1 + gamma) + gamma * c)


def tree_speedup(rates: Sequence[float], n_nodes: int, curve: PassCostCurve, c: float = 0.0) -> float:
    """Predicted speedup of a draft tree of ``n_nodes`` nodes and depth ``len(rates)`` with per-depth
    acceptance ``rates`` and draft cost ``c`` per depth (module docstring); ``curve``: the tree
    way's (:func:`measure_cost_curve`) where measured.

    Raises:
        ValueError: rates outside [0, 1], or fewer nodes than depths.
    """
    if n_nodes < len(rates):
        raise ValueError(f"a tree of depth {len(rates)} has at least {len(rates)} nodes, got {n_nodes}")
    return float(block_efficiency(list(rates))) / (curve.ratio(1 + n_nodes) + len(rates) * c)


@dataclass(frozen=True)
class ChainChoice:
    """The best chain length for an acceptance rate: γ (0 = do not speculate) and its speedup."""

    alpha: float
    gamma: int
    speedup: float


def best_chain(alpha: float, curve: PassCostCurve, c: float = 0.0, max_gamma: int = 10) -> ChainChoice:
    """The γ in ``0..max_gamma`` with the highest :func:`chain_speedup` (first maximiser)."""
    vals = [chain_speedup(alpha, g, curve, c) for g in range(max_gamma + 1)]
    g = int(np.argmax(vals))
    return ChainChoice(float(alpha), g, round(float(vals[g]), 4))



#: A reference curve: t(B) of the embedded SmolLM2 Q4_1 GGUF on llama.cpp, logits on all rows, on a
#: quiet 2-vCPU Zen 4 (avx512_bf16), llama-cpp-python 0.3.36, n_threads = 2;
#: :data:`specot_llamacpp.auto.PASS_COST` is its linear fit (:func:`fit_linear_cost`). Nothing is
#: priced by it where a target was calibrated (:meth:`specot_llamacpp.LlamaCppTarget.pass_cost_curve`):
#: other CPUs differ. Regenerate on a quiet machine with ``specot bench llamacpp cost``.
QUIET_CURVE = PassCostCurve((1, 2, 5, 11), (10.1, 19.0, 31.9, 54.2),
                            source="reference: a quiet 2-vCPU Zen 4, 2 llama.cpp threads")


def auto_drafter(target: LlamaCppTarget, temperature: float = 0.0, curve: PassCostCurve | None = None):
    """The drafter and draft-tree shape of ``draft="auto"`` on ``target`` at ``temperature`` (the plan
    :func:`specot.plan.make_plan` makes), priced by ``curve`` when given (e.g. the ``all`` way of
    :func:`measure_cost_curve`), else as the plan prices it: the target's calibrated curve (:meth:`LlamaCppTarget.pass_cost_curve`), or its
    fallback ``pass_cost``.

    Returns:
        ``(drafter, TreeBudget)`` for :func:`specot.engine.tree_generate`: the suffix drafter and
        its budget (:class:`specot.drafting.TreeBudget`: children per node × depth γ).
    """
    plan = make_plan("auto", target=target, temperature=temperature)
    drafter = plan.draft.load(target)
    if curve is not None:
        drafter.pass_cost = curve
    return drafter, plan.shape


def measure_cost_curve(target: LlamaCppTarget, context: Sequence[int], widths: Sequence[int] = DEFAULT_WIDTHS,
                       repeats: int = 15) -> dict[str, PassCostCurve]:
    """One pass of each width B after ``context`` timed in each way of :data:`PASS_WAYS`
    (:meth:`LlamaCppTarget.time_passes`): ``{way: PassCostCurve}``.

    Raises:
        ValueError: an empty context, a width below 1 or above ``n_batch``, ``repeats < 1``.
    """
    med = target.time_passes(context, widths, repeats)
    return {way: PassCostCurve(tuple(int(w) for w in widths), tuple(round(med[(way, w)], 3) for w in widths),
                               repeats=int(repeats), source=f"specot bench llamacpp: {way} rows, "
                                                             f"{target.n_threads} threads, context {len(context)}")
            for way in PASS_WAYS}


def fit_linear_cost(curve: PassCostCurve) -> tuple[float, float]:
    """``(f, c)`` of ``r(1 + N) ≈ 1 + f + c·N`` (N >= 1), least squares over the curve's widths >= 2
    (logits on all rows): the cost model of :class:`specot.drafting.SuffixDrafter`'s adaptive budget."""
    pts = [(w - 1, r - 1.0) for w, r in zip(curve.widths, curve.ratios) if w >= 2]
    if len(pts) < 2:
        raise ValueError("fitting the cost model needs at least two widths >= 2")
    n, y = np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)
    c, f = np.polyfit(n, y, 1)
    return max(0.0, float(f)), max(0.0, float(c))


def _meta(target: LlamaCppTarget) -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"date": _dt.date.today().isoformat(), "commit": commit, "model": target.name, "gguf": target.path.name,
            "n_threads": target.n_threads, "llama_cpp_python": metadata.version("llama-cpp-python"),
            "environment": environment_info()}


def cmd_cost(args: argparse.Namespace) -> dict[str, Any]:
    target = load_target(args.target, n_threads=args.threads)
    curves = measure_cost_curve(target, target.encode_prompt(COST_CONTEXT), args.widths, args.repeats)
    f, c = fit_linear_cost(curves["all"])
    return {**_meta(target), "kind": "llama.cpp cost curve", "cost_curve": {k: v.to_dict() for k, v in curves.items()},
            "linear_fit": {"f": round(f, 4), "c": round(c, 4)},
            "break_even_alpha": {g: break_even_alpha(g, curves["all"]) for g in range(1, 8)},
            "best_chain": {a: best_chain(a, curves["all"]).__dict__ for a in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)}}


# ----------------------------------------------------------------------------- run
def _read_sets(paths: list[str], n: int) -> dict[str, list[dict]]:
    """``{set name: its first n prompts}``. ``PATH=NAME:KIND,KIND`` keeps the lines of those
    ``"kind"`` values under the name NAME (``repeat.jsonl=edits:edit-rename,edit-annotate``)."""
    sets: dict[str, list[dict]] = {}
    for p in paths:
        file, _, sel = p.partition("=")
        name, _, kinds = sel.partition(":")
        path = Path(file)
        if not path.is_file():
            raise ValueError(f"no prompt file {file!r} (JSONL, one {{\"prompt\": ...}} a line)")
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not rows or any("prompt" not in r for r in rows):
            raise ValueError(f"{file!r} must hold JSON lines with a \"prompt\" key")
        if kinds:
            rows = [r for r in rows if r.get("kind") in kinds.split(",")]
            if not rows:
                raise ValueError(f"{file!r} holds no line of kind {kinds!r}")
        sets[name or path.stem] = rows[:n]
    return sets


def _llama_runner(target: LlamaCppTarget, lookup: bool) -> Callable[[list[int], float, int, int], int]:
    """``run(ids, T, max_new, seed) -> tokens`` with llama-cpp-python's high-level ``Llama``."""
    import llama_cpp

    kw: dict[str, Any] = {}
    if lookup:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        kw["draft_model"] = LlamaPromptLookupDecoding(num_pred_tokens=10)
    llm = llama_cpp.Llama(str(target.path), n_ctx=target.max_context, n_threads=target.n_threads,
                          n_threads_batch=target.n_threads, verbose=False, **kw)
    eos = target.eos_token_ids

    def run(ids: list[int], T: float, max_new: int, seed: int) -> dict:
        t0 = time.perf_counter()
        llm.reset()  # a cold cache, as specot's runs
        llm.set_seed(seed)
        n, first = 0, 0.0
        for tok in llm.generate(ids, temp=T, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            n += 1
            if n == 1:
                first = time.perf_counter() - t0
            if tok in eos or n >= max_new:
                break
        return {"tokens": n, "ttft_s": first, "firsts": 1}  # llama-cpp-python yields one token at a time
    return run


def _specot_runner(target: LlamaCppTarget, method: str, args: argparse.Namespace, curve: PassCostCurve):
    from specot.api import load_drafter
    from specot.engine import speculative_generate, tree_generate
    from specot.plan import make_plan
    from specot.engine.types import GenerationConfig
    from specot.sampling import SamplingConfig

    from specot_llamacpp.draft import load_draft

    drafter, spec = None, None
    if method == "specot-ngram":
        drafter = load_drafter("ngram", target)
    elif method == "specot-suffix":  # specot's default suffix trees (4 children per node), priced by the target
        plan = make_plan("suffix", target=target, gamma=args.suffix_depth)
        drafter, spec = plan.draft.load(target), plan.shape
    elif method == "specot-suffix-llamacpp":
        drafter, spec = auto_drafter(target, 0.0, curve=curve if args.price_by_run else None)
    elif method == "specot-draft":
        drafter = load_draft(target, n_threads=target.n_threads)

    def run(ids: list[int], T: float, max_new: int, seed: int) -> dict:
        cfg = GenerationConfig(max_new_tokens=max_new, gamma=args.gamma, sampling=SamplingConfig(temperature=T),
                               seed=seed)
        t0, first = time.perf_counter(), []

        def on_tokens(batch: list[int]) -> None:
            if not first:  # the first tokens committed: after the prompt's pass
                first.append((time.perf_counter() - t0, len(batch)))
        if spec is not None:
            res = tree_generate(target, drafter, ids, spec, cfg, on_tokens=on_tokens)
        else:
            res = speculative_generate(target, drafter, ids, cfg, on_tokens=on_tokens)
        s = res.stats
        ttft, firsts = first[0] if first else (0.0, 0)
        return {"tokens": len(res.tokens), "ttft_s": ttft, "firsts": firsts,
                "passes": s.target_calls, "drafted": s.drafted, "accepted": s.accepted,
                "tree_sizes": list(s.tree_sizes), "emitted": [a + 1 for a in s.accepted_lengths],
                "draft_time_s": s.draft_time_s}
    return run


def _draft_and_options(text: str) -> tuple[str, dict[str, Any]]:
    """``DRAFT;KEY=VALUE;..`` → (DRAFT, options): values ``true``/``false``, else as ``--verifier-param``'s
    (:func:`specot.cli.command.scalar`)."""
    from specot.cli.command import scalar

    draft, *pairs = text.split(";")
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"{pair!r} in {text!r} is not KEY=VALUE")
        low = raw.strip().lower()
        options[key.strip()] = low == "true" if low in ("true", "false") else scalar(raw.strip())
    return draft, options


def _make_plan(draft: str, options: dict[str, Any], target: Any, T: float) -> Any:
    """The plan of ``draft`` at temperature ``T`` with ``options`` over its own — over ``auto``'s
    table entry too (resolved here, since ``make_plan`` keeps a table's option given at its default)."""
    from specot.plan import get_backend, make_plan
    from specot.plan.auto import auto_choice, with_draft_model

    if draft == "auto-table" or draft.startswith("auto+"):  # the table alone, or with a draft model
        own = get_backend("llamacpp").auto.at(T)
        choice = own if draft == "auto-table" else with_draft_model(own, draft[len("auto+"):])
    elif draft != "auto" or not options:
        return make_plan(draft, target=target, temperature=T, **options)
    else:
        choice = auto_choice(target, temperature=T)
    return make_plan(choice.draft, target=target, temperature=T, n=choice.children, gamma=choice.gamma,
                     **{**choice.draft_options, **options})


def _plan_runner(target: LlamaCppTarget, method: str, temperatures: Sequence[float], warm_ids: list[int]):
    """``run(ids, T, max_new, seed)`` of ``specot:DRAFT``: the plan ``specot generate --draft DRAFT``
    makes for each temperature, made and its drafter loaded before any timed run, and each run once
    on ``warm_ids`` (a draft model's first-use calibration and a suffix drafter's measured step work
    are cached then, as by an earlier ``specot generate``: load and calibration are not decoding)."""
    from specot.engine.types import GenerationConfig
    from specot.plan import run_plan
    from specot.sampling import SamplingConfig

    draft, options = _draft_and_options(method[len(SPECOT_PLAN):])
    made: dict[float, tuple[Any, Any, Any]] = {}
    for T in temperatures:
        plan = _make_plan(draft, options, target, T)
        made[T] = (plan, plan.draft.load(target) if plan.draft is not None else None, plan.verifier.build())
        warm = GenerationConfig(max_new_tokens=8, sampling=SamplingConfig(temperature=T), seed=0)
        run_plan(made[T][0], target, made[T][1], warm_ids, warm, made[T][2])

    def run(ids: list[int], T: float, max_new: int, seed: int) -> dict:
        plan, drafter, ver = made[T]
        cfg = GenerationConfig(max_new_tokens=max_new, sampling=SamplingConfig(temperature=T), seed=seed)
        t0, first = time.perf_counter(), []

        def on_tokens(batch: list[int]) -> None:
            if not first:
                first.append((time.perf_counter() - t0, len(batch)))
        suffix = getattr(drafter, "suffix", None)  # a hybrid's suffix drafter: its lookups are no draft passes
        lookups = getattr(suffix, "calls", 0)
        res = run_plan(plan, target, drafter, ids, cfg, ver, on_tokens=on_tokens)
        s = res.stats
        ttft, firsts = first[0] if first else (0.0, 0)
        pricing = getattr(model_drafter(drafter), "pricing", None)  # a hybrid's: its model drafter's
        d = float(pricing.pricer.draft_cost) if pricing is not None else 0.0
        model_passes = s.draft_calls - (getattr(suffix, "calls", 0) - lookups)
        return {"tokens": len(res.tokens), "ttft_s": ttft, "firsts": firsts, "passes": s.target_calls,
                "drafted": s.drafted, "accepted": s.accepted, "tree_sizes": list(s.tree_sizes),
                "emitted": [a + 1 for a in s.accepted_lengths], "draft_time_s": s.draft_time_s,
                "draft_calls": s.draft_calls, "draft_passes_cost": model_passes * d, "runs": 1,
                "plan": plan.describe() if hasattr(plan, "describe") else draft}
    return run


def _hf_runner(args: argparse.Namespace):
    """specot's ``auto`` on the transformers backend, with torch's default threads while it runs."""
    import torch

    from specot import api

    threads = default_threads()
    hf = api.load_target(None)

    def run(ids: list[int], T: float, max_new: int, seed: int) -> int:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            rep = api.generate(list(ids), target=hf, draft="auto", max_new_tokens=max_new, temperature=T, seed=seed)
        finally:
            torch.set_num_threads(before)
        return len(rep.result.tokens)
    return run


class _DecodeClock:
    """Seconds spent inside ``llama_decode`` — llama-cpp-python's calls and specot's alike, both made
    through the ``llama_cpp`` module's attribute — while entered: the rest of a run's time is each
    loop's own work (sampling, logits copies, bookkeeping), which machine noise moves far less than
    the passes."""

    def __init__(self) -> None:
        self.s = 0.0

    def __enter__(self) -> "_DecodeClock":
        import llama_cpp
        import llama_cpp.llama_cpp as low

        self._mods, self._orig = (llama_cpp, low), low.llama_decode
        orig = self._orig

        def timed(ctx, batch):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            try:
                return orig(ctx, batch)
            finally:
                self.s += time.perf_counter() - t0
        for m in self._mods:
            m.llama_decode = timed
        return self

    def __exit__(self, *exc: object) -> None:
        for m in self._mods:
            m.llama_decode = self._orig


def cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    from tqdm import tqdm

    sets = _read_sets(args.prompts, args.n_prompts)
    # The same GGUF loaded once before the measured ones and kept: in one process the first model
    # loaded from a file ran its one-token passes 7-10 % slower than later loads of it (Qwen2.5-Coder-
    # 1.5B, 2-vCPU Xeon: whichever came first, specot's target or llama-cpp-python's Llama; freeing
    # it moved the loss to the next), which made specot's plain decoding look 5 % slower than
    # llama-cpp-python's when its target was loaded first.
    primer = load_target(args.target, n_threads=args.threads)  # noqa: F841 - kept alive for the run
    target = load_target(args.target, n_threads=args.threads)
    curves = measure_cost_curve(target, target.encode_prompt(COST_CONTEXT), DEFAULT_WIDTHS, args.cost_repeats)
    curve = curves["all"]
    methods = list(args.methods) + (["specot-hf-auto"] if args.with_transformers else [])
    runners: dict[str, Callable] = {}
    for m in methods:
        if m in ("plain", "prompt-lookup"):
            runners[m] = _llama_runner(target, lookup=(m == "prompt-lookup"))
        elif m == "specot-hf-auto":
            runners[m] = _hf_runner(args)
        elif m.startswith(SPECOT_PLAN):
            runners[m] = _plan_runner(target, m, args.temperatures, target.encode_prompt(COST_CONTEXT))
        else:
            runners[m] = _specot_runner(target, m, args, curve)
    encoded = {name: [target.encode_prompt(r["prompt"], system=r.get("system")) for r in rows]
               for name, rows in sets.items()}
    acc: dict = {}
    total = sum(len(v) for v in encoded.values()) * len(args.temperatures) * args.repeats * len(methods)
    bar = tqdm(total=total, desc="llama.cpp bench", file=sys.stderr, disable=args.no_progress)
    with _DecodeClock() as clock:
        _run_cells(encoded, args, methods, runners, acc, bar, clock)
    bar.close()
    return {**_meta(target), "kind": "llama.cpp decoding benchmark", "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats, "gamma": args.gamma, "suffix_depth": args.suffix_depth,
            "prompt_sets": {n: str(p) for n, p in zip(sets, args.prompts)}, "command": sys.argv, "cost_curve": {k: v.to_dict() for k, v in curves.items()},
            "results": _summarise(acc, curve)}


def _run_cells(encoded: dict[str, list[list[int]]], args: argparse.Namespace, methods: list[str],
               runners: dict[str, Callable], acc: dict, bar: Any, clock: _DecodeClock) -> None:
    """Every (set, T, repeat, prompt) with every method in turn, accumulated into ``acc``."""
    for name, prompts in encoded.items():
        for T in args.temperatures:
            for rep in range(args.repeats):
                for ids in prompts:
                    for m in methods:
                        t0, c0 = time.perf_counter(), clock.s
                        out = runners[m](ids, T, args.max_new_tokens, rep)
                        dt = time.perf_counter() - t0
                        cell = acc.setdefault(name, {}).setdefault(m, {}).setdefault(str(T), {
                            "tokens": 0, "time_s": 0.0, "passes": 0, "drafted": 0, "accepted": 0, "decode_s": 0.0,
                            "tree_sizes": [], "emitted": [], "draft_time_s": 0.0, "ttft_s": 0.0, "firsts": 0,
                            "draft_calls": 0, "draft_passes_cost": 0.0, "runs": 0})
                        cell["decode_s"] += clock.s - c0
                        rec = out if isinstance(out, dict) else {"tokens": out}
                        cell["tokens"] += rec["tokens"]
                        cell["time_s"] += dt
                        for k in ("passes", "drafted", "accepted", "draft_time_s", "ttft_s", "firsts", "draft_calls",
                                  "draft_passes_cost", "runs"):
                            cell[k] += rec.get(k, 0)
                        cell["tree_sizes"] += rec.get("tree_sizes", [])
                        cell["emitted"] += rec.get("emitted", [])
                        bar.update()


def _step_model(c: dict, curve: PassCostCurve) -> dict[str, Any]:
    """A cell's speedup model beside its measurement: the prediction from the measured costs alone
    (the target's curve r(1 + N_i) for each pass, the draft model's measured pass d in one-token target
    passes for each of its ``draft_calls``) and the step it predicts against the step measured
    (wall time after each run's first tokens, per target pass after the first)."""
    # Σ over the cell's draft passes, in one-token target passes
    predicted = predicted_speedup(c["tree_sizes"], c["emitted"], curve.ratio, c["draft_passes_cost"])
    out = {"draft_calls": c["draft_calls"], "predicted_speedup_vs_ar": round(predicted, 3)}
    steps = c["passes"] - c["runs"]
    if c["firsts"] and steps > 0 and curve.t_ms:
        units = sum(curve.ratio(1 + int(n)) for n in c["tree_sizes"]) + c["draft_passes_cost"]
        predicted = curve.t_ms[0] * units / c["passes"]
        measured = 1e3 * (c["time_s"] - c["ttft_s"]) / steps
        out.update(predicted_step_ms=round(predicted, 2), measured_step_ms=round(measured, 2),
                   step_vs_predicted=round(measured / predicted, 3))
    return out


def _summarise(acc: dict, curve: PassCostCurve) -> dict:
    out: dict = {}
    for name, methods in acc.items():
        for m, temps in methods.items():
            for T, c in temps.items():
                row = {"tokens_per_s": round(c["tokens"] / c["time_s"], 2), "tokens": c["tokens"],
                       "time_s": round(c["time_s"], 3), "llama_decode_s": round(c["decode_s"], 3),
                       # the loop's own work: the run's time outside llama_decode, per token
                       "outside_decode_ms_per_token": round(1e3 * (c["time_s"] - c["decode_s"]) / max(c["tokens"], 1), 4)}
                if c["firsts"]:  # after the first tokens: the prompt's pass left out
                    row["ttft_s"] = round(c["ttft_s"], 3)
                    row["decode_tokens_per_s"] = round((c["tokens"] - c["firsts"]) / (c["time_s"] - c["ttft_s"]), 2)
                if c["emitted"]:
                    row.update(passes=c["passes"], drafted=c["drafted"], accepted=c["accepted"],
                               tokens_per_pass=round(sum(c["emitted"]) / len(c["emitted"]), 3),
                               mean_tree_size=round(float(np.mean(c["tree_sizes"])), 3), **_step_model(c, curve))
                out.setdefault(name, {}).setdefault(T, {})[m] = row
    for name, temps in out.items():
        for T, rows in temps.items():
            base = rows.get("plain", {}).get("tokens_per_s")
            dbase = rows.get("plain", {}).get("decode_tokens_per_s")
            for r in rows.values():
                if base:
                    r["vs_plain"] = round(r["tokens_per_s"] / base, 3)
                if dbase and "decode_tokens_per_s" in r:
                    r["decode_vs_plain"] = round(r["decode_tokens_per_s"] / dbase, 3)
    means: dict = {}
    for temps in out.values():
        for T, rows in temps.items():
            for m, r in rows.items():
                means.setdefault(T, {}).setdefault(m, []).append(r.get("vs_plain"))
    out["mean_vs_plain"] = {T: {m: (round(float(np.mean(v)), 3) if None not in v else None) for m, v in rows.items()}
                            for T, rows in means.items()}
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``specot bench llamacpp``: its sub-commands ``cost`` and ``run``."""
    sub = ap.add_subparsers(dest="llamacpp_command", metavar="{cost,run}", required=True)
    c = sub.add_parser("cost", help="the cost curve t(B)/t(1) and the chains it lets pay")
    c.add_argument("--widths", type=int, nargs="+", default=list(DEFAULT_WIDTHS),
                   help="pass widths B, ascending from 1 (default 1..11)")
    c.add_argument("--repeats", type=int, default=25)
    r = sub.add_parser("run", help="tokens/s of llama.cpp and specot on llama.cpp over prompt sets")
    r.add_argument("--prompts", nargs="+", required=True,
                   help="JSONL prompt files, one set each; FILE=NAME:KIND,KIND keeps those kinds as the set NAME")
    r.add_argument("--n-prompts", type=int, default=6)
    r.add_argument("--max-new-tokens", type=int, default=96)
    r.add_argument("--temperatures", type=number(minimum=0), nargs="+", default=[0.0, 1.0])
    r.add_argument("--repeats", type=int, default=1)
    r.add_argument("--methods", nargs="+", default=list(METHODS), type=_method, metavar="METHOD",
                   help=f"any of {', '.join(METHODS)}, or specot:DRAFT (specot's plan for --draft DRAFT)")
    r.add_argument("--gamma", type=int, default=2, help="draft length of the chains (n-gram, draft model)")
    r.add_argument("--suffix-depth", type=int, default=4)
    r.add_argument("--cost-repeats", type=int, default=15)
    r.add_argument("--price-by-run", action="store_true",
                   help="price specot-suffix-llamacpp's budget by this run's cost curve, not the plan's constants")
    r.add_argument("--with-transformers", action="store_true", help="also specot auto on the transformers backend")
    r.add_argument("--no-progress", action="store_true")
    for q in (c, r):
        q.add_argument("--target", default=None,
                       help="the target on llama.cpp: the embedded SmolLM2 (default), a packaged model's name "
                            "(qwen2.5-coder-1.5b) or a .gguf path")
        q.add_argument("--threads", type=int, default=None, help=f"llama.cpp threads (default {default_threads()})")
        q.add_argument("--out", default=None, help="write the JSON here (default: stdout)")
        q.add_argument("--force", action="store_true", help="replace an --out file this benchmark did not write")


#: The prefix of a method that runs specot's plan for a draft name (``specot:auto``).
SPECOT_PLAN = "specot:"


def _method(text: str) -> str:
    """A ``--methods`` entry: one of :data:`METHODS` or ``specot:DRAFT`` with a draft name."""
    if text in METHODS or (text.startswith(SPECOT_PLAN) and len(text) > len(SPECOT_PLAN)):
        _draft_and_options(text[len(SPECOT_PLAN):])  # KEY=VALUE pairs well formed
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a method: use one of {', '.join(METHODS)} or specot:DRAFT")


def run(args: argparse.Namespace) -> int:
    """``specot bench llamacpp cost|run``: the JSON on stdout, or in ``--out``.

    Raises:
        ValueError: a count below 1, or widths that do not ascend from 1 (before anything loads).
    """
    for name in ("repeats", "n_prompts", "max_new_tokens", "gamma", "suffix_depth", "cost_repeats", "threads"):
        v = getattr(args, name, None)
        if v is not None and v < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    widths = getattr(args, "widths", None)
    if widths is not None and (not widths or widths[0] != 1 or any(b <= a for a, b in zip(widths, widths[1:]))):
        raise ValueError(f"--widths must ascend from 1, got {widths}")
    check_output(args.out, "--out", force=args.force, ours=json_has(benchmark="llamacpp"))
    result = {"benchmark": "llamacpp", **(cmd_cost(args) if args.llamacpp_command == "cost" else cmd_run(args))}
    if args.out:
        write_json(args.out, result, indent=1)
    else:
        print(dumps(result, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m specot_lab.bench.llamacpp cost|run`` (as ``specot bench llamacpp``); a bad option
    is one line on stderr and exit status 2."""
    ap = argparse.ArgumentParser(prog="python -m specot_lab.bench.llamacpp", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    args = ap.parse_args(argv)
    try:
        return run(args)
    except ValueError as exc:
        print(f"specot bench llamacpp: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
