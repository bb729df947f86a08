"""Figures of the theory toolkit (matplotlib, Agg backend): ``specot theory plots --out DIR``.

* ``spectr_fig4_bernoulli.png`` — SpecTr Fig. 4 analog: OTM-n (App. B closed form) vs k-Seq for a
  Bernoulli draft ``q = Ber(0.25)`` and targets ``p = Ber(b)``, as n grows.
* ``spectr_fig5_uniform.png`` — SpecTr Fig. 5 analog: α_n for a uniform draft ``q = U(120)`` and
  targets ``p = U(d_p)``, d_p ∈ {10, 20, 30, 60, 120}.
* ``spectr_fig6_bernoulli_rrs.png`` — SpecTr Fig. 6 analog: OTM-n vs k-Seq vs multi-round
  rejection sampling (RRS) for the Bernoulli pairs.
* ``speedup_vs_gamma.png`` — Leviathan §3: walltime improvement vs γ for several α and c, optimum
  marked.
* ``alpha_by_law.png`` — α* vs n for each draft law (iid, wor, cps, greedy) on a softmax pair,
  showing how far Hu et al.'s CPS formula is from true successive sampling.

(SpecTr names the draft p and the target q; the titles here use specot's letters: q draft, p target.)
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from .bounds import bernoulli_alpha, kseq_lower_bound, rrs_acceptance, uniform_alpha
from .speedup import optimal_gamma, walltime_improvement
from .optimal import optimal_acceptance

__all__ = ["make_plots", "PLOT_FILES"]

#: The files :func:`make_plots` writes, in its order.
PLOT_FILES = ("spectr_fig4_bernoulli.png", "spectr_fig5_uniform.png", "spectr_fig6_bernoulli_rrs.png",
              "speedup_vs_gamma.png", "alpha_by_law.png")


def _plt():  # noqa: ANN202
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _bern(x: float) -> np.ndarray:
    return np.array([1.0 - x, x])


def _fig_bernoulli(path: Path, with_rrs: bool, n_max: int = 10) -> None:
    plt = _plt()
    ns = np.arange(1, n_max + 1)
    bs = [0.05, 0.1, 0.5, 0.75, 0.9]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(bs)))
    for b, col in zip(bs, colors):
        otm = [bernoulli_alpha(0.25, b, int(n)) for n in ns]
        ks = [kseq_lower_bound(_bern(b), _bern(0.25), int(n)) for n in ns]
        ax.plot(ns, otm, "-o", color=col, ms=4, label=f"OTM-n, p=Ber({b})")
        ax.plot(ns, ks, "--s", color=col, ms=4, label=f"k-Seq, p=Ber({b})")
        if with_rrs:
            rr = [rrs_acceptance(_bern(b), _bern(0.25), int(n)) for n in ns]
            ax.plot(ns, rr, ":^", color=col, ms=4, label=f"RRS, p=Ber({b})")
    title = "OTM vs k-Seq vs RRS" if with_rrs else "OTM vs k-Seq"
    ax.set_title(f"{title}: draft q = Ber(0.25), target p = Ber(b)  (SpecTr Fig. {6 if with_rrs else 4} analog)")
    ax.set_xlabel("number of i.i.d. drafts n")
    ax.set_ylabel("acceptance probability")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=3 if with_rrs else 2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fig_uniform(path: Path, n_max: int = 40) -> None:
    plt = _plt()
    d = 120
    ns = np.arange(1, n_max + 1)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for dp in (10, 20, 30, 60, 120):
        r = d / dp
        ax.plot(ns, [uniform_alpha(r, int(n)) for n in ns], "-o", ms=3, label=f"p = U({dp}) (r = {r:g})")
    ax.set_title("Optimal acceptance α_n: draft q = U(120), target p = U(d_p)  (SpecTr Fig. 5 analog)")
    ax.set_xlabel("number of i.i.d. drafts n")
    ax.set_ylabel("α_n = 1 − (1 − 1/r)^n")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fig_speedup(path: Path, g_max: int = 20) -> None:
    plt = _plt()
    gs = np.arange(0, g_max + 1)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, c in zip(axes, (0.05, 0.2)):
        for alpha in (0.5, 0.7, 0.8, 0.9):
            imp = np.asarray(walltime_improvement(alpha, gs, c))
            (line,) = ax.plot(gs, imp, "-o", ms=3, label=f"α = {alpha}")
            opt = optimal_gamma(alpha, c, g_max)
            ax.plot([opt.gamma], [opt.improvement], "*", ms=14, color=line.get_color())
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_title(f"cost coefficient c = {c}  (★ = optimal γ)")
        ax.set_xlabel("draft length γ")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_ylabel("expected walltime improvement")
    fig.suptitle("Speculative decoding speedup vs γ (Leviathan et al. §3: (1 − α^(γ+1)) / ((1 − α)(γc + 1)))")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fig_laws(path: Path, V: int = 2000, n_max: int = 8, seed: int = 0) -> None:
    plt = _plt()
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(V) * 3
    lp = base + 1.5 * rng.standard_normal(V)
    lq = base + 1.5 * rng.standard_normal(V)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, temp in zip(axes, (0.6, 1.0)):
        p = np.exp((lp - lp.max()) / temp)
        q = np.exp((lq - lq.max()) / temp)
        p, q = p / p.sum(), q / q.sum()
        ns = np.arange(1, n_max + 1)
        for law, style in (("iid", "-o"), ("wor", "-s"), ("cps", "--x"), ("greedy", "-^")):
            vals = [optimal_acceptance(p, q, int(n), law).alpha for n in ns]  # type: ignore[union-attr]
            ax.plot(ns, vals, style, ms=4, label=law + (" (Hu et al.'s formula)" if law == "cps" else ""))
        ax.set_title(f"softmax pair, V = {V}, temperature {temp}")
        ax.set_xlabel("number of drafts n")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_ylabel("optimal acceptance α*")
    fig.suptitle("α* by draft law (subset selection, Hu et al. 2025); wor = exact successive sampling")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def make_plots(out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write every figure listed in the module docstring into ``out_dir`` (created) → their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / name for name in PLOT_FILES]
    _fig_bernoulli(paths[0], with_rrs=False)
    _fig_uniform(paths[1])
    _fig_bernoulli(paths[2], with_rrs=True)
    _fig_speedup(paths[3])
    _fig_laws(paths[4])
    return paths
