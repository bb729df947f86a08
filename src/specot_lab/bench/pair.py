"""The seeds' verifiers on a real target + draft pair (``specot bench pair``): block efficiency with
exact expectations given the drafts, beside α* of each draft law and llama.cpp's match rule.

Protocol (per temperature T > 0; timing-free, so it may run on a shared machine):

1. For each prompt the target samples a continuation (seeded, plain decoding); ``--positions``
   evenly spaced positions of it are the contexts.
2. At each context the draft (any draft with a teacher-forced distribution q in the target's
   vocabulary; ``xvocab:PATH.gguf`` is token-level intersection, TLI, Timor et al. ICML 2025, so q
   is known) draws three sets of paths of ``max(--gammas)`` tokens, each scored by the target
   (p on every prefix):

   * ``iid``: ``max(--ns)`` i.i.d. paths (SpecTr's K sequences). A cell (n, γ) uses the first n
     paths cut to γ tokens — still n i.i.d. paths, and every cell sees the same draws.
   * ``wor``: ``max(--ns)`` distinct first tokens drawn without replacement (successive sampling:
     the first n of them are a without-replacement draw of n), each followed by a sampled chain —
     :meth:`specot.drafting.TreeSpec.sequences`'s shape under the ``wor`` law. Its first path is
     the first i.i.d. path (a first successive draw is an ordinary draw), so at n = 1 both trees
     are the same chain and every n is paired with the i.i.d. cells.
   * ``greedy``: the chain of q's most probable tokens — what llama.cpp's draft-model speculation
     drafts (``--spec-type draft-simple``; verified by token match).
3. ``E[τ | drafts]``, the expected number of accepted draft tokens given the draws, is computed
   exactly per context, as the engine walks the tree (descend while the verifier accepts a draft):

   * ``speculative`` (Leviathan et al. 2023) and ``block`` (Sun et al., ICLR 2025) on the first
     i.i.d. path (n = 1);
   * ``kseq`` (SpecTr), ``rrs`` (SpecInfer's recursive rejection sampling) and ``ot`` on the prefix
     tree of the n i.i.d. paths: at a node, the drafts are the next tokens of the paths through it
     (conditionally i.i.d. from q there), the verifier's law of the accepted draft given them
     (:func:`accepted_token_law`) weighs each child;
   * ``gbv`` (Thomas & Pal) on the n i.i.d. paths (:func:`~specot.verifiers.gbv.gbv_expected_accepted`;
     traversal verification on that same tree is the same rule, docs/theory.md);
   * ``rrs_wor`` and ``traversal`` (Weng et al., NeurIPS 2025) on the ``wor`` tree;
   * ``match``: the greedy chain accepted while the target's sample equals the draft token,
     ``E[τ] = Σ_i Π_{j ≤ i} p_j(g_j)`` (exact, and lossless; its per-token acceptance is p(draft)).

   The block efficiency is ``1 + E[τ]``, reported as the mean over contexts with a 95 % interval
   (normal approximation; contexts of one continuation are not independent, so it is optimistic).
4. Per-token acceptance at each context's first position: sampled drafts + p/q, ``Σ min(p, q)``,
   against the match rule's ``p(argmax q)``; and α* (Hu et al. 2025, :func:`specot.theory.optimal_acceptance`)
   for the ``iid`` and ``wor`` laws at every n, on q's top tokens
   (:func:`~specot_lab.bench.acceptance.reduce_vocab`, within n·1e-4 of the full vocabulary).

JSON (``--out``; a plot beside it, ``.png``, with matplotlib)::

    {"benchmark": "pair", "command", "target", "draft", "prompt_sets", "n_prompts", "temperatures",
     "ns", "gammas", "positions_per_prompt", "max_new_tokens", "seed",
     "rows": [{"temperature", "verifier", "draft_law", "n", "gamma", "contexts", "block_efficiency",
               "block_efficiency_ci95"}],
     "alpha_star": [{"temperature", "law", "n", "alpha_star", "alpha_star_ci95"}],
     "acceptance": [{"temperature", "rule", "acceptance", "acceptance_ci95"}],
     "elapsed_s", "environment"}

    specot bench pair --target qwen2.5-coder-1.5b --draft xvocab:SmolLM2.gguf --out pair.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from specot.outputs import check_output, json_has, write_json

from ..lazy import LazyNames
from .lists import int_list, number_list

__all__ = ["TLIDraft", "accepted_token_law", "tree_expected_accepted", "match_expected_accepted",
           "context_values", "run_pair_bench", "add_arguments", "run"]

_NAMES = LazyNames(__name__, {
    "numpy": "numpy", "torch": "torch", "tqdm": "tqdm.std", "load_target": "specot.api",
    "load_drafter": "specot.api", "GenerationConfig": "specot.engine",
    "autoregressive_generate": "specot.engine", "SamplingConfig": "specot.sampling",
    "standardize": "specot.sampling", "get_verifier": "specot.verifiers",
    "block_expected_accepted": "specot.verifiers.block", "token_level_output_law": "specot.verifiers.block",
    "gbv_expected_accepted": "specot.verifiers.gbv", "traversal_output_law": "specot.verifiers.traversal",
    "optimal_acceptance": "specot.theory", "load_prompts": "specot_lab.corpus",
    "mean_ci": "specot_lab.bench.acceptance", "reduce_vocab": "specot_lab.bench.acceptance",
    "run_info": "specot_lab.bench.runinfo",
})
__getattr__ = _NAMES.getattr

#: Verifiers on the i.i.d. paths' prefix tree (token level) and on the ``wor`` tree.
IID_TREE = ("kseq", "rrs", "ot")
WOR_TREE = ("rrs_wor", "traversal")
VERIFIERS = ("speculative", "block", "match") + IID_TREE + ("gbv",) + WOR_TREE


class TLIDraft:
    """A cross-vocabulary draft (an :class:`~specot.drafting.xvocab.XVocabDrafter` in TLI mode) as
    a teacher-forced distribution in the target's vocabulary: :meth:`q_after` is the q its chains
    draw from after the committed target ids and a drafted path (the drafter's own
    ``draft_context`` + the path's shared tokens, :meth:`~specot.drafting.xvocab.XVocabDrafter.tli_q`),
    standardized in float64 so the verifiers' sum-to-one checks hold at V = 151,936.

    Raises:
        ValueError: a drafter that is not a TLI cross-vocabulary drafter.
    """

    def __init__(self, drafter: Any) -> None:
        if getattr(drafter, "mode", None) != "tli" or getattr(drafter, "vmap", None) is None:
            raise ValueError(f"{type(drafter).__name__} is not a TLI cross-vocabulary drafter; name the draft "
                             "xvocab:PATH (token-level intersection), whose q is known")
        self.drafter = drafter
        self._ctx: tuple[list[int], list[int]] = ([], [])  # (target context, its draft ids)

    def q_after(self, context: Sequence[int], path: Sequence[int], sc: Any) -> Any:
        """q ``[V_target]`` (float64, standardized at ``sc``) after ``context + path`` (target ids)."""
        _NAMES.bind()
        ctx = [int(t) for t in context]
        if ctx != self._ctx[0]:
            self._ctx = (ctx, self.drafter.draft_context(ctx))
        to_draft = self.drafter.vmap.to_draft
        ids = list(self._ctx[1]) + [int(to_draft[int(t)]) for t in path]
        logits = self.drafter.vmap.target_logits(self.drafter.model.logits_after(ids))  # [1, V_target]
        return standardize(logits.double(), sc)[0]  # tli_q's q, standardized in float64


def accepted_token_law(verifier: Any, p: Any, q: Any, drafts: Sequence[int]) -> dict[int, float]:
    """``{x: P(the verifier accepts a draft and it is x | drafts)}`` for one node.

    Args:
        verifier: a token-level verifier object (:func:`specot.verifiers.get_verifier`).
        p, q: the node's target and draft distributions ``[V]`` (float64).
        drafts: the node's drafts ``[m]`` in draw order (with multiplicity for i.i.d. draws).

    Verifiers that try drafts in order (``kseq``, ``rrs``, ``rrs_wor``) accept draft j with
    probability ``reach_j · a_j``; any other (``ot``, ``speculative``) accepts exactly when its
    output is a drafted token (its ``verify`` reports the first matching draft), so the law is its
    output law on the drafted tokens.
    """
    _NAMES.bind()
    d = torch.tensor([[int(x) for x in drafts]], dtype=torch.int64)
    P, Q = p[None], q[None]
    a = None
    if hasattr(verifier, "_rounds"):
        a = verifier._rounds(P, Q, d)[0][0]
    elif hasattr(verifier, "_setup"):
        a = verifier._setup(P, Q, d)[-1][0]
    out: dict[int, float] = {}
    if a is not None:
        reach = torch.cumprod(torch.cat([torch.ones(1, dtype=torch.float64), 1.0 - a.double()[:-1]]), 0)
        for x, w in zip(d[0].tolist(), (reach * a.double()).tolist()):
            out[x] = out.get(x, 0.0) + float(w)
        return out
    law = verifier.output_distribution(P, Q, d)[0].double()
    return {x: float(law[x]) for x in dict.fromkeys(d[0].tolist())}


def tree_expected_accepted(verifier: Any, p: Any, q: Any, paths: Any) -> float:
    """``E[τ | paths]`` of a token-level multi-draft verifier on the prefix tree of ``paths``.

    Args:
        p, q: float64 ``[K, L + 1, V]``, row i of path k after its first i tokens.
        paths: int64 ``[K, L]``; paths that share a prefix share its rows.

    At a node, the drafts are the next tokens of the paths through it, in path order; the walk
    descends into the accepted draft's child (:func:`accepted_token_law`) and stops at a rejection
    or after L tokens.
    """
    rows = paths.tolist()
    L = len(rows[0]) if rows else 0

    def value(ks: list[int], depth: int) -> float:
        if depth >= L:
            return 0.0
        k0 = ks[0]
        law = accepted_token_law(verifier, p[k0, depth], q[k0, depth], [rows[k][depth] for k in ks])
        total = 0.0
        for x, w in law.items():
            if w > 0:
                total += w * (1.0 + value([k for k in ks if rows[k][depth] == x], depth + 1))
        return total
    return value(list(range(len(rows))), 0)


def match_expected_accepted(p: Any, path: Sequence[int]) -> float:
    """``E[τ]`` of the match rule on a fixed chain: ``Σ_i Π_{j ≤ i} p_{j-1}(path_j)``, with ``p``
    ``[L + 1, V]`` the target's rows along the chain (the target samples, the draft is accepted
    while they agree)."""
    total, reach = 0.0, 1.0
    for i, x in enumerate(path):
        reach *= float(p[i, int(x)])
        total += reach
    return total


def _token_level(p: Any, q: Any, path: Any) -> float:
    law = token_level_output_law(p, q, path).sum(-1)  # [L + 1]: P(τ = i)
    return float((law * torch.arange(law.shape[0], dtype=torch.float64)).sum())


def _chain(target: Any, draft: Any, ctx: list[int], head: list[int], L: int, sc: Any, gen: Any,
           greedy: bool = False) -> tuple[Any, Any, list[int]]:
    """A path of ``L`` tokens starting with ``head``, the rest drawn from q (or its argmax); the
    rows ``(p [L + 1, V], q [L + 1, V], path)``."""
    path, qs = list(head), []
    for i in range(L + 1):
        qi = draft.q_after(ctx, path[:i], sc)
        qs.append(qi)
        if len(path) <= i < L:
            path.append(int(qi.argmax()) if greedy else int(torch.multinomial(qi, 1, generator=gen)))
    p = standardize(target.logits_after(ctx, path).double(), sc)  # [L + 1, V]
    return p, torch.stack(qs), path


def draw_context(target: Any, draft: Any, ctx: list[int], n: int, gamma: int, sc: Any, gen: Any) -> dict[str, Any]:
    """The ``iid``, ``wor`` and ``greedy`` paths of one context with both models' rows (module
    docstring): ``{"iid": (p, q, paths), "wor": (p, q, paths), "greedy": (p, q, path)}``, p and q
    float64 ``[n, γ + 1, V]`` (``[γ + 1, V]`` for ``greedy``), paths int64 ``[n, γ]``: ``n`` paths of
    ``gamma`` (γ) tokens."""
    _NAMES.bind()
    out: dict[str, Any] = {}
    iid = [_chain(target, draft, ctx, [], gamma, sc, gen) for _ in range(n)]
    q0 = iid[0][1][0]
    k = min(n, int((q0 > 0).sum()))
    firsts, rest = [iid[0][2][0]], q0.clone()  # successive sampling: the first draw is the first i.i.d. path's
    for _ in range(k - 1):
        rest[firsts[-1]] = 0.0
        firsts.append(int(torch.multinomial(rest / rest.sum(), 1, generator=gen)))
    wor = [iid[0]] + [_chain(target, draft, ctx, [x], gamma, sc, gen) for x in firsts[1:]]
    for name, rows in (("iid", iid), ("wor", wor)):
        out[name] = (torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows]),
                     torch.tensor([r[2] for r in rows], dtype=torch.int64))
    out["greedy"] = _chain(target, draft, ctx, [], gamma, sc, gen, greedy=True)
    return out


def _wor_tree(p: Any, q: Any, paths: Any) -> tuple[Any, Any, Any, list[int]]:
    """Node rows, tokens and parents of the ``wor`` tree (root, n distinct children, chains)."""
    n, L = paths.shape
    P, Q, tokens, parents = [p[0, 0]], [q[0, 0]], [0], [-1]
    for k in range(n):
        parent = 0
        for i in range(L):
            P.append(p[k, i + 1])
            Q.append(q[k, i + 1])
            tokens.append(int(paths[k, i]))
            parents.append(parent)
            parent = len(tokens) - 1
    return torch.stack(P), torch.stack(Q), torch.tensor(tokens, dtype=torch.int64), parents


def _wor_values(p: Any, q: Any, paths: Any, verifiers: dict[str, Any]) -> dict[str, float]:
    n, L = paths.shape
    law = accepted_token_law(verifiers["rrs_wor"], p[0, 0], q[0, 0], paths[:, 0].tolist())
    rrs_wor = 0.0
    for k in range(n):
        w = law.get(int(paths[k, 0]), 0.0)
        rest = _token_level(p[k, 1:], q[k, 1:], paths[k, 1:]) if L > 1 else 0.0
        rrs_wor += w * (1.0 + rest)
    P, Q, tokens, parents = _wor_tree(p, q, paths)
    tl = traversal_output_law(P, Q, tokens, parents, "wor")
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    trav = float((tl.sum(-1) * torch.tensor(depth, dtype=torch.float64)).sum())
    return {"rrs_wor": rrs_wor, "traversal": trav}


def context_values(draws: dict[str, Any], ns: Sequence[int], gammas: Sequence[int],
                   verifiers: dict[str, Any]) -> dict[tuple[str, int, int], float]:
    """``E[τ | drafts]`` per ``(verifier, n, γ)`` for one context (:func:`draw_context`'s draws);
    ``speculative``, ``block`` and ``match`` at n = 1 only."""
    _NAMES.bind()
    out: dict[tuple[str, int, int], float] = {}
    pi, qi, di = draws["iid"]
    pw, qw, dw = draws["wor"]
    pg, _, g = draws["greedy"]
    for G in gammas:
        P, Q, D = pi[:, :G + 1], qi[:, :G + 1], di[:, :G]
        out[("speculative", 1, G)] = _token_level(P[0], Q[0], D[0])
        out[("block", 1, G)] = float(block_expected_accepted(P[0], Q[0], D[0]))
        out[("match", 1, G)] = match_expected_accepted(pg, g[:G])
        for n in ns:
            for name in IID_TREE:
                out[(name, n, G)] = tree_expected_accepted(verifiers[name], P[:n], Q[:n], D[:n])
            out[("gbv", n, G)] = float(gbv_expected_accepted(P[:n], Q[:n], D[:n]))
            m = min(n, dw.shape[0])
            for name, v in _wor_values(pw[:m, :G + 1], qw[:m, :G + 1], dw[:m, :G], verifiers).items():
                out[(name, n, G)] = v
    return out


def root_values(draws: dict[str, Any], ns: Sequence[int]) -> dict[tuple[str, str, int], float]:
    """Per-token acceptance at the context's first position: ``("acceptance", rule, 1)`` for
    sampled drafts + p/q (``Σ min(p, q)``) and the match rule (``p(argmax q)``), and
    ``("alpha_star", law, n)`` for laws ``iid`` and ``wor``."""
    _NAMES.bind()
    p0, q0 = draws["iid"][0][0, 0], draws["iid"][1][0, 0]
    out = {("acceptance", "p/q, sampled drafts", 1): float(torch.minimum(p0, q0).sum()),
           ("acceptance", "match, greedy draft", 1): float(p0[int(q0.argmax())])}
    pr, qr = reduce_vocab(p0[None], q0[None])
    support = int((qr[0] > 0).sum())
    for law in ("iid", "wor"):
        for n in ns:
            k = n if law == "iid" else min(n, support)
            a = float(torch.minimum(p0, q0).sum()) if k == 1 else optimal_acceptance(pr[0].numpy(), qr[0].numpy(), k, law).alpha
            out[("alpha_star", law, n)] = float(a)
    return out


def _summary(values: list[dict[tuple, float]], temp: float) -> list[dict[str, Any]]:
    """Block-efficiency rows of one temperature from the per-context values."""
    laws = {"rrs_wor": "wor", "traversal": "wor", "match": "greedy"}
    rows = []
    for key in values[0]:
        name, n, G = key
        eff = 1.0 + numpy.array([v[key] for v in values])
        m, lo, hi = mean_ci(eff)
        rows.append({"temperature": temp, "verifier": name, "draft_law": laws.get(name, "iid"), "n": n, "gamma": G,
                     "contexts": int(eff.size), "block_efficiency": round(m, 4),
                     "block_efficiency_ci95": [round(lo, 4), round(hi, 4)]})
    return rows


def _root_summary(values: list[dict[tuple, float]], temp: float) -> tuple[list[dict], list[dict]]:
    acc, star = [], []
    for key in values[0]:
        kind, label, n = key
        x = numpy.array([v[key] for v in values])
        m, lo, hi = mean_ci(x)
        if kind == "acceptance":
            acc.append({"temperature": temp, "rule": label, "acceptance": round(m, 4),
                        "acceptance_ci95": [round(lo, 4), round(hi, 4)]})
        else:
            star.append({"temperature": temp, "law": label, "n": n, "alpha_star": round(m, 4),
                         "alpha_star_ci95": [round(lo, 4), round(hi, 4)]})
    return acc, star


def run_pair_bench(*, target: Any = None, draft: Any, prompts: list[Any], temperatures: Sequence[float] = (0.6, 1.0),
                   ns: Sequence[int] = (1, 2, 4), gammas: Sequence[int] = (2, 4), positions: int = 8,
                   max_new_tokens: int = 48, seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Run the benchmark (module docstring); returns the JSON-ready dict.

    Args:
        target: a loaded target model or a name for :func:`specot.load_target` (None: the embedded one).
        draft: a draft name for :func:`specot.load_drafter` (``xvocab:PATH.gguf``), a TLI drafter,
            or any object with ``q_after(context, path, sampling) -> [V]`` (e.g. :class:`TLIDraft`).
        prompts: strings or token-id lists.

    Raises:
        ValueError: a temperature ≤ 0, an empty or non-positive ``ns`` / ``gammas``, a draft whose
            q is not known (not TLI).
    """
    _NAMES.bind()
    if not ns or not gammas or min(ns) < 1 or min(gammas) < 1:
        raise ValueError("ns and gammas need at least one value >= 1 each")
    if any(not t > 0 for t in temperatures):
        raise ValueError("every temperature must be > 0: at T = 0 the drafts are one deterministic path")
    t0 = time.perf_counter()
    tgt = load_target(target)
    d = draft
    if isinstance(d, str):
        d = load_drafter(d, tgt)
    if not hasattr(d, "q_after"):
        d = TLIDraft(d)
    names = [v for v in VERIFIERS if v != "match"]
    verifiers = {v: get_verifier(v) for v in names}
    encoded = [tgt.encode_prompt(p) if isinstance(p, str) else list(p) for p in prompts]
    K, L = max(ns), max(gammas)
    rows, acceptance, alpha_star = [], [], []
    bar = tqdm(total=len(temperatures) * len(encoded) * positions, desc="bench pair", disable=not progress,
               file=sys.stderr)
    for temp in temperatures:
        sc = SamplingConfig(temperature=float(temp))
        values, roots = [], []
        for i, ids in enumerate(encoded):
            cell_seed = seed + 1000 * i + int(round(temp * 100))
            cont = autoregressive_generate(tgt, ids, GenerationConfig(max_new_tokens=max_new_tokens, seed=cell_seed,
                                                                      sampling=sc)).tokens
            gen = torch.Generator().manual_seed(10_007 * seed + cell_seed)
            for j in numpy.linspace(0, max(len(cont) - 1, 0), positions).round().astype(int).tolist():
                draws = draw_context(tgt, d, list(ids) + list(cont[:j]), K, L, sc, gen)
                values.append(context_values(draws, ns, gammas, verifiers))
                roots.append(root_values(draws, ns))
                bar.update()
        rows += _summary(values, float(temp))
        acc, star = _root_summary(roots, float(temp))
        acceptance += acc
        alpha_star += star
    bar.close()
    name = draft if isinstance(draft, str) else type(draft).__name__
    return {"benchmark": "pair", "target": getattr(tgt, "name", str(target)), "draft": name,
            "temperatures": [float(t) for t in temperatures], "ns": list(ns), "gammas": list(gammas),
            "positions_per_prompt": positions, "max_new_tokens": max_new_tokens, "seed": seed, "rows": rows,
            "alpha_star": alpha_star, "acceptance": acceptance, "elapsed_s": round(time.perf_counter() - t0, 1)}


def plot(res: dict[str, Any], path: str | Path) -> Path:
    """Block efficiency against n, one panel per (T, γ), one line per verifier; α* of the ``iid``
    law printed in each panel's title row. Written with matplotlib's Agg backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    temps, gammas = res["temperatures"], res["gammas"]
    fig, axes = plt.subplots(len(temps), len(gammas), figsize=(4.2 * len(gammas), 3.4 * len(temps)), squeeze=False)
    for a, T in enumerate(temps):
        stars = {(s["law"], s["n"]): s["alpha_star"] for s in res["alpha_star"] if s["temperature"] == T}
        for b, G in enumerate(gammas):
            ax = axes[a][b]
            for v in VERIFIERS:
                pts = sorted((r["n"], r["block_efficiency"]) for r in res["rows"]
                             if r["temperature"] == T and r["gamma"] == G and r["verifier"] == v)
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o" if len(pts) > 1 else "s", label=v)
            star = ", ".join(f"n={n}: {stars[('iid', n)]:.2f}" for n in res["ns"] if ("iid", n) in stars)
            ax.set_title(f"T = {T:g}, γ = {G}\nα* (iid) {star}", fontsize=8)
            ax.set_xlabel("number of drafts n")
            ax.set_ylabel("block efficiency")
            ax.set_xticks(res["ns"])
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(f"{res['target']} + {Path(str(res['draft'])).name}", fontsize=9)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _table(res: dict[str, Any]) -> str:
    lines = ["| T | verifier | law | n | γ | block efficiency [95%] |", "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lo, hi = r["block_efficiency_ci95"]
        lines.append(f"| {r['temperature']:g} | {r['verifier']} | {r['draft_law']} | {r['n']} | {r['gamma']} | "
                     f"{r['block_efficiency']:.3f} [{lo:.3f}, {hi:.3f}] |")
    lines += ["", "| T | per-token acceptance rule | acceptance |", "|---|---|---|"]
    lines += [f"| {a['temperature']:g} | {a['rule']} | {a['acceptance']:.3f} |" for a in res["acceptance"]]
    lines += ["", "| T | law | n | α* |", "|---|---|---|---|"]
    lines += [f"| {s['temperature']:g} | {s['law']} | {s['n']} | {s['alpha_star']:.3f} |" for s in res["alpha_star"]]
    return "\n".join(lines)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``specot bench pair``."""
    ap.add_argument("--target", default=None, help="target model: smollm2 (default), qwen2.5-coder-1.5b or a .gguf file")
    ap.add_argument("--draft", required=True, help="draft with a known q in the target's vocabulary: xvocab:PATH.gguf")
    ap.add_argument("--prompts", default="code,chat,general",
                    help="comma list of prompt sets (named sets or JSONL files with a 'prompt' field)")
    ap.add_argument("--n-prompts", type=int, default=3, help="prompts per set")
    ap.add_argument("--temperatures", default="0.6,1", help="comma list, each > 0")
    ap.add_argument("--ns", default="1,2,4", help="numbers of drafts n")
    ap.add_argument("--gammas", default="2,4", help="draft lengths γ")
    ap.add_argument("--positions", type=int, default=8, help="contexts per prompt, evenly spaced in its continuation")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="length of the target's continuation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="JSON path (a .png plot is written beside it); an existing file is "
                    "replaced only when this benchmark wrote it, or with --force")
    ap.add_argument("--force", action="store_true", help="replace an existing --out file")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """``specot bench pair``: print the tables, write the JSON and its plot with ``--out``. Every
    option is checked before a model loads.

    Raises:
        ValueError: a bad option, or an ``--out`` file this benchmark did not write (without ``--force``).
    """
    sets = [s.strip() for s in args.prompts.split(",") if s.strip()]
    if not sets:
        raise ValueError(f"--prompts names no prompt set: {args.prompts!r}; e.g. code,chat")
    temperatures = number_list(args.temperatures, "--temperatures", positive=True)
    ns, gammas = int_list(args.ns, "--ns", unique=True), int_list(args.gammas, "--gammas", unique=True)
    for value, flag in ((args.n_prompts, "--n-prompts"), (args.positions, "--positions"),
                        (args.max_new_tokens, "--max-new-tokens")):
        if value < 1:
            raise ValueError(f"{flag} must be an integer >= 1, got {value}")
    check_output(args.out, "--out", force=args.force, ours=json_has(benchmark="pair"))
    _NAMES.bind()
    prompts = [p for s in sets for p in load_prompts(s, args.n_prompts)]
    res = run_pair_bench(target=args.target, draft=args.draft, prompts=prompts, temperatures=temperatures, ns=ns,
                         gammas=gammas, positions=args.positions, max_new_tokens=args.max_new_tokens, seed=args.seed,
                         progress=not args.no_progress)
    res = {"benchmark": "pair", "command": "specot bench pair " + " ".join(sys.argv[3:]), "prompt_sets": sets,
           "n_prompts": args.n_prompts, **res, "environment": run_info()}
    print(_table(res))
    if args.out:
        write_json(args.out, res, indent=1)
        plot(res, Path(args.out).with_suffix(".png"))
    return 0
