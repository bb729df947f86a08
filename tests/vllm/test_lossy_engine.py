"""A lossy verifier in vLLM is what it says: labelled LOSSY, and the T = 1 law check of the other
engine tests fails on it — the check that passes specot's lossless verifiers can fail in vLLM."""

from __future__ import annotations

import pytest

from _engine_checks import ALPHA, law_samples
from conftest import traced

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(reference):
    from specot_vllm import engines

    spec, _ = engines.speculative_config("specot-eagle3", 3)
    extra = {"specot": {"verifier": "lenient", "verifier_params": {"lenience": 0.1}}}
    llm = engines.make_llm(spec, extra)
    yield llm
    engines.shutdown(llm)


def test_lenient_verifier_is_labelled_and_caught_by_the_law_check(engine, reference):
    from specot_vllm.engines import law_check

    ok, p = law_check(law_samples(engine, reference["law_ids"]["open"]), reference["laws"]["open"], ALPHA)
    assert any(d["verifier"] == "lenient(lenience=0.1) LOSSY" for d in traced("verify"))
    assert not ok, f"a lenience-0.1 verifier passed the exactness check (p = {p:.3f})"
