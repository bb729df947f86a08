"""Per-call cost of every verifier at V = 49152 (``specot bench verifier-speed``).

For B ∈ {1, 64} and n ∈ {1, 2, 4, 8} (each verifier's valid n), times ``verify(p, q, drafts,
generator)`` on synthetic target/draft pairs (``p = softmax(3·z)``, ``q = softmax(3·z + ε)``,
``ε ~ N(0, 1)``; acceptance ≈ 0.6–0.8), drafts drawn from the verifier's draft law. Warm-up calls
are excluded; single-threaded by default (``--threads``); the median over repeats is reported in ms per call and ms per position. ``otm`` is
omitted (LP, small vocabularies only). Prints a table and writes JSON (``--out``).

The optimal i.i.d. verifier ``ot`` (whose cost depends on the shape of p and q, not only on V) is
timed per position (B = 1) for n ∈ {2, 4, 8} on the distributions of :data:`OT_DISTRIBUTIONS`
(real-shaped, peaked, flat, near-uniform and uniform q, top-50 supports, q = p), each row with its
α*; ``--verifier ot`` times only those (``specot bench verifier-speed --verifier ot --out ot.json``).
``--real DRAFT`` adds rows on real distributions: the embedded target's and the draft model's p and q
(standardized at T = 1) at every position of the target's sampled continuations of 3 code, 3 chat
and 3 general prompts (32 tokens each), ``ot`` beside ``kseq`` (median, 90th percentile and maximum
ms per position over the positions, one timed call each after an untimed one with the same drafts).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import torch
from tqdm import tqdm

from specot.laws import sample_drafts
from specot.verifiers import DraftLaw, get_verifier
from specot.cli.command import MAX_THREADS, count
from specot.outputs import check_output, json_has, write_json
from .runinfo import run_info

V = 49152
CONFIGS = [  # name, params, law, valid n
    ("speculative", {}, DraftLaw.IID, (1,)),
    ("lenient", {"lenience": 0.5}, DraftLaw.IID, (1,)),
    ("kseq", {}, DraftLaw.IID, (1, 2, 4, 8)),
    ("rrs", {}, DraftLaw.IID, (1, 2, 4, 8)),
    ("rrs_wor", {}, DraftLaw.WOR, (1, 2, 4, 8)),
    ("greedy", {}, DraftLaw.GREEDY, (1, 2, 4, 8)),
    ("spechub", {}, DraftLaw.SPECHUB, (1, 2)),
    ("mentored", {"D": 0.1}, DraftLaw.IID, (1,)),
    ("importance", {}, DraftLaw.IID, (1, 2, 4, 8)),
]


def _inputs(B: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z = 3 * torch.randn(B, V, generator=g)
    p = torch.softmax(z, -1)
    q = torch.softmax(z + torch.randn(B, V, generator=g), -1)
    return p, q


#: ``ot`` rows: how p and q ``[1, V]`` (float32) are made from logits z and noise ε1, ε2 (all N(0, 1)).
OT_DISTRIBUTIONS = {
    "real-shaped": "p = softmax(3z), q = softmax(3z + ε1) (the inputs of the other rows)",
    "peaked": "p = softmax(6z + ε1), q = softmax(6z + ε2)",
    "flat": "p = softmax(z + ε1/2), q = softmax(z + ε2/2) (one level of most of the vocabulary)",
    "near-uniform-q": "p = softmax(3z), q = softmax(ε1/20)",
    "uniform-q": "p = softmax(3z), q = 1/V",
    "top-50": "real-shaped, p and q each cut to its 50 largest entries and renormalised",
    "q=p": "p = q = softmax(3z)",
}
OT_NS = (2, 4, 8)


def ot_inputs(kind: str, vocab: int = V, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """p and q ``[1, vocab]`` (float32) of the ``ot`` row ``kind`` (see :data:`OT_DISTRIBUTIONS`).

    Raises:
        ValueError: an unknown kind.
    """
    if kind not in OT_DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {kind!r}; choose from {sorted(OT_DISTRIBUTIONS)}")
    g = torch.Generator().manual_seed(seed)
    z, e1, e2 = (torch.randn(1, vocab, generator=g) for _ in range(3))
    p, q = torch.softmax(3 * z, -1), torch.softmax(3 * z + e1, -1)  # real-shaped
    if kind == "peaked":
        p, q = torch.softmax(6 * z + e1, -1), torch.softmax(6 * z + e2, -1)
    elif kind == "flat":
        p, q = torch.softmax(z + e1 / 2, -1), torch.softmax(z + e2 / 2, -1)
    elif kind == "near-uniform-q":
        q = torch.softmax(e1 / 20, -1)
    elif kind == "uniform-q":
        q = torch.full_like(p, 1.0 / vocab)
    elif kind == "q=p":
        q = p.clone()
    elif kind == "top-50":
        p, q = (t * (t >= t.topk(min(50, vocab), -1).values[:, -1:]) for t in (p, q))
        p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    return p, q


def measure_ot(quick: bool = False, vocab: int = V) -> list[dict]:
    """Median ms per position of ``ot`` (B = 1) for each distribution and n ∈ :data:`OT_NS`; each
    timed call gets fresh drafts (so the shadows it builds are not cached from a previous call)."""
    repeats = 5 if quick else 30
    warmup = 2 if quick else 5
    v = get_verifier("ot")
    rows = []
    for kind in tqdm(OT_DISTRIBUTIONS, desc="ot speed"):
        p, q = ot_inputs(kind, vocab)
        for n in OT_NS:
            g = torch.Generator().manual_seed(1)
            times = []
            for i in range(warmup + repeats):
                d = sample_drafts(q, n, DraftLaw.IID, g)
                t0 = time.perf_counter()
                v.verify(p, q, d, g)
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
            med = statistics.median(times) * 1e3
            rows.append({"verifier": "ot", "law": "iid", "dist": kind, "B": 1, "n": n, "ms_per_call": med,
                         "ms_per_position": med, "repeats": repeats,
                         "alpha": float(v.acceptance(p, q, n).value[0])})
    return rows


def real_positions(draft: str, temperature: float = 1.0, per_set: int = 3,
                   tokens: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p, q) [R, V]`` float32: the embedded target's and ``draft``'s standardized distributions at
    every position of the target's seeded continuations of ``per_set`` prompts of the code, chat and
    general sets (``tokens`` each).

    Raises:
        ValueError: a draft without a draft distribution here (see ``load_bench_draft``).
    """
    from specot.api import load_target
    from specot.engine import GenerationConfig, autoregressive_generate
    from specot.sampling import SamplingConfig, standardize

    from ..corpus import load_prompts
    from .acceptance import load_bench_draft

    tgt = load_target(None)
    bd = load_bench_draft(draft, tgt)
    if not bd.available or bd.kind != "model":
        raise ValueError(f"--real {draft!r}: {bd.reason or 'no draft distribution q'}; name a draft model "
                         "(distilled, early-exit:K or a model directory)")
    sc = SamplingConfig(temperature=temperature)
    ps, qs = [], []
    for name in ("code", "chat", "general"):
        for prompt in load_prompts(name, per_set):
            ids = tgt.encode_prompt(prompt)
            cont = autoregressive_generate(tgt, ids, GenerationConfig(max_new_tokens=tokens, seed=1, sampling=sc)).tokens
            tgt.reset()
            bd.obj.reset()
            ps.append(standardize(tgt.logits_after(ids, cont[:-1]).double(), sc))  # [len(cont), V]
            qs.append(standardize(bd.obj.logits_after(ids, cont[:-1]).double(), sc))
    return torch.cat(ps).float(), torch.cat(qs).float()


