"""Draft models and EAGLE heads trained from the target (``specot distill``).

* :mod:`specot_lab.distill.data` — batched sampling of the target (prompts from :mod:`specot_lab.corpus`)
  with its top-k soft labels, in resumable shards;
* :mod:`specot_lab.distill.train` — a ``LlamaForCausalLM`` draft trained on those soft labels
  (forward KL / cross-entropy to the target + a hard-label CE term), resumable;
* :mod:`specot_lab.distill.evaluate` — held-out α at temperature 1 and 0, cost coefficient c,
  predicted and measured speedup.
* :mod:`specot_lab.distill.eagle` — an EAGLE-3 head trained on the target's fused features with the
  training-time test (``specot distill eagle``; a skeleton, resumable).
* :mod:`specot_lab.distill.files` — their shards and checkpoints, written atomically and read
  without running code (``weights_only=True``).
"""
