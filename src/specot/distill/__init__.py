"""Distil a small draft model from the target (``specot distill``).

* :mod:`specot.distill.data` — the prompt set (pydoc topics + stdlib docstrings, held-out topics
  kept apart) and batched sampling of the target with its top-k soft labels, in resumable shards;
* :mod:`specot.distill.train` — a ``LlamaForCausalLM`` draft trained on those soft labels
  (forward KL / cross-entropy to the target + a hard-label CE term), resumable;
* :mod:`specot.distill.evaluate` — held-out α at temperature 1 and 0, cost coefficient c,
  predicted and measured speedup.
* :mod:`specot.distill.eagle` — an EAGLE-3 head trained on the target's fused features with the
  training-time test (``specot distill eagle``; a skeleton, resumable).
"""
