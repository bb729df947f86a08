"""Block verification vs token-level verification on real decoding — timing-free.

For each draft, prompt set, temperature T and draft length γ, the embedded target decodes every
prompt twice with the same seed: once with token-level speculative sampling (``speculative``,
Leviathan et al. 2023) and once with block verification (``block``, Sun et al., ICLR 2025,
arXiv 2403.10444). Draft trees (K i.i.d. sequences of length L from a draft model) are decoded with
token-level k-Seq (``kseq``) and with traversal verification (``traversal``, Weng et al.,
NeurIPS 2025). Only counts are measured, never wall-clock speed.

Two estimates of the block efficiency (tokens committed per target pass = accepted drafts + 1):

* **realised** — ``new_tokens / target_calls`` of each run (every target pass verifies one draft
  chain or tree, the prefill included), with a 95% CI over runs (prompt × seed) and the paired
  per-run difference block − token-level;
* **Rao–Blackwellised (RB), paired** — at every verification pass, the exact expected number of
  accepted drafts given the drafted chain/tree is computed for BOTH rules on the SAME drafts
  (token-level: ``Σ_i Π_{j≤i} min(1, p_{j−1}(x_j)/q_{j−1}(x_j))``; block:
  :func:`specot.verifiers.block.block_expected_accepted`; k-Seq on a tree: the probability of
  reaching each node through accepted drafts; traversal: :func:`traversal_output_law`). Both
  verifiers are lossless, so the contexts follow the target's law under either; the per-pass
  difference removes the drafting noise. For chains the passes of both runs are used; for trees the
  passes of the traversal runs. CIs are over runs.

Deterministic drafters (``ngram``, ``suffix`` as one chain: a one-hot q) are included as a check:
with a one-hot q every lossless rule accepts the prefix x^i with probability at most Π p, which
token-level already reaches, so their expected gain is exactly 0.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/eval_block_verification.py \\
        --out runs/block_verification.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor

from specot.api import load_drafter, load_target
from specot.plan import make_plan
from specot.drafting import ModelDrafter
from specot.engine import GenerationConfig, speculative_generate, tree_generate
from specot_lab.bench.acceptance import mean_ci as lab_mean_ci
from specot_lab.bench.runinfo import run_info
from specot.sampling import SamplingConfig
from specot.verifiers import get_verifier
from specot.verifiers.base import SequenceVerifier, TreeVerifyOutput, Verifier, VerifyOutput
from specot.verifiers.block import block_expected_accepted
from specot.verifiers.kseq import kseq_rho
from specot.verifiers.traversal import traversal_output_law
from specot_lab.corpus import describe_prompt_set, load_prompts



# ----------------------------------------------------------------------------- RB recording
def _token_level_expected(p: Tensor, q: Tensor, x: Tensor) -> float:
    """``E[τ | chain]`` of token-level speculative sampling: ``Σ_i Π_{j≤i} a_j`` (rows ``0..k−1``)."""
    px = p.double().gather(-1, x[:, None]).squeeze(-1)
    qx = q.double().gather(-1, x[:, None]).squeeze(-1)
    a = (px / qx.clamp_min(torch.finfo(torch.float64).tiny)).clamp_max(1.0)
    return float(torch.cumprod(a, 0).sum())


def _block_expected(p: Tensor, q: Tensor, x: Tensor) -> float:
    """``E[τ | chain]`` of block verification; ``p, q`` hold rows ``0..k−1`` or ``0..k`` (the last
    row only shapes the extra token, not τ: a copy stands in when it is missing)."""
    k = x.shape[0]
    if p.shape[0] == k:
        p = torch.cat([p, p[-1:]])
        q = torch.cat([q, q[-1:]])
    return float(block_expected_accepted(p.double(), q.double(), x))


class Recorder:
    """Per-pass paired expectations ``(E_token_level[τ], E_block_or_traversal[τ])``."""

    def __init__(self) -> None:
        self.pairs: list[tuple[float, float]] = []


class RecordingTokenVerifier(Verifier):
    """Wraps a token-level verifier on a draft CHAIN (``drafts [k, 1]``): records both expectations."""

    def __init__(self, inner: Verifier, rec: Recorder) -> None:
        self.inner, self.rec = inner, rec
        self.name = inner.name  # type: ignore[misc]
        self.valid_laws = inner.valid_laws  # type: ignore[misc]

    def check_construction(self, law: Any, n: int) -> None:
        self.inner.check_construction(law, n)

    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None) -> VerifyOutput:
        if drafts.shape[1] == 1:
            x = drafts[:, 0].to(torch.int64)
            self.rec.pairs.append((_token_level_expected(p, q, x), _block_expected(p, q, x)))
        return self.inner.verify(p, q, drafts, generator)

    def output_distribution(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        return self.inner.output_distribution(p, q, drafts)

    def acceptance(self, p: Tensor, q: Tensor, n: int, **kwargs: object) -> Any:
        return self.inner.acceptance(p, q, n, **kwargs)


def _kseq_tree_expected(p: Tensor, q: Tensor, tokens: list[int], parents: list[int],
                        drafts: Mapping[int, Sequence[int]]) -> float:
    """``E[accepted depth | tree]`` of token-level k-Seq on an i.i.d. draft tree, as the engine runs
    it: at node u with draws ``d_1..d_m`` (with multiplicity) draft j is accepted with probability
    ``a_j = min(1, p(d_j) / (ρ q(d_j)))`` in order, and the walk moves to the child of the first
    accepted draft (a correction ends the walk even if it equals a draft)."""
    children: dict[int, dict[int, int]] = {}
    for v in range(1, len(tokens)):
        children.setdefault(parents[v], {})[tokens[v]] = v
    reach = {0: 1.0}
    total = 0.0
    for u in sorted(drafts):  # parents precede children
        if u not in reach or reach[u] == 0.0:
            continue
        d = torch.tensor([list(drafts[u])], dtype=torch.int64)
        pu, qu = p[u:u + 1].double(), q[u:u + 1].double()
        rho, _ = kseq_rho(pu, qu, d.shape[1])
        a = (pu.gather(-1, d) / (rho[:, None] * qu.gather(-1, d))).clamp_max(1.0)[0]  # [m]
        before = torch.cumprod(torch.cat([torch.ones(1, dtype=torch.float64), 1.0 - a[:-1]]), 0)
        first = (before * a).tolist()
        for tok, pr in zip(drafts[u], first):
            c = children[u][int(tok)]
            reach[c] = reach.get(c, 0.0) + reach[u] * pr
            total += reach[u] * pr
    return total


class RecordingSequenceVerifier(SequenceVerifier):
    """Wraps ``block`` (chain) or ``traversal`` (tree): records token-level and its own expectation."""

    def __init__(self, inner: SequenceVerifier, rec: Recorder) -> None:
        self.inner, self.rec = inner, rec
        self.name = inner.name  # type: ignore[misc]
        self.valid_laws = inner.valid_laws  # type: ignore[misc]
        self.chains_only = inner.chains_only  # type: ignore[misc]
        self.max_drafts = inner.max_drafts  # type: ignore[misc]

    def check_construction(self, law: Any, n: int) -> None:
        self.inner.check_construction(law, n)

    def verify_tree(self, p: Tensor, q: Tensor, tokens: Tensor, parents: Tensor,
                    generator: torch.Generator | None = None, *,
                    drafts: Mapping[int, Sequence[int]] | None = None) -> TreeVerifyOutput:
        toks, pars = tokens.tolist(), parents.tolist()
        if self.inner.name == "block":
            x = tokens[1:].to(torch.int64)
            self.rec.pairs.append((_token_level_expected(p[:-1], q[:-1], x), _block_expected(p, q, x)))
        else:
            dr = drafts if drafts is not None else {u: [toks[v] for v in range(1, len(toks)) if pars[v] == u]
                                                    for u in set(pars[1:])}
            law = traversal_output_law(p, q, tokens, pars, "iid", dr).sum(-1)  # P(walk ends at v)
            depth = [0] * len(toks)
            for v in range(1, len(toks)):
                depth[v] = depth[pars[v]] + 1
            trav = float((law * torch.tensor(depth, dtype=torch.float64)).sum())
            self.rec.pairs.append((_kseq_tree_expected(p, q, toks, pars, dr), trav))
        return self.inner.verify_tree(p, q, tokens, parents, generator, drafts=drafts)


# ----------------------------------------------------------------------------- statistics
def mean_ci(x: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the mean and its 95% Student-t confidence interval."""
    return lab_mean_ci(x, student_t=True)


