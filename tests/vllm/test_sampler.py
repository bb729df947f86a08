"""specot's chain verification on vLLM's flattened batch (no vLLM needed: runs in both environments).

Exactness: N independent requests of a crafted two-draft step on 5 tokens; the first emitted token
must follow p0 and, once the first draft was accepted, the second must follow p1[d1] (Pearson
chi-square, alpha = 1e-3 per check: a correct sampler fails one check with probability 0.1 %)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("specot_vllm")  # the integration's package (installed beside specot)

from specot_vllm.config import SpecotVllmConfig, parse_config  # noqa: E402
from specot_vllm.adapter import expand_batch_to_tokens  # noqa: E402
from specot_vllm.sampler import verify_chains  # noqa: E402
from specot.verifiers import VerifyOutput, get_verifier  # noqa: E402

V, N, ALPHA, T = 5, 20000, 1e-3, 0.7


def _case(seed=0):
    g = torch.Generator().manual_seed(seed)
    z0, z1, z2 = torch.randn(V, generator=g), torch.randn(V, V, generator=g), torch.randn(V, generator=g)
    q0, q1 = torch.softmax(torch.randn(V, generator=g), -1), torch.softmax(torch.randn(V, V, generator=g), -1)
    return z0, z1, z2, q0, q1


def _run(verifier, sampled=True, n=N, seed=0, temperature=T, generators=None):
    z0, z1, z2, q0, q1 = _case()
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed + 7919)  # the verifier's uniforms: a stream apart from the drafts'
    if sampled:
        d1 = torch.multinomial(q0, n, replacement=True, generator=g)
        d2 = torch.multinomial(q1[d1], 1, generator=g).squeeze(-1)
        probs = torch.stack([q0.expand(n, -1), q1[d1]], 1).reshape(2 * n, V)
    else:
        d1, d2, probs = torch.full((n,), 1), torch.full((n,), 2), None
    logits = torch.stack([z0.expand(n, -1), z1[d1]], 1).reshape(2 * n, V) / max(temperature, 1e-9)
    bonus = torch.multinomial(torch.softmax(z2 / max(temperature, 1e-9), -1), n, replacement=True, generator=g)
    temp = torch.full((n,), float(temperature))
    out = verify_chains(verifier, torch.stack([d1, d2], 1).reshape(-1), [2] * n, 2, probs, logits,
                        bonus.unsqueeze(-1), temp, generators or {})
    return out.to(torch.int64), (z0, z1, q0)


def _pvalue(counts, probs):
    from scipy.stats import chisquare

    keep = probs * counts.sum() >= 5
    obs = torch.cat([counts[keep], counts[~keep].sum(0, keepdim=True)]).double()
    exp = torch.cat([probs[keep], probs[~keep].sum(0, keepdim=True)]).double() * counts.sum()
    if exp[-1] < 5:
        obs, exp = obs[:-1], exp[:-1] * obs[:-1].sum() / exp[:-1].sum()
    return float(chisquare(obs.numpy(), exp.numpy()).pvalue)


def _exact(out, z0, z1, d1=None):
    p0 = torch.softmax(z0.double() / T, -1)
    t0 = out[:, 0]
    p_first = _pvalue(torch.bincount(t0, minlength=V).double(), p0)
    a = int(p0.argmax()) if d1 is None else d1
    rows = (t0 == a) & (out[:, 1] >= 0)
    p_second = _pvalue(torch.bincount(out[rows, 1], minlength=V).double(), torch.softmax(z1[a].double() / T, -1))
    return p_first, p_second


@pytest.mark.parametrize("sampled", [True, False], ids=["draft-law", "deterministic-draft"])
def test_speculative_is_exact(sampled):
    out, (z0, z1, _) = _run(get_verifier("speculative"), sampled)
    p1, p2 = _exact(out, z0, z1, None if sampled else 1)
    assert p1 >= ALPHA and p2 >= ALPHA, (p1, p2)


class _AlwaysAccept:
    """A deliberately broken verifier: every draft passes."""

    lossless = True

    def verify(self, p, q, drafts, generator=None):
        return VerifyOutput(tokens=drafts[:, 0].clone(), accepted_index=torch.zeros_like(drafts[:, 0]))


@pytest.mark.parametrize("verifier", [_AlwaysAccept(), get_verifier("lenient", lenience=0.5),
                                      get_verifier("mentored", D=0.2)], ids=["broken", "lenient", "mentored"])
def test_the_check_fails_a_verifier_that_is_not_exact(verifier):
    out, (z0, z1, _) = _run(verifier, True)
    assert min(_exact(out, z0, z1)) < ALPHA


def test_greedy_requests_follow_the_argmax_rule_and_padded_drafts_are_rejections():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0], [0.0, 0.0, 5.0], [1.0, 0.0, 0.0]])
    drafts = torch.tensor([1, 2, 2, -1])  # request 0: [1 ok, 2 wrong]; request 1: [2 ok]; request 2: [pad]
    out = verify_chains(get_verifier("speculative"), drafts, [2, 1, 1], 2, None, logits,
                        torch.tensor([[7], [8], [9]]), torch.tensor([0.0, 0.0, 1.0]), {})
    assert out[0].tolist() == [1, 0, -1] and out[1].tolist() == [2, 8, -1]
    assert out[2, 0] in (0, 1, 2) and out[2, 1] == -1  # a padded draft: one token drawn from p


def test_seeded_requests_are_reproducible_and_no_draft_gives_the_bonus():
    gens = lambda: {0: torch.Generator().manual_seed(5)}  # noqa: E731
    a, _ = _run(get_verifier("speculative"), n=50, seed=1, generators=gens())
    b, _ = _run(get_verifier("speculative"), n=50, seed=1, generators=gens())
    assert torch.equal(a[0], b[0])
    out = verify_chains(get_verifier("speculative"), torch.tensor([], dtype=torch.int64), [0], 2, None,
                        torch.zeros(0, 3), torch.tensor([[4]]), torch.tensor([1.0]), {})
    assert out.tolist() == [[4, -1, -1]]


def test_expand_batch_to_tokens_repeats_and_replaces():
    x = torch.tensor([0.7, 0.0, 1.3])
    out = expand_batch_to_tokens(x, torch.tensor([2, 2, 5], dtype=torch.int32), 5, replace_from=0, replace_to=1)
    assert out.tolist() == pytest.approx([0.7, 0.7, 1.3, 1.3, 1.3])
    assert out.dtype == torch.float32


def test_config_is_checked_and_lossy_verifiers_are_labelled():
    assert parse_config({}) is None and parse_config({"other": 1}) is None
    assert parse_config({"specot": {}}) == SpecotVllmConfig()
    cfg = parse_config({"specot": {"verifier": "mentored", "verifier_params": {"D": 0.1}}})
    assert not cfg.lossless and cfg.label() == "mentored(D=0.1) LOSSY"
    assert parse_config({"specot": {"verifier": "lenient", "verifier_params": {"lenience": 1.0}}}).lossless
    for bad, word in [({"verifier": "kseq"}, "kseq"), ({"verfier": "x"}, "unknown keys"),
                      ({"q_temperature_ratio": 0}, "q_temperature_ratio"),
                      ({"verifier": "lenient", "verifier_params": {"lenience": 2}}, "lenience")]:
        with pytest.raises(ValueError, match=word):
            parse_config({"specot": bad})


def test_the_shipped_heads_q_calibration_is_found_where_vllm_keeps_the_draft_config():
    from types import SimpleNamespace

    from specot_vllm.engines import eagle_dir
    from specot_vllm.config import checkpoint_ratio

    assert checkpoint_ratio(SimpleNamespace(model=eagle_dir(), hf_config=None)) == 0.75
    wrapped = SimpleNamespace(model=SimpleNamespace(specot_q_temperature_ratio=0.5))  # vLLM's EAGLEConfig
    assert checkpoint_ratio(SimpleNamespace(model="", hf_config=wrapped)) == 0.5
    assert checkpoint_ratio(SimpleNamespace(model="/nonexistent", hf_config=None)) is None


def test_the_engine_law_check_passes_the_law_and_fails_a_shifted_one():
    """``engines.law_check`` (the engine tests' T = 1 check) on samples drawn from the law itself
    and from a law with 10 % of its mass moved to the second branch."""
    from specot_vllm.engines import law_check

    law = {(1, 1): 0.4, (1, 2): 0.2, (2, 1): 0.15, (3, 3): 0.05}  # 0.2 left to "other"
    keys = list(law) + [(9, 9)]
    g = torch.Generator().manual_seed(3)

    def draw(probs):
        idx = torch.multinomial(torch.tensor(probs), 400, replacement=True, generator=g)
        return [list(keys[i]) for i in idx.tolist()]

    assert law_check(draw([0.4, 0.2, 0.15, 0.05, 0.2]), law)[0]
    assert not law_check(draw([0.3, 0.3, 0.15, 0.05, 0.2]), law)[0]
