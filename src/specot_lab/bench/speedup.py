"""``specot bench speedup``: SpecTr Tables 1 and 4 on the embedded target, against the peers.

Every method decodes the same prompts with the same target, in the same process, at each
temperature (0 and 1 by default), with the same ``max_new_tokens`` and stop-at-EOS rule:

* ``ar`` — specot's autoregressive decoding (the baseline of every ratio);
* ``ngram γ=G`` — single-draft speculative sampling with specot's n-gram drafter;
* ``spec n=1 γ=G`` — single-draft speculative sampling with the draft model;
* ``tree n=k γ=G VERIFIER`` — multi-draft decoding (n draft sequences of draft length γ, SpecTr's
  DraftSelection through :func:`specot.engine.tree_generate`), one row per verifier (``kseq``
  for i.i.d. drafts, ``rrs_wor`` without replacement, ``greedy`` for greedy drafts);
* peers, on the SAME Hugging Face model object: ``hf-ar`` (``generate()``), ``hf-prompt-lookup
  γ=G`` (``generate(prompt_lookup_num_tokens=γ)``) and ``hf-assisted γ=G``
  (``generate(assistant_model=draft)`` with ``num_assistant_tokens=γ``, constant schedule, no
  confidence threshold), sampling with ``do_sample``, ``temperature``, ``top_k=0``, ``top_p=1``
  (greedy at T = 0), prompts in the chat template.

Methods are interleaved per prompt (prompt 1: all methods, prompt 2: all methods, ... with the
method order rotated by one each prompt) so that load drifts on the shared CPU hit all alike; one
short warm-up run per method is excluded. Speedups are ratios of aggregate tokens/s
(Σ tokens / Σ seconds) to ``ar``'s, plus the mean and 95% CI of the per-prompt ratios.

Theory check, per speculative row: the per-depth acceptance rates measured in the run give the
predicted block efficiency under the i.i.d. model (``expected_tokens(α̂, L)``, Leviathan Eq. 1,
α̂ = accepted / tried draft positions) and under the per-depth model (``block_efficiency(rates)``);
the deviation is measured − predicted. The predicted wall-clock speedup uses (a) Leviathan's cost
model ``E[tokens] / (γc + 1)`` with c = draft step / target step, and (b) the MEASURED target cost
curve ``E[tokens] / (γc + t(N̄+1)/t(1))`` where t(T) is the time of one target pass over T new
tokens after a cached prompt, measured in the run and interpolated linearly, and N̄ the mean number
of draft tokens the target actually scored per pass (``drafted_per_pass``: below L when the n-gram
drafter finds no match, below K·L when a tree's drafts coincide — every tree is a chain at T = 0);
draft steps of a tree cost t_d(K). E[tokens] is the i.i.d. prediction. ``explained_by_cost_curve`` = (a − b)/(a − measured):
the share of the model's over-prediction that the cost curve accounts for.

JSON result (``schema_version`` 1)::

    {"benchmark": "speedup", "schema_version": 1, "command", "target", "target_dtype", "device",
     "device_name", "draft", "draft_available", "draft_reason", "prompt_set", "prompt_set_description",
     "prompts", "max_new_tokens", "temperatures", "gammas", "trees": [[K, L]], "tree_verifiers",
     "seed", "peers", "torch_threads", "cuda_graphs", "load_avg_start", "load_avg_end", "elapsed_s",
     "measured_s", "complete", "cells_done", "cells_total",
     "environment": {date, commit, cpu_model, cpu_flags, versions, load_average, ...},
     "runs": [environment of each process that measured cells: more than one when resumed],
     "cost_curve": {"target_ms": {T: ms}, "draft_ms": {w: ms}, "target_ratio": {T: t(T)/t(1)}},
     "rows": [{"temperature", "method", "family", "drafts", "gamma", "verifier", "prompts", "tokens",
               "time_s", "target_calls", "tokens_per_s", "block_efficiency", "speedup",
               "speedup_vs_hf_ar", "speedup_per_prompt_mean", "speedup_per_prompt_ci95",
               "acceptance", "acceptance_per_depth", "draft_time_s", "target_time_s",
               "overhead_share", "predicted_block_efficiency_iid", "predicted_block_efficiency_depth",
               "block_efficiency_deviation", "c", "predicted_speedup_leviathan",
               "predicted_speedup_cost_curve", "explained_by_cost_curve"}]}

(fields a method does not have are ``null``; ``elapsed_s`` is the wall time of the process that
wrote the result, ``null`` when it was read back from a journal; ``measured_s`` the decoding time
summed over cells).

**Cells as they finish.** With ``--out DIR`` the CLI passes ``journal=DIR/speedup.jsonl``
(:mod:`specot_lab.bench.journal`): the configuration first, then the setup (methods, cost curve),
then one line per finished cell (method × prompt × temperature: tokens, seconds, target passes,
the decoding statistics, the load average). An interrupted run leaves that file, from which
``specot bench results --speedup DIR`` reports the finished cells (``complete: false``) and which
the same command resumes. A row covers the prompts that autoregressive decoding also decoded.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .acceptance import BenchDraft, load_bench_draft, mean_ci
from .journal import Journal, config_difference, load_result
from .runinfo import run_info
from .script_io import device_sync
from specot.drafting.eagle import EagleDrafter
from specot.drafting.hybrid import HybridDrafter
from specot.drafting.model import ModelDrafter
from specot.drafting.tree import TreeSpec, default_law_for
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate, tree_generate
from specot.sampling import SamplingConfig
from specot.verifiers import get_verifier
from specot.theory import block_efficiency, expected_tokens
from tqdm import tqdm
from specot.api import load_drafter, load_target
from specot.plan import make_plan, run_plan
from specot.envinfo import load_average
from specot.models.device import sdpa_without_cudnn
from specot.models.hf import GRAPH_WIDTHS
from ..corpus import describe_prompt_set

__all__ = ["run_speedup_bench", "speedup_result", "load_speedup_result", "measure_cost_curve", "hf_generate", "Method",
           "SCHEMA_VERSION"]


@dataclass
class _Run:
    tokens: int
    time_s: float
    target_calls: int
    stats: Any = None  # GenerationStats for specot methods


@dataclass
class Method:
    """One decoding method of the benchmark (``run(prompt_ids, temperature, seed) -> _Run``)."""

    name: str
    family: str  # ar | ngram | spec | tree | hf-ar | hf-prompt-lookup | hf-assisted
    run: Callable[[list[int], float, int], _Run]
    n: int | None = None  # the number of drafts n (drafts per node of a tree)
    gamma: int | None = None  # the draft length γ
    verifier: str | None = None


def _pass_ms(model: Any, context_len: int, n: int, vocab: int, gen: torch.Generator) -> float:
    """Wall time (ms) of a rollback to ``context_len`` cached tokens plus one ``model`` pass over
    ``n`` random tokens (ids below ``vocab``), device-synchronised."""
    toks = torch.randint(0, vocab, (n,), generator=gen).tolist()
    device_sync(model.device)
    t0 = time.perf_counter()
    model.rollback(context_len)
    model.forward(toks)
    device_sync(model.device)
    return 1000.0 * (time.perf_counter() - t0)


@torch.inference_mode()
def measure_cost_curve(target: Any, draft: Any, context: Sequence[int], sizes: Sequence[int],
                       draft_widths: Sequence[int] = (1,), reps: int = 5) -> dict[str, Any]:
    """Median wall time (ms) of one target pass over T new tokens after the cached ``context``
    for each T in ``sizes``, and of one draft pass over w tokens for each w in ``draft_widths``
    (rounds interleaved across sizes); ``target_ratio`` is t(T)/t(1)."""
    ctx = list(context)
    sizes = sorted(set([1] + [int(s) for s in sizes]))
    t_ms: dict[int, list[float]] = {s: [] for s in sizes}
    d_ms: dict[int, list[float]] = {w: [] for w in draft_widths}
    target.reset()
    target.logits_after(ctx)
    if draft is not None:
        draft.reset()
        draft.logits_after(ctx)
    gen = torch.Generator().manual_seed(0)
    for _ in range(reps):
        for s in sizes:
            t_ms[s].append(_pass_ms(target, len(ctx), s, target.vocab_size, gen))
        if draft is not None:
            for w in draft_widths:
                d_ms[w].append(_pass_ms(draft, len(ctx), w, target.vocab_size, gen))
    target.rollback(len(ctx))
    tm = {str(s): statistics.median(v) for s, v in t_ms.items()}
    return {
        "context_tokens": len(ctx),
        "target_ms": tm,
        "target_ratio": {s: v / tm["1"] for s, v in tm.items()},
        "draft_ms": {str(w): statistics.median(v) for w, v in d_ms.items() if v},
    }


def hf_generate(model: Any, ids: Sequence[int], temperature: float, max_new_tokens: int, seed: int, *,
                eos: set[int], assistant: Any = None, prompt_lookup: int | None = None) -> _Run:
    """One Hugging Face ``generate`` call on ``model`` (batch 1, no padding), counting its forward
    passes with a hook; sampling ``temperature`` with top-k and top-p off (greedy at 0)."""
    calls = [0]

    def hook(*_: Any) -> None:
        calls[0] += 1

    h = model.register_forward_pre_hook(hook)
    kw: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=temperature > 0, repetition_penalty=1.0,
                              pad_token_id=min(eos) if eos else None, eos_token_id=sorted(eos) if eos else None)
    if temperature > 0:  # plain sampling at `temperature`: top-k, top-p and min-p off
        kw.update(temperature=float(temperature), top_k=0, top_p=1.0, min_p=None)
    else:  # greedy; clear the model's sampling defaults so generate() does not warn about them
        kw.update(temperature=None, top_k=None, top_p=None, min_p=None)
    if assistant is not None:
        kw["assistant_model"] = assistant
    if prompt_lookup is not None:
        kw["prompt_lookup_num_tokens"] = int(prompt_lookup)
    inp = torch.tensor([list(ids)], dtype=torch.long, device=model.device)
    try:
        torch.manual_seed(seed)
        device_sync(model.device)
        t0 = time.perf_counter()
        with torch.inference_mode(), sdpa_without_cudnn(model.device):  # the attention kernels specot's passes use
            out = model.generate(inp, attention_mask=torch.ones_like(inp), **kw)
        device_sync(model.device)
        dt = time.perf_counter() - t0
    finally:
        h.remove()
    return _Run(tokens=int(out.shape[1] - inp.shape[1]), time_s=dt, target_calls=calls[0])


def _build_methods(tgt: Any, ngram: Any, draft: BenchDraft | None, gammas: Sequence[int], trees: Sequence[tuple[int, int]],
                   tree_verifiers: Sequence[str], peers: bool, max_new_tokens: int,
                   extra_drafts: Sequence[str] = (), static_len: int | None = None) -> list[Method]:
    """The benchmark's methods; with ``static_len`` (CUDA graphs) every drafter loaded here drafts
    over a static cache of that many positions where it can, as :func:`specot.generate` does on CUDA."""
    eos = tgt.eos_token_ids

    def load(name: str, **kw: Any) -> Any:
        d = load_drafter(name, tgt, **kw)
        return d.use_static_cache(static_len, cuda_graphs=True) if static_len is not None else d

    def cfg(temp: float, seed: int, gamma: int = 1) -> Any:
        return GenerationConfig(max_new_tokens=max_new_tokens, gamma=gamma, seed=seed,
                                sampling=SamplingConfig(temperature=temp))

    def wrap(res: Any) -> _Run:
        s = res.stats
        return _Run(s.new_tokens, s.total_time_s, s.target_calls, s)

    ms: list[Method] = [Method("ar", "ar", lambda ids, t, s: wrap(autoregressive_generate(tgt, ids, cfg(t, s))))]
    if peers:
        ms.append(Method("hf-ar", "hf-ar", lambda ids, t, s: hf_generate(tgt.model, ids, t, max_new_tokens, s, eos=eos)))
    for L in gammas:
        ms.append(Method(f"ngram γ={L}", "ngram",
                         lambda ids, t, s, L=L: wrap(speculative_generate(tgt, ngram, ids, cfg(t, s, L))), 1, L, "speculative"))
        if peers:
            ms.append(Method(f"hf-prompt-lookup γ={L}", "hf-prompt-lookup",
                             lambda ids, t, s, L=L: hf_generate(tgt.model, ids, t, max_new_tokens, s, eos=eos, prompt_lookup=L),
                             1, L))
    if "auto" in extra_drafts:  # the default of specot generate: make_plan("auto")'s drafter and shape
        ms.append(Method("auto", "auto", _auto_runner(tgt, cfg, wrap, static_len)))
    for name in (n for n in extra_drafts if n != "auto"):  # drafters named as specot.api names them: suffix, eagle:PATH
        ed = load(name)
        label = "eagle" if isinstance(ed, EagleDrafter) else name
        for L in gammas:
            plan = make_plan(ed, gamma=L)
            spec, ver = plan.tree, plan.verifier.build()
            if spec is None:  # a chain
                ms.append(Method(f"{label} γ={L}", label,
                                 lambda ids, t, s, L=L, ed=ed: wrap(speculative_generate(tgt, ed, ids, cfg(t, s, L))),
                                 1, L, "speculative"))
            else:
                ms.append(Method(f"{label} tree γ={L}", label,
                                 lambda ids, t, s, L=L, ed=ed, spec=spec, v=ver: wrap(
                                     tree_generate(tgt, ed, ids, spec, cfg(t, s, L), verifier=v)), spec.max_drafts_per_node(), L, ver.name))
        if isinstance(ed, (EagleDrafter, HybridDrafter)):  # draft trees: EAGLE's top-k, GREEDY law
            for K, L in trees:
                plan = make_plan(ed, verifier="greedy", n=K, gamma=L, tree="greedy")
                spec, ver = plan.tree, plan.verifier.build()
                ms.append(Method(f"{label} tree n={K} γ={L} greedy", label,
                                 lambda ids, t, s, L=L, ed=ed, spec=spec, v=ver: wrap(
                                     tree_generate(tgt, ed, ids, spec, cfg(t, s, L), verifier=v)), K, L, "greedy"))
    if draft is not None and draft.available:
        dm = draft.obj
        md = ModelDrafter(dm)
        for L in gammas:
            ms.append(Method(f"spec n=1 γ={L}", "spec",
                             lambda ids, t, s, L=L: wrap(speculative_generate(tgt, md, ids, cfg(t, s, L))), 1, L, "speculative"))
            if peers:
                def hf_assist(ids: list[int], t: float, s: int, L: int = L) -> _Run:
                    gc = dm.model.generation_config
                    gc.num_assistant_tokens = L
                    gc.num_assistant_tokens_schedule = "constant"
                    gc.assistant_confidence_threshold = 0.0
                    return hf_generate(tgt.model, ids, t, max_new_tokens, s, eos=eos, assistant=dm.model)

                ms.append(Method(f"hf-assisted γ={L}", "hf-assisted", hf_assist, 1, L))
        for K, L in trees:
            for vname in tree_verifiers:
                law = default_law_for(get_verifier(vname))
                spec = TreeSpec.sequences(K, L, law)
                ms.append(Method(f"tree n={K} γ={L} {vname}", "tree",
                                 lambda ids, t, s, spec=spec, v=vname: wrap(tree_generate(tgt, dm, ids, spec, cfg(t, s), verifier=v)),
                                 K, L, vname))
    return ms


def _auto_runner(tgt: Any, cfg: Callable[..., Any], wrap: Callable[[Any], _Run],
                 static_len: int | None) -> Callable[[list[int], float, int], _Run]:
    """A run of ``draft="auto"`` exactly as :func:`specot.generate` plans it: the plan of
    :func:`specot.plan.make_plan` at each temperature, its drafter loaded once per draft."""
    plans: dict[float, Any] = {}
    drafters: dict[Any, Any] = {}

    def run(ids: list[int], t: float, s: int) -> _Run:
        plan = plans.setdefault(t, make_plan("auto", target=tgt, temperature=t))
        if plan.draft not in drafters:
            d = plan.draft.load(tgt)
            drafters[plan.draft] = d.use_static_cache(static_len, cuda_graphs=True) if static_len is not None else d
        return wrap(run_plan(plan, tgt, drafters[plan.draft], ids, cfg(t, s), plan.verifier.build()))

    return run


def _theory(row: dict[str, Any], stats_list: list[Any], cost: dict[str, Any], draft_ms_per_step: float | None) -> None:
    """Fill the prediction fields of a speculative row (see module docstring)."""

    tried = np.zeros(0)
    acc = np.zeros(0)
    for s in stats_list:
        t = np.asarray(s.tried_at, dtype=float)
        a = np.asarray(s.accepted_at, dtype=float)
        if t.size > tried.size:
            tried = np.pad(tried, (0, t.size - tried.size))
            acc = np.pad(acc, (0, t.size - acc.size))
        tried[: t.size] += t
        acc[: a.size] += a
    L = int(row["gamma"])
    if tried.sum() == 0:
        return
    alpha = float(acc.sum() / tried.sum())
    rates = [float(acc[d] / tried[d]) if d < tried.size and tried[d] > 0 else 0.0 for d in range(L)]
    a_c = min(alpha, 1.0 - 1e-12)
    be_iid = float(expected_tokens(a_c, L))
    be_depth = float(block_efficiency(np.clip(rates, 0.0, 1.0)))
    row.update(acceptance=alpha, acceptance_per_depth=rates, predicted_block_efficiency_iid=be_iid,
               predicted_block_efficiency_depth=be_depth,
               block_efficiency_deviation=row["block_efficiency"] - be_iid)
    t1 = cost["target_ms"]["1"]
    iters = sum(s.iterations for s in stats_list)
    n_nodes = sum(s.drafted for s in stats_list) / iters if iters else float(L)  # draft tokens scored per pass
    xs = sorted(int(k) for k in cost["target_ms"])
    ratio = float(np.interp(n_nodes + 1, xs, [cost["target_ms"][str(x)] for x in xs])) / t1
    row["drafted_per_pass"] = n_nodes
    c = (draft_ms_per_step / t1) if draft_ms_per_step is not None else 0.0
    lev = be_iid / (L * c + 1.0)
    cc = be_iid / (L * c + ratio)
    meas = row["speedup"]
    row.update(c=c, target_cost_ratio=ratio, predicted_speedup_leviathan=lev, predicted_speedup_cost_curve=cc,
               explained_by_cost_curve=((lev - cc) / (lev - meas)) if abs(lev - meas) > 1e-9 else None)


#: Version of the result JSON and of its journal (``speedup.jsonl``).
SCHEMA_VERSION = 1


def _digest(prompts: Sequence[Any]) -> str:
    """A short SHA-256 of the prompts (texts or token ids): the journal's check that a resumed run
    decodes the same prompts."""
    return hashlib.sha256(json.dumps(list(prompts), ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def _target_name(target: Any) -> str:
    return "embedded" if target is None else str(getattr(target, "name", target))


def _stats_record(stats: Any) -> dict[str, Any] | None:
    """The fields of a :class:`~specot.engine.GenerationStats` the rows use, JSON-ready."""
    if stats is None:
        return None
    return {k: getattr(stats, k) for k in ("iterations", "drafted", "draft_calls", "tried_at", "accepted_at",
                                           "draft_time_s", "target_time_s")}


def _setup(tgt: Any, bd: BenchDraft | None, methods: list[Method], prompt_set: str, n_prompts: int,
           cuda_graphs: bool) -> dict[str, Any]:
    """What a run resolved when it loaded (the journal's ``setup`` record, less the cost curve)."""
    return {
        "target": tgt.name, "target_dtype": str(tgt.dtype).replace("torch.", ""), "device": str(tgt.device),
        "device_name": torch.cuda.get_device_name(tgt.device) if tgt.device.type == "cuda" else None,
        "draft": bd.name if bd is not None else None, "draft_available": bool(bd is not None and bd.available),
        "draft_reason": bd.reason if bd is not None else None, "prompt_set": prompt_set,
        "prompt_set_description": describe_prompt_set(prompt_set), "prompts": n_prompts,
        "torch_threads": torch.get_num_threads(), "cuda_graphs": bool(cuda_graphs),
        "methods": [{"name": m.name, "family": m.family, "drafts": m.n, "gamma": m.gamma, "verifier": m.verifier}
                    for m in methods],
    }


def _plan_record(plan: Any) -> dict[str, Any]:
    """What ``auto`` decodes with: the draft, children per node (``None``: a chain), the draft length,
    the confidence gate, and the plan in words (:meth:`specot.plan.DecodingPlan.describe`)."""
    tree = plan.tree
    return {"draft": plan.draft.name, "drafts": tree.max_drafts_per_node() if tree else None,
            "gamma": tree.depth if tree else plan.gamma, "min_confidence": plan.min_confidence,
            "plan": plan.describe()}


def _resume_setup(jr: Journal | None, setup: dict[str, Any], measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The cost curve: the journal's (a resumed run keeps the curve its cells were predicted with) or
    a new measurement, recorded with ``setup``.

    Raises:
        ValueError: the journal's run resolved another target, dtype, draft or set of methods.
    """
    old = jr.of_kind("setup") if jr is not None else []
    if old:
        diff = config_difference({k: v for k, v in old[0].items() if k not in ("kind", "cost_curve")}, setup)
        if diff is not None:
            raise ValueError(f"{jr.path} was measured with another setup ({diff}); use another --out or --fresh")
        return old[0]["cost_curve"]
    cost = measure()
    if jr is not None:
        jr.add({"kind": "setup", **setup, "cost_curve": cost})
    return cost


def run_speedup_bench(*, target: Any = None, draft: str | BenchDraft | None = "distilled", prompts: list[Any],
                      prompt_set: str = "custom", temperatures: Sequence[float] = (0.0, 1.0),
                      gammas: Sequence[int] = (2, 4), trees: Sequence[tuple[int, int]] = ((2, 4), (4, 4)),
                      tree_verifiers: Sequence[str] = ("kseq", "rrs_wor", "greedy"), peers: bool = True,
                      max_new_tokens: int = 64, seed: int = 0, dtype: str = "float32", cost_reps: int = 5,
                      progress: bool = True, log: Any = sys.stderr, extra_drafts: Sequence[str] = (),
                      device: str = "cpu", cuda_graphs: bool = False, journal: str | os.PathLike[str] | None = None,
                      fresh: bool = False) -> dict[str, Any]:
    """Run the speedup benchmark (module docstring) with the target on ``device``; returns the
    JSON-ready dict. With ``cuda_graphs`` every specot row (autoregressive decoding included) runs
    the target over a static KV cache with its passes replayed as CUDA graphs
    (:meth:`specot.models.CausalLM.use_static_cache`); the Hugging Face rows stay eager.

    With ``journal`` (a ``.jsonl`` path, :mod:`specot_lab.bench.journal`) every finished cell (one
    method decoding one prompt at one temperature) is appended as it is measured; an existing
    journal of the same configuration is resumed (its cells are not measured again, its cost curve
    is kept), ``fresh`` starts it over. :func:`load_speedup_result` reads a journal, finished or not.

    Raises:
        ValueError: the journal holds a run of another configuration or setup.
    """
    t_start = time.perf_counter()
    config = {"target": _target_name(target), "dtype": str(dtype), "draft": getattr(draft, "name", draft),
              "prompt_set": prompt_set, "prompts_sha256": _digest(prompts), "prompts": len(prompts),
              "temperatures": [float(t) for t in temperatures], "gammas": [int(g) for g in gammas],
              "trees": [[int(k), int(g)] for k, g in trees], "tree_verifiers": list(tree_verifiers),
              "peers": bool(peers), "max_new_tokens": int(max_new_tokens), "seed": int(seed),
              "extra_drafts": list(extra_drafts), "device": str(device), "cuda_graphs": bool(cuda_graphs),
              "torch_threads": torch.get_num_threads()}
    jr = Journal.open(journal, "speedup", SCHEMA_VERSION, config, run_info(), fresh=fresh) if journal else None
    if jr is not None and jr.resumed and jr.of_kind("setup") and jr.of_kind("cell"):
        old = load_speedup_result(jr.path)
        if old["complete"]:  # nothing left to measure: no model is loaded
            print(f"[bench speedup] every cell of {jr.path} is measured already; --fresh measures again", file=log)
            return old
    tgt = load_target(target, dtype=dtype, device=device)
    bd: BenchDraft | None = None
    if draft is not None:
        bd = draft if isinstance(draft, BenchDraft) else load_bench_draft(draft, tgt, dtype=dtype, device=device)
        if not bd.available:
            print(f"[bench speedup] no draft model: {bd.reason}; running the n-gram and AR rows only", file=log)
    ngram = load_drafter("ngram", tgt, ngram_corpus="pydoc") if tgt.tokenizer is not None else load_drafter("ngram", tgt, ngram_corpus=None)
    encoded = [tgt.encode_prompt(p) if isinstance(p, str) and tgt.tokenizer is not None else list(p) for p in prompts]
    static_len = None  # with graphs: room for the longest prompt, the output, a draft tree and a pass's padding
    if cuda_graphs:
        static_len = min(max(map(len, encoded)) + max_new_tokens + 128 + 2 * GRAPH_WIDTHS[-1], tgt.max_context)
        tgt.use_static_cache(static_len, cuda_graphs=True)
    peers = bool(peers and hasattr(tgt.model, "generate"))
    methods = _build_methods(tgt, ngram, bd, gammas, trees, tree_verifiers, peers, max_new_tokens, extra_drafts,
                             static_len=static_len)

    setup = _setup(tgt, bd, methods, prompt_set, len(encoded), cuda_graphs)
    if "auto" in extra_drafts:  # what the auto row decodes with at each temperature
        setup["auto_plans"] = {f"{float(t):g}": _plan_record(make_plan("auto", target=tgt, temperature=float(t))) for t in temperatures}
    dm = bd.obj if bd is not None and bd.available else None
    sizes = [L + 1 for L in gammas] + [K * L + 1 for K, L in trees]
    widths = sorted({1} | {K for K, _ in trees})
    cost = _resume_setup(jr, setup, lambda: measure_cost_curve(tgt, dm, encoded[0], sizes,
                                                               widths if dm is not None else (), reps=cost_reps))
    for m in methods:  # warm-up (excluded)
        m.run(encoded[0][:], 1.0, seed)
    cells = _measure(methods, encoded, temperatures, seed, jr, progress)
    res = speedup_result(config, setup, cost, cells, jr.runs() if jr is not None else [run_info()])
    res["elapsed_s"] = time.perf_counter() - t_start
    return res


def _measure(methods: list[Method], encoded: list[list[int]], temperatures: Sequence[float], seed: int,
             jr: Journal | None, progress: bool) -> list[dict[str, Any]]:
    """Decode every (temperature, prompt, method) cell not already in the journal ``jr``: methods
    interleaved per prompt, their order rotated by one each prompt; each finished cell is appended
    to ``jr`` at once. Returns every cell (the journal's first)."""
    cells = jr.of_kind("cell") if jr is not None else []
    done = {(c["temperature"], c["prompt"], c["method"]) for c in cells}
    total = len(temperatures) * len(encoded) * len(methods)
    bar = tqdm(total=total, initial=len(done), desc="bench speedup", disable=not progress, file=sys.stderr)
    for temp in temperatures:
        for i, ids in enumerate(encoded):
            k = i % len(methods)
            for m in methods[k:] + methods[:k]:
                if (float(temp), i, m.name) in done:
                    continue
                r = m.run(list(ids), float(temp), seed + i)
                cell = {"kind": "cell", "temperature": float(temp), "prompt": i, "method": m.name, "tokens": r.tokens,
                        "time_s": r.time_s, "target_calls": r.target_calls, "stats": _stats_record(r.stats),
                        "load_average": load_average()}
                if jr is not None:
                    jr.add(cell)
                cells.append(cell)
                bar.update()
    bar.close()
    return cells


def _aggregate(rs: list[dict[str, Any]], base: dict[int, dict[str, Any]]) -> tuple[float, list[float]]:
    """(tokens/s summed over ``rs``, per-prompt speedups over the baseline cells ``base`` by prompt)."""
    tps = sum(r["tokens"] for r in rs) / sum(r["time_s"] for r in rs)
    per = [(r["tokens"] / r["time_s"]) / (base[r["prompt"]]["tokens"] / base[r["prompt"]]["time_s"]) for r in rs]
    return tps, per


def _row(temp: float, m: dict[str, Any], rs: list[dict[str, Any]], base: dict[int, dict[str, Any]],
         hf: dict[int, dict[str, Any]], cost: dict[str, Any]) -> dict[str, Any]:
    """One row of the result: ``m``'s cells ``rs`` at ``temp`` (those whose prompt the baseline
    decoded too) against autoregressive decoding (``base``) and HF ``generate()`` (``hf``)."""
    tok, tim, calls = sum(r["tokens"] for r in rs), sum(r["time_s"] for r in rs), sum(r["target_calls"] for r in rs)
    tps, per = _aggregate(rs, base)
    base_tps, _ = _aggregate([base[r["prompt"]] for r in rs], base)
    hf_rs = [hf[r["prompt"]] for r in rs if r["prompt"] in hf]
    hf_tps = _aggregate(hf_rs, hf)[0] if len(hf_rs) == len(rs) else None
    pm, plo, phi = mean_ci(per)
    row: dict[str, Any] = {
        "temperature": temp, "method": m["name"], "family": m["family"], "drafts": m["drafts"], "gamma": m["gamma"],
        "verifier": m["verifier"], "prompts": len(rs), "tokens": tok, "time_s": tim, "target_calls": calls,
        "tokens_per_s": tps, "block_efficiency": tok / calls if calls else None,
        "speedup": tps / base_tps, "speedup_vs_hf_ar": tps / hf_tps if hf_tps else None,
        "speedup_per_prompt_mean": pm, "speedup_per_prompt_ci95": [plo, phi],
        "acceptance": None, "acceptance_per_depth": None, "draft_time_s": None, "target_time_s": None,
        "overhead_share": None, "predicted_block_efficiency_iid": None, "predicted_block_efficiency_depth": None,
        "block_efficiency_deviation": None, "c": None, "drafted_per_pass": None, "target_cost_ratio": None,
        "predicted_speedup_leviathan": None, "predicted_speedup_cost_curve": None, "explained_by_cost_curve": None,
    }
    stats = [SimpleNamespace(**r["stats"]) for r in rs if r.get("stats") is not None]
    if stats:
        dt = sum(s.draft_time_s for s in stats)
        tt = sum(s.target_time_s for s in stats)
        row.update(draft_time_s=dt, target_time_s=tt, overhead_share=max(tim - dt - tt, 0.0) / tim)
    if m["family"] in ("ngram", "spec", "tree") and stats:
        if m["family"] == "ngram":
            drafted_calls = sum(s.draft_calls for s in stats)
            step = (sum(s.draft_time_s for s in stats) * 1000.0 / drafted_calls / m["gamma"]) if drafted_calls else 0.0
        else:
            step = cost["draft_ms"].get(str(m["drafts"] if m["family"] == "tree" else 1))
        _theory(row, stats, cost, step)
    return row


def speedup_result(config: dict[str, Any], setup: dict[str, Any], cost: dict[str, Any],
                   cells: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The result JSON (module docstring) from a run's cells, finished or not: one row per
    temperature and method with at least one cell whose prompt autoregressive decoding also decoded.
    ``complete`` says whether every cell was measured (``cells_done`` of ``cells_total``); ``runs``
    are the processes that measured them (:func:`~.runinfo.run_info` each: date, commit, machine,
    versions, load), the first also as ``environment``."""
    by: dict[tuple[float, str], dict[int, dict[str, Any]]] = {}
    for c in cells:
        by.setdefault((c["temperature"], c["method"]), {})[c["prompt"]] = c
    rows = []
    for temp in config["temperatures"]:
        base = by.get((temp, "ar"), {})
        hf = by.get((temp, "hf-ar"), {})
        for m in setup["methods"]:
            rs = [c for i, c in sorted(by.get((temp, m["name"]), {}).items()) if i in base]
            if rs:
                rows.append(_row(temp, m, rs, base, hf, cost))
    total = len(config["temperatures"]) * setup["prompts"] * len(setup["methods"])
    loads = [c["load_average"] for c in cells if c.get("load_average")]
    res = {"benchmark": "speedup", "schema_version": SCHEMA_VERSION,
           **{k: v for k, v in setup.items() if k != "methods"},
           "max_new_tokens": config["max_new_tokens"], "temperatures": config["temperatures"],
           "gammas": config["gammas"], "trees": config["trees"], "tree_verifiers": config["tree_verifiers"],
           "seed": config["seed"], "peers": config["peers"] and any(m["family"] == "hf-ar" for m in setup["methods"]),
           "cost_curve": cost, "rows": rows, "complete": len(cells) >= total, "cells_done": len(cells),
           "cells_total": total, "load_avg_start": runs[0].get("load_average"),
           "load_avg_end": loads[-1] if loads else runs[-1].get("load_average"),
           "elapsed_s": None, "measured_s": sum(c["time_s"] for c in cells),
           "environment": runs[0], "runs": runs}
    return res


def load_speedup_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A speedup result from ``path``: a result JSON (``speedup.json``), a journal (``speedup.jsonl``,
    finished or interrupted: :func:`speedup_result` of its cells) or a directory holding either
    (:func:`~specot_lab.bench.journal.load_result`).

    Raises:
        FileNotFoundError: nothing readable at ``path``.
        ValueError: a journal that has not measured a cell of autoregressive decoding yet, or a file
            of another benchmark.
    """
    run = load_result(path, "speedup")
    if isinstance(run, dict):
        return run
    setup = {k: v for k, v in run.setup.items() if k != "cost_curve"}
    res = speedup_result(run.config, setup, run.setup["cost_curve"], run.cells, run.runs)
    if not res["rows"]:
        raise ValueError(f"{path}: no cell of autoregressive decoding yet, so no speedup to report")
    return res
