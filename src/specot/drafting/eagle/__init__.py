"""Feature-level drafting (EAGLE): a draft head of one decoder layer (or a few) over the target's
own hidden states.

References:

* EAGLE (Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty"):
  draft at the *feature* level, from the target's feature of the previous position and the
  embedding of the current token.
* EAGLE-2 (Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic Draft
  Trees"): a *dynamic* draft tree — at every depth expand the nodes with the highest cumulative
  draft probability (the draft's confidence approximates its acceptance rate), under a node budget.
* EAGLE-3 (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language Models via
  Training-Time Test"): fused low / mid / high target features and a reduced draft vocabulary.

The parts:

* :mod:`~specot.drafting.eagle.head` — the draft network :class:`Eagle3Head` (its modules, int8
  weights, the draft-vocabulary map) and :mod:`~specot.drafting.eagle.config` (its configuration,
  the published parameter names, the target's feature layers);
* :mod:`~specot.drafting.eagle.checkpoint` — loading the published EAGLE-3 and ``speculators`` layouts;
* the tree constructions: :mod:`~specot.drafting.eagle.sampled` (a chain, the spec's static
  topology, EAGLE-2's dynamic tree with sampled children), :mod:`~specot.drafting.eagle.reranked`
  (EAGLE-2's re-ranked tree at temperature 0), :mod:`~specot.drafting.eagle.static_tree` (the same
  tree built on the device over a static cache, for CUDA graphs), and what they share,
  :mod:`~specot.drafting.eagle.passes`;
* :mod:`~specot.drafting.eagle.drafter` — :class:`EagleDrafter`, the drafter protocol glue: the
  target's features of the committed positions, the head's committed KV cache, the choice of tree.

``specot distill eagle`` (:mod:`specot_lab.distill.eagle`, the lab beside the library) trains a head
with EAGLE-3's training-time test.
"""

from .config import EAGLE3_KEYS, config_layers, default_eagle_layers, eagle3_config
from .drafter import EagleDrafter
from .head import Eagle3Head
from .reranked import rerank

#: The former private name of :func:`~specot.drafting.eagle.config.config_layers`
#: (``specot_lab.distill.eagle`` imports it).
_config_layers = config_layers

__all__ = ["Eagle3Head", "EagleDrafter", "eagle3_config", "default_eagle_layers", "rerank", "EAGLE3_KEYS"]