def _summary(runs: list[dict[str, Any]], base: str, new: str) -> dict[str, Any]:
    """Realised and RB block efficiency of ``base`` (token-level) and ``new`` with paired gains."""
    by = {(r["prompt"], r["seed"], r["verifier"]): r for r in runs}
    keys = sorted({(r["prompt"], r["seed"]) for r in runs})
    out: dict[str, Any] = {}
    for v in (base, new):
        rs = [by[k + (v,)] for k in keys if k + (v,) in by]
        be = [r["new_tokens"] / r["target_calls"] for r in rs]
        m, lo, hi = mean_ci(be)
        out[v] = {"runs": len(rs), "block_efficiency_pooled": sum(r["new_tokens"] for r in rs) / max(1, sum(r["target_calls"] for r in rs)),
                  "block_efficiency_mean": m, "block_efficiency_ci95": [lo, hi],
                  "mean_accepted_per_pass": sum(r["accepted"] for r in rs) / max(1, sum(r["target_calls"] for r in rs)),
                  "target_calls": sum(r["target_calls"] for r in rs), "new_tokens": sum(r["new_tokens"] for r in rs)}
    diffs = [by[k + (new,)]["new_tokens"] / by[k + (new,)]["target_calls"] - by[k + (base,)]["new_tokens"] / by[k + (base,)]["target_calls"]
             for k in keys if k + (new,) in by and k + (base,) in by]
    dm, dlo, dhi = mean_ci(diffs)
    b0 = out[base]["block_efficiency_mean"]
    out["realised"] = {"diff_mean": dm, "diff_ci95": [dlo, dhi], "relative_gain": dm / b0 if b0 else None,
                       "relative_gain_ci95": [dlo / b0, dhi / b0] if b0 else None, "pairs": len(diffs)}
    # RB: per run, 1 + Σ E[τ] / passes for both rules on the run's own drafts
    rb_runs = [r for r in runs if r.get("rb_passes")]
    t_be = [1.0 + r["rb_token_level_sum"] / r["target_calls"] for r in rb_runs]
    n_be = [1.0 + r["rb_new_sum"] / r["target_calls"] for r in rb_runs]
    d = [b - a for a, b in zip(t_be, n_be)]
    tm, tlo, thi = mean_ci(t_be)
    nm, nlo, nhi = mean_ci(n_be)
    rm, rlo, rhi = mean_ci(d)
    n_draft = sum(r["rb_draft_passes"] for r in rb_runs)
    mins = [r["rb_min_pass_diff"] for r in rb_runs if r["rb_min_pass_diff"] is not None]
    out["rb"] = {"runs": len(rb_runs), "passes": sum(r["rb_passes"] for r in rb_runs),
                 "verification_passes_with_drafts": n_draft,
                 base: tm, f"{base}_ci95": [tlo, thi], new: nm, f"{new}_ci95": [nlo, nhi],
                 "diff_mean": rm, "diff_ci95": [rlo, rhi],
                 "relative_gain": rm / tm if tm else None, "relative_gain_ci95": [rlo / tm, rhi / tm] if tm else None,
                 "min_per_pass_diff": min(mins) if mins else None,
                 "share_of_passes_block_below_token_level":
                     sum(r["rb_passes_new_below"] for r in rb_runs) / n_draft if n_draft else None}
    return out


