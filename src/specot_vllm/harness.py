"""specot's exactness harness applied to vLLM's rejection sampler, on a small vocabulary.

A crafted speculative step (Leviathan et al. 2023, Algorithm 1): vocabulary ``V``, a chain of two
drafts per request, ``N`` independent requests in ONE call of vLLM's ``RejectionSampler`` (the
module vLLM's model runner calls, with its own bonus-token sampler and its temperature transform):

* request i drafts ``d1 ~ q0`` and ``d2 ~ q1[d1]`` (``draft="sampled"``, draft law handed over as
  vLLM's ``draft_probs``) or fixed tokens (``draft="fixed"``, no draft law: n-gram-style);
* the target logits are ``z0`` at position 0, ``z1[d1]`` at position 1 and ``z2`` at the bonus
  position; the target law at temperature T is ``p = softmax(z / T)``.

A lossless verifier emits a first token distributed as ``p0`` and, once the first draft was
accepted (``t0 = d1``), a second token distributed as ``p1[d1]``. :func:`check` counts both over the
N requests and runs Pearson chi-square goodness-of-fit tests against those laws
(``scipy.stats.chisquare``, expected counts ≥ 5 after merging the rare cells); a check fails when
its p-value is below ``alpha`` (the false-failure rate of one check).

``python -m specot_vllm.harness`` runs it against vLLM's stock sampler on the CPU (reproducing the
defect the plugin fixes), the fixed one, and specot's verifiers, and prints JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from dataclasses import dataclass
from typing import Any, Iterator

import torch

__all__ = ["Case", "make_case", "run_step", "check", "stock_vllm", "main"]


@dataclass(frozen=True)
class Case:
    """A crafted speculative step (module docstring): logits ``z0 [V]``, ``z1 [V, V]`` (row = d1),
    ``z2 [V]``; draft laws ``q0 [V]``, ``q1 [V, V]``; ``fixed`` drafts ``(d1, d2)``."""

    z0: torch.Tensor
    z1: torch.Tensor
    z2: torch.Tensor
    q0: torch.Tensor
    q1: torch.Tensor
    fixed: tuple[int, int]


def make_case(vocab: int = 5, seed: int = 0) -> Case:
    """A random case on ``vocab`` tokens (every token with mass ≥ 2 %, so chi-square cells fill)."""
    g = torch.Generator().manual_seed(seed)
    z = lambda *s: torch.randn(*s, generator=g) * 0.8  # noqa: E731
    q0 = torch.softmax(z(vocab), -1)
    q1 = torch.softmax(z(vocab, vocab), -1)
    z0, z1 = z(vocab), z(vocab, vocab)
    d1 = int(torch.argmax(torch.softmax(z0, -1) * q0))
    d2 = int(torch.argmax(torch.softmax(z1[d1], -1) * q1[d1]))
    return Case(z0=z0, z1=z1, z2=z(vocab), q0=q0, q1=q1, fixed=(d1, d2))


@contextlib.contextmanager
def stock_vllm() -> Iterator[None]:
    """Run vLLM's own rejection sampler as shipped (the stock CPU expand kernel, no specot
    verifier) inside the block; the plugin's replacements are back after it."""
    from .adapter import stock

    with stock():
        yield


def _metadata(n: int, temperature: float, generators: dict[int, torch.Generator]):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    greedy = temperature == 0
    z = torch.zeros(n)
    return SamplingMetadata(
        temperature=None if greedy else torch.full((n,), float(temperature)), all_greedy=greedy, all_random=not greedy,
        top_p=None, top_k=None, generators=generators, max_num_logprobs=None, no_penalties=True,
        prompt_token_ids=None, frequency_penalties=z, presence_penalties=z, repetition_penalties=torch.ones(n),
        output_token_ids=[[] for _ in range(n)], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=LogitsProcessors())


