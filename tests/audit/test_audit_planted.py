"""Planted defects: the audit catches five classic exactness bugs of speculative decoding, planted
by small wrappers around specot's engine on a tiny random target (V = 8, so the exact law is
computable), and passes specot's exact verifiers.

Rates: every audit runs at family-wise false-failure rate alpha = 1e-3 with fixed seeds, so the
tests are deterministic; with random seeds an exact verifier would be failed with probability at
most 1e-3 per audit (Holm), and each planted defect's deviation is far above the run's detectable
TV (checked: the failing position's TV interval lies above its null level).
"""

from __future__ import annotations

import pytest
import torch

from specot.audit.adapters import SpecotAdapter
from specot.audit.run import audit_sampling
from specot.drafting import ModelDrafter
from specot.drafting.base import DraftTree, Drafter
from specot.sampling import SamplingConfig, draw_uniforms, sample_categorical, standardize
from specot.verifiers import SpeculativeVerifier, VerifyOutput, residual_distribution

from model_helpers import tiny_lm

V = 8
PROMPT = [1, 5, 3, 7]
N = 1500
ALPHA = 1e-3


@pytest.fixture(scope="module")
def models():
    return tiny_lm(0, vocab=V), tiny_lm(1, vocab=V)


def _audit(models, sampling, *, verifier=None, drafter=None, target=None, method="speculative", memo=True):
    target_model, draft_model = models
    clean = SpecotAdapter(target_model, None, "plain")  # the exact law, from the unwrapped target
    ad = SpecotAdapter(target if target is not None else target_model,
                       drafter if drafter is not None else ModelDrafter(draft_model), method,
                       gamma=2, memo=memo, verifier=verifier)
    return audit_sampling(ad, sampling, PROMPT, k=3, samples=N, alpha=ALPHA, law_from=clean, min_prefix=40)


def _assert_caught(row):
    v = row.verdict
    assert not v.exact, (v.min_adjusted_pvalue, [p.tv for p in v.positions])
    worst = min(v.positions, key=lambda s: s.min_adjusted_pvalue)
    assert worst.tv_low > worst.tv_null95  # a real deviation, above the plug-in's null level
    assert worst.detectable_tv < 0.25


# --------------------------------------------------------------------------- planted verifiers
class NoResidual(SpeculativeVerifier):
    """(a) On rejection, samples p instead of norm(max(p − q, 0))."""

    def verify(self, p, q, drafts, generator=None):
        x = drafts[:, 0]
        px, qx = p.gather(-1, x[:, None])[:, 0], q.gather(-1, x[:, None])[:, 0]
        accept = draw_uniforms(x.shape, generator) * qx < px
        y = sample_categorical(p, generator)
        return VerifyOutput(torch.where(accept, x, y), torch.where(accept, 0, -1))


class SharedUniform(SpeculativeVerifier):
    """(b) The residual is drawn by inverse CDF with the SAME uniform the drafter drew the draft
    with (reconstructed: uniform within the draft's CDF interval of q, its law given the draft)."""

    def verify(self, p, q, drafts, generator=None):
        x = drafts[:, 0]
        px, qx = p.gather(-1, x[:, None])[:, 0], q.gather(-1, x[:, None])[:, 0]
        accept = draw_uniforms(x.shape, generator) * qx < px
        lo = q.cumsum(-1).gather(-1, x[:, None])[:, 0] - qx
        u = lo + draw_uniforms(x.shape, generator) * qx  # the draft's own uniform
        res = residual_distribution(p, q)
        y = torch.searchsorted(res.cumsum(-1), u[:, None].to(res.dtype))[:, 0].clamp_max(p.shape[-1] - 1)
        return VerifyOutput(torch.where(accept, x, y), torch.where(accept, 0, -1))


class MismatchDrafter(Drafter):
    """Draws a chain from q under ``draw`` but hands the verifier q under ``report``: (c)
    temperature applied to p (and the draw) but not to the reported q; (d) top-p likewise."""

    def __init__(self, model, draw, report, gamma=2):
        super().__init__()
        self.model, self.draw, self.report, self.gamma, self.name = model, draw, report, gamma, "mismatch"

    @property
    def vocab_size(self):
        return V

    def propose(self, context, gamma, sampling, generator=None):
        toks, qs = [], []
        for _ in range(min(gamma, self.gamma)):
            z = self.model.logits_after(list(context) + toks)[-1:].double()
            toks.append(int(sample_categorical(standardize(z, self.draw(sampling)), generator)[0]))
            qs.append(standardize(z, self.report(sampling)))
        tree = DraftTree.chain(int(context[-1]), toks, torch.cat(qs) if qs else None)
        tree.draft_calls = len(toks)
        return tree


class StaleKV:
    """(e) The target's KV rollback keeps a rejected draft: after a rejection the slot of the
    correction token still holds the rejected draft's keys and values."""

    def __init__(self, real):
        self.real, self.last = real, None

    def __getattr__(self, name):
        return getattr(self.real, name)

    def reset(self):
        self.last = None
        self.real.reset()

    def logits_after(self, context, extra=(), **kw):
        ctx = [int(t) for t in context]
        n = len(ctx)
        if self.last is not None and len(self.last) >= n and self.last[:n - 1] == ctx[:n - 1] and self.last[n - 1] != ctx[-1]:
            ctx[-1] = self.last[n - 1]  # the stale entry
        self.last = ctx + [int(t) for t in extra]
        return self.real.logits_after(ctx, extra, **kw)


# --------------------------------------------------------------------------- the tests
def test_a_verifier_that_skips_the_residual_is_caught(models):
    _assert_caught(_audit(models, SamplingConfig(1.0), verifier=NoResidual()))


def test_draft_and_residual_sharing_one_uniform_is_caught(models):
    _assert_caught(_audit(models, SamplingConfig(1.0), verifier=SharedUniform()))


def test_temperature_on_p_but_not_on_q_is_caught(models):
    drafter = MismatchDrafter(models[1], draw=lambda s: s, report=lambda s: SamplingConfig(1.0))
    _assert_caught(_audit(models, SamplingConfig(0.5), drafter=drafter))


def test_top_p_on_p_but_not_on_q_is_caught(models):
    drafter = MismatchDrafter(models[1], draw=lambda s: s, report=lambda s: SamplingConfig(s.temperature))
    _assert_caught(_audit(models, SamplingConfig(1.0, top_p=0.7), drafter=drafter))


def test_a_kv_rollback_that_keeps_a_rejected_token_is_caught(models):
    _assert_caught(_audit(models, SamplingConfig(1.0), target=StaleKV(models[0]), memo=False))


@pytest.mark.parametrize("method", ["speculative", "kseq", "rrs", "importance", "greedy"])
def test_exact_specot_verifiers_pass(models, method):
    row = _audit(models, SamplingConfig(1.0), method=method)
    assert row.verdict.exact, row.verdict.min_adjusted_pvalue
    assert row.verdict.detectable_tv < 0.2


def test_the_kv_path_unmemoized_passes(models):
    row = _audit(models, SamplingConfig(0.8, top_k=5), memo=False)
    assert row.verdict.exact, row.verdict.min_adjusted_pvalue