def measure_real(draft: str, temperature: float = 1.0) -> list[dict]:
    """Rows of ``ot`` and ``kseq`` per n ∈ :data:`OT_NS` on :func:`real_positions` (B = 1 per call):
    median, 90th percentile and maximum ms per position."""
    p, q = real_positions(draft, temperature)
    g = torch.Generator().manual_seed(0)
    rows = []
    for n in OT_NS:
        for name in ("ot", "kseq"):
            v = get_verifier(name)
            times = []
            for i in tqdm(range(p.shape[0]), desc=f"{name} n={n} on real positions", leave=False):
                pi, qi = p[i:i + 1], q[i:i + 1]
                d = sample_drafts(qi, n, DraftLaw.IID, g)
                v.verify(pi, qi, d, g)  # untimed: the same drafts, so the timed call is not the first
                t0 = time.perf_counter()
                v.verify(pi, qi, d, g)
                times.append((time.perf_counter() - t0) * 1e3)
            med = statistics.median(times)
            rows.append({"verifier": name, "law": "iid", "dist": f"real:{draft}:T={temperature:g}", "B": 1, "n": n,
                         "ms_per_call": med, "ms_per_position": med, "positions": len(times),
                         "p90_ms": float(np.percentile(times, 90)), "max_ms": max(times)})
    return rows