# ----------------------------------------------------------------------------- runs
def _drafter(name: str, tgt: Any, cache: dict[str, Any]) -> Any:
    """Model drafts are loaded once; the stateful model-free drafters (suffix calibrates itself on
    past outcomes) are rebuilt for every run so that both verifiers see the same drafter."""
    if name in ("suffix", "ngram"):
        return load_drafter(name, tgt)
    if name not in cache:
        cache[name] = load_drafter(name, tgt)
    return cache[name]


def _pass_stats(pairs: list[tuple[float, float]]) -> dict[str, Any]:
    """Per-run aggregates of the per-pass differences ``E_new[τ] − E_token_level[τ]`` (the same
    drafts): how many passes verified drafts, the smallest difference, how many were negative (a
    single chain or tree can favour token-level; the gain holds in expectation over the drafts)."""
    d = [round(b, 6) - round(a, 6) for a, b in pairs]
    return {"rb_draft_passes": len(d), "rb_min_pass_diff": min(d) if d else None,
            "rb_passes_new_below": sum(1 for x in d if x < -1e-9)}


def run_job(tgt: Any, job: dict[str, Any], prompts: list[str], seeds: list[int], max_new: int,
            cache: dict[str, Any]) -> list[dict[str, Any]]:
    runs = []
    tree = job["tree"]
    base, new = ("kseq", "traversal") if tree else ("speculative", "block")
    for i, prompt in enumerate(prompts):
        ids = tgt.encode_prompt(prompt)
        for s in seeds:
            seed = 1000 * s + i
            for vname in (base, new):
                drafter = _drafter(job["draft"], tgt, cache)
                rec = Recorder()
                inner = get_verifier(vname)
                record = vname == new or not tree  # chains: record on both runs; trees: traversal runs
                cfg = GenerationConfig(max_new_tokens=max_new, gamma=job["gamma"], seed=seed,
                                       sampling=SamplingConfig(job["temperature"]))
                if tree:
                    K, L = (int(x) for x in tree.lower().split("x"))
                    spec = make_plan(drafter, verifier=vname, drafts=K, gamma=L).tree
                    ver: Any = RecordingSequenceVerifier(inner, rec) if vname == new else inner
                    res = tree_generate(tgt, drafter, ids, spec, cfg, verifier=ver)
                else:
                    ver = (RecordingSequenceVerifier(inner, rec) if isinstance(inner, SequenceVerifier)
                           else RecordingTokenVerifier(inner, rec))
                    res = speculative_generate(tgt, drafter, ids, cfg, verifier=ver)
                st = res.stats
                runs.append({"prompt": i, "prompt_sha": hashlib.sha1(prompt.encode()).hexdigest()[:12], "seed": seed,
                             "verifier": vname, "prompt_tokens": len(ids),
                             "new_tokens": st.new_tokens, "target_calls": st.target_calls, "accepted": st.accepted,
                             "drafted": st.drafted, "accepted_lengths": st.accepted_lengths,
                             "rb_passes": st.target_calls if record else 0,
                             "rb_token_level_sum": sum(a for a, _ in rec.pairs) if record else None,
                             "rb_new_sum": sum(b for _, b in rec.pairs) if record else None,
                             **_pass_stats(rec.pairs if record else [])})
    return runs