def run_step(case: Case, n: int, temperature: float, draft: str = "sampled", seed: int = 0,
             config: Any = None) -> torch.Tensor:
    """One call of vLLM's ``RejectionSampler`` on ``n`` requests of ``case``: emitted tokens
    ``[n, 3]`` (``-1`` after the first rejection). The sampler is whatever this process has
    (with the plugin installed, or stock inside :func:`stock_vllm`), verifying with ``config``'s
    specot verifier (a :class:`specot_vllm.config.SpecotVllmConfig`; ``None``: vLLM's own).

    Raises:
        ValueError: ``draft`` not ``"sampled"`` / ``"fixed"``.
    """
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    from .adapter import attach_chain_verifier, register_worker_kernels

    if draft not in ("sampled", "fixed"):
        raise ValueError(f"draft must be 'sampled' or 'fixed', got {draft!r}")
    register_worker_kernels()
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed + 7919)  # the verifier's uniforms: a stream apart from the drafts'
    if draft == "sampled":
        d1 = torch.multinomial(case.q0, n, replacement=True, generator=g)
        d2 = torch.multinomial(case.q1[d1], 1, generator=g).squeeze(-1)
        probs = torch.stack([case.q0.expand(n, -1), case.q1[d1]], 1).reshape(2 * n, -1).contiguous()
    else:
        d1, d2 = torch.full((n,), case.fixed[0]), torch.full((n,), case.fixed[1])
        probs = None
    logits = torch.stack([case.z0.expand(n, -1), case.z1[d1], case.z2.expand(n, -1)], 1).reshape(3 * n, -1)
    i32 = dict(dtype=torch.int32)
    base = torch.arange(n, **i32) * 3
    meta = SpecDecodeMetadata(
        draft_token_ids=torch.stack([d1, d2], 1).reshape(-1).to(torch.int32), num_draft_tokens=[2] * n,
        cu_num_draft_tokens=torch.arange(1, n + 1, **i32) * 2, cu_num_sampled_tokens=torch.arange(1, n + 1, **i32) * 3,
        target_logits_indices=torch.stack([base, base + 1], 1).reshape(-1), bonus_logits_indices=base + 2,
        logits_indices=torch.arange(3 * n, **i32))
    sampler = RejectionSampler(Sampler())
    attach_chain_verifier(sampler, config)
    out = sampler(meta, probs, logits.contiguous().clone(), _metadata(n, temperature, {}))
    return out.sampled_token_ids.to(torch.int64)


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """(p-value, degrees of freedom) of Pearson's test, merging cells with expected count < 5."""
    from scipy.stats import chisquare

    total = float(counts.sum())
    order = torch.argsort(probs, descending=True)
    obs, exp, acc_o, acc_e = [], [], 0.0, 0.0
    for i in order.tolist():
        acc_o += float(counts[i])
        acc_e += float(probs[i]) * total
        if acc_e >= 5:
            obs.append(acc_o)
            exp.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 or acc_o > 0:
        if exp:
            obs[-1] += acc_o
            exp[-1] += acc_e
        else:
            obs, exp = [acc_o], [acc_e]
    if len(exp) < 2:
        return 1.0, 0
    scale = sum(obs) / sum(exp)
    res = chisquare(obs, [e * scale for e in exp])
    return float(res.pvalue), len(exp) - 1


def check(case: Case, out: torch.Tensor, temperature: float, draft: str = "sampled") -> dict:
    """Chi-square checks of the emitted tokens ``out [N, 3]`` against the target law (module
    docstring): ``{"first": (p-value, dof), "second": (p-value, dof), "accepted_first": rate}``."""
    T = temperature if temperature > 0 else 1e-6
    V = case.z0.numel()
    p0 = torch.softmax(case.z0.double() / T, -1)
    t0 = out[:, 0]
    first = _chi2(torch.bincount(t0.clamp_min(0), minlength=V)[:V].double(), p0)
    # second token where the first draft was accepted: t0 is the first draft and t1 was emitted
    d1 = case.fixed[0] if draft == "fixed" else int(torch.argmax(p0 * torch.softmax(case.q0.double(), -1)))
    rows = (t0 == d1) & (out[:, 1] >= 0)
    p1 = torch.softmax(case.z1[d1].double() / T, -1)
    second = _chi2(torch.bincount(out[rows, 1], minlength=V)[:V].double(), p1) if int(rows.sum()) else (1.0, 0)
    return {"first": first, "second": second, "accepted_first": float((out[:, 1] >= 0).double().mean())}


def main(argv: list[str] | None = None) -> int:
    """CLI: run the checks on vLLM stock / fixed / specot verifiers and print one JSON object."""
    ap = argparse.ArgumentParser(prog="python -m specot_vllm.harness", description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="requests per sampler call (default 20000)")
    ap.add_argument("--vocab", type=int, default=5)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--alpha", type=float, default=1e-3, help="false-failure rate of one check")
    args = ap.parse_args(argv)
    if args.n < 100 or args.vocab < 2 or not (math.isfinite(args.temperature) and args.temperature > 0):
        ap.error("--n must be >= 100, --vocab >= 2, --temperature a finite number > 0")
    from .adapter import install
    from .config import SpecotVllmConfig

    install()
    case = make_case(args.vocab)
    report = {}
    T = args.temperature
    for draft in ("sampled", "fixed"):
        with stock_vllm():
            report[f"vllm-stock/{draft}"] = check(case, run_step(case, args.n, T, draft), T, draft)
        report[f"vllm-fixed/{draft}"] = check(case, run_step(case, args.n, T, draft), T, draft)
        report[f"specot-speculative/{draft}"] = check(
            case, run_step(case, args.n, T, draft, config=SpecotVllmConfig("speculative")), T, draft)
    for v in report.values():
        v["exact"] = v["first"][0] >= args.alpha and v["second"][0] >= args.alpha
    print(json.dumps({"n": args.n, "vocab": args.vocab, "temperature": args.temperature, "alpha": args.alpha,
                      "results": report}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