def measure(quick: bool = False, only: str | None = None) -> list[dict]:
    """Rows of every verifier of :data:`CONFIGS` then of ``ot`` (:func:`measure_ot`); ``only``: one name."""
    batches = (1, 64)
    repeats = 5 if quick else 30
    warmup = 2 if quick else 5
    jobs = [(c, B, n) for c in CONFIGS for B in batches for n in c[3] if only in (None, c[0])]
    rows = []
    for (name, params, law, _), B, n in tqdm(jobs, desc="verifier speed"):
        v = get_verifier(name, **params)
        p, q = _inputs(B)
        g = torch.Generator().manual_seed(1)
        drafts = [sample_drafts(q, n, law, g) for _ in range(warmup + repeats)]
        times = []
        for i, d in enumerate(drafts):
            t0 = time.perf_counter()
            v.verify(p, q, d, g)
            dt = time.perf_counter() - t0
            if i >= warmup:
                times.append(dt)
        med = statistics.median(times) * 1e3
        rows.append({"verifier": name, "law": law.value, "B": B, "n": n, "ms_per_call": med,
                     "ms_per_position": med / B, "repeats": repeats})
    if only in (None, "ot"):
        rows += measure_ot(quick)
    return rows


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``specot bench verifier-speed``."""
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--out", default=None, help="write results as JSON to this file")
    ap.add_argument("--force", action="store_true", help="replace an existing --out file this benchmark did not write")
    ap.add_argument("--verifier", default=None, choices=[c[0] for c in CONFIGS] + ["ot"],
                    help="time only this verifier (default: all)")
    ap.add_argument("--real", default=None, metavar="DRAFT",
                    help="also time ot and kseq on the embedded target's and this draft model's real distributions")
    ap.add_argument("--threads", type=count(1, MAX_THREADS), default=1,
                    help="torch intra-op threads (default 1: per-position latency, stable on a shared CPU)")


def run(args: argparse.Namespace) -> int:
    """``specot bench verifier-speed``: time every verifier; print the table, write JSON with ``--out``."""
    check_output(args.out, "--out", force=args.force, ours=json_has(benchmark="verifier-speed"))
    torch.set_num_threads(args.threads)
    rows = measure(args.quick, only=args.verifier)
    if args.real:
        rows += measure_real(args.real)
    print(f"{'verifier':<12}{'law':<9}{'B':>4}{'n':>3}{'ms/call':>10}{'ms/pos':>10}  {'distribution (ot)'}")
    for r in rows:
        print(f"{r['verifier']:<12}{r['law']:<9}{r['B']:>4}{r['n']:>3}{r['ms_per_call']:>10.3f}"
              f"{r['ms_per_position']:>10.4f}  {r.get('dist', '')}")
    meta = {"V": V, "torch": torch.__version__, "threads": torch.get_num_threads(), "machine": platform.machine(),
            "processor": platform.processor() or platform.platform()}

    meta["environment"] = run_info()
    if args.out:
        write_json(args.out, {"benchmark": "verifier-speed", "meta": meta, "results": rows})
    return 0