def _fmt_ci(ci: Sequence[float] | None, nd: int = 3, pct: bool = False) -> str:
    if not ci:
        return "–"
    f = 100.0 if pct else 1.0
    return f"[{ci[0] * f:.{nd}f}, {ci[1] * f:.{nd}f}]"


def pooled(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The jobs pooled over prompt sets: one summary per (draft, T, γ / tree)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for j in out["jobs"]:
        groups.setdefault((j["draft"], j["temperature"], j["gamma"], j["tree"]), []).append(j)
    rows = []
    for (d, t, g, tree), js in groups.items():
        runs, seen = [], set()
        for j in js:  # `mixed` round-robins over `heldout` (and others): a prompt run twice with one seed counts once
            for r in j["runs"]:
                if (r["prompt_sha"], r["seed"], r["verifier"]) not in seen:
                    seen.add((r["prompt_sha"], r["seed"], r["verifier"]))
                    runs.append({**r, "prompt": f"{r['prompt_sha']}"})
        base, new = js[0]["verifiers"]
        rows.append({"draft": d, "temperature": t, "gamma": g, "tree": tree, "prompt_sets": [j["prompt_set"] for j in js],
                     "verifiers": [base, new], "summary": _summary(runs, base, new)})
    return rows


def _md_rows(items: list[dict[str, Any]], set_col: bool) -> list[str]:
    lines = []
    for j in items:
        s = j["summary"]
        base, new = j["verifiers"]
        rb = s["rb"]
        rg = s["realised"]
        shape = f"tree {j['tree']}" if j["tree"] else f"γ={j['gamma']}"
        share = rb["share_of_passes_block_below_token_level"]
        where = f"{j['prompt_set_short']} | " if set_col else ""
        lines.append(
            f"| {j['draft']} | {where}{j['temperature']:g} | {shape} | {base} → {new} | {s[base]['runs']} | "
            f"{s[base]['block_efficiency_mean']:.3f} {_fmt_ci(s[base]['block_efficiency_ci95'])} | "
            f"{s[new]['block_efficiency_mean']:.3f} {_fmt_ci(s[new]['block_efficiency_ci95'])} | "
            f"{100 * (rg['relative_gain'] or 0):+.1f}% {_fmt_ci(rg['relative_gain_ci95'], 1, True)} | "
            f"{rb[base]:.3f} | {rb[new]:.3f} | {100 * (rb['relative_gain'] or 0):+.2f}% "
            f"{_fmt_ci(rb['relative_gain_ci95'], 2, True)} | {'–' if share is None else f'{share:.2f}'} |")
    return lines


def markdown(out: dict[str, Any]) -> str:
    lines = [f"<!-- {out['command']} -->", "",
             "# Block / traversal verification vs token-level verification on real decoding",
             "",
             f"Target {out['target']} ({out['dtype']}), {out['max_new_tokens']} new tokens per run, seeds "
             f"{out['seeds']} (per prompt i: 1000·seed + i, the same for both verifiers). Block efficiency = tokens per "
             "target pass (accepted drafts + 1). *Realised*: new_tokens / target_calls per run, mean over runs with a 95% "
             "CI; gain = paired per-run difference ÷ token-level mean. *RB*: exact E[accepted | drafts] for both rules on "
             "the same drafted chains/trees at every pass (chains: passes of both runs; trees: passes of the traversal "
             "runs), 95% Student-t CI over runs. Counts only — no timing. The pooled rows count a prompt that "
             "appears in two sets (`mixed` round-robins over `heldout`, ...) once.",
             "",
             "Per job (prompt set):", "",
             "| draft | prompt set | T | γ / tree | verifiers | runs | BE token-level [95% CI] | BE new [95% CI] | "
             "realised gain [95% CI] | RB BE token-level | RB BE new | RB gain [95% CI] | share of passes new < token-level |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += _md_rows(out["jobs"], True)
    lines += ["", "Pooled over the prompt sets:", "",
              "| draft | T | γ / tree | verifiers | runs | BE token-level [95% CI] | BE new [95% CI] | realised gain [95% CI] | "
              "RB BE token-level | RB BE new | RB gain [95% CI] | share of passes new < token-level |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += _md_rows(out.get("pooled", []), False)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafts", default="distilled,suffix,ngram")
    ap.add_argument("--sets", default="mixed,code,heldout")
    ap.add_argument("--n-prompts", type=int, default=6)
    ap.add_argument("--temperatures", default="1.0,0.7")
    ap.add_argument("--gammas", default="3,5")
    ap.add_argument("--trees", default="2x3", help="KxL i.i.d. trees for model drafts (kseq vs traversal); '' for none")
    ap.add_argument("--det-n-prompts", type=int, default=3, help="prompts per set for the deterministic drafters")
    ap.add_argument("--det-temperatures", default="1.0")
    ap.add_argument("--det-gammas", default="5")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="runs/block_verification.json", help="JSON path (default runs/block_verification.json)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    floats = lambda s: [float(x) for x in s.split(",") if x.strip()]  # noqa: E731
    ints = lambda s: [int(x) for x in s.split(",") if x.strip()]  # noqa: E731
    seeds = ints(args.seeds)
    t0 = time.perf_counter()
    tgt = load_target(None, dtype=args.dtype)
    cache: dict[str, Any] = {}
    jobs = []
    for set_name in [s for s in args.sets.split(",") if s]:
        for d in [d for d in args.drafts.split(",") if d]:
            det = d in ("ngram", "suffix")
            temps = floats(args.det_temperatures) if det else floats(args.temperatures)
            for t in temps:
                for g in (ints(args.det_gammas) if det else ints(args.gammas)):
                    jobs.append({"prompt_set": set_name, "draft": d, "temperature": t, "gamma": g, "tree": None,
                                 "n_prompts": args.det_n_prompts if det else args.n_prompts})
                if not det and isinstance(_drafter(d, tgt, cache), ModelDrafter):
                    for tr in [x for x in args.trees.split(",") if x]:
                        jobs.append({"prompt_set": set_name, "draft": d, "temperature": t, "gamma": int(tr.lower().split("x")[1]),
                                     "tree": tr, "n_prompts": args.n_prompts})
    argv_s = sys.argv[1:] if argv is None else argv
    out: dict[str, Any] = {
        "benchmark": "block_verification", "schema_version": 1,
        "command": "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/eval_block_verification.py " + " ".join(shlex.quote(a) for a in argv_s),
        "target": tgt.name, "dtype": args.dtype, "max_new_tokens": args.max_new_tokens, "seeds": seeds,
        "seed_rule": "GenerationConfig.seed = 1000 * seed + prompt_index, identical for both verifiers of a pair",
        "torch_threads": torch.get_num_threads(), "environment": run_info(), "jobs": []}
    outp = Path(args.out)
    outp.parent.mkdir(parents=True, exist_ok=True)
    for k, job in enumerate(jobs):
        tj = time.perf_counter()
        prompts = load_prompts(job["prompt_set"], job["n_prompts"])
        runs = run_job(tgt, job, prompts, seeds, args.max_new_tokens, cache)
        base, new = ("kseq", "traversal") if job["tree"] else ("speculative", "block")
        summ = _summary(runs, base, new)
        short = Path(job["prompt_set"]).stem if job["prompt_set"].endswith(".jsonl") else job["prompt_set"]
        out["jobs"].append({**job, "prompt_set_short": short, "prompt_set_description": describe_prompt_set(job["prompt_set"]),
                            "prompts": len(prompts), "verifiers": [base, new], "summary": summ, "runs": runs,
                            "elapsed_s": time.perf_counter() - tj})
        rb = summ["rb"]
        print(f"[{k + 1}/{len(jobs)}] {job['draft']} {short} T={job['temperature']:g} "
              f"{'tree ' + job['tree'] if job['tree'] else 'γ=' + str(job['gamma'])}: "
              f"BE {base} {summ[base]['block_efficiency_mean']:.3f} {new} {summ[new]['block_efficiency_mean']:.3f} "
              f"(realised {100 * (summ['realised']['relative_gain'] or 0):+.1f}%), RB {rb[base]:.3f} → {rb[new]:.3f} "
              f"({100 * (rb['relative_gain'] or 0):+.2f}% {_fmt_ci(rb['relative_gain_ci95'], 2, True)}) "
              f"[{time.perf_counter() - tj:.0f}s, total {(time.perf_counter() - t0) / 60:.1f} min]", file=sys.stderr, flush=True)
        out["elapsed_s"] = time.perf_counter() - t0
        outp.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")  # partial results survive
    out["pooled"] = pooled(out)
    out["environment_end"] = {"load_average": run_info().get("load_average")}
    outp.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    outp.with_suffix(".md").write_text(markdown(out), encoding="utf-8")
    print(markdown(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
