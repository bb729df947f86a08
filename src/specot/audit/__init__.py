"""``specot audit``: an end-to-end exactness audit of speculative decoding as engines run it.

* :mod:`specot.audit.stats` — the statistics (numpy/scipy only): per-position conditional
  chi-square tests against the exact law or a plain-decoding sample, Holm's correction, TV
  estimates with bootstrap intervals, the detectable TV at the run's power, the greedy check.
* :mod:`specot.audit.adapters` — one interface over engines (``sample_first_tokens``,
  ``target_law``, ``greedy_tokens``): specot (transformers and llama.cpp), Hugging Face
  ``generate()`` (assistant model, prompt lookup), llama-cpp-python (prompt lookup) and any
  OpenAI-compatible server.
* :mod:`specot.audit.run` — one audit of an engine × method × setting, and the table.

This package imports no torch at module level except through :mod:`specot.audit.adapters` and
:mod:`specot.audit.run`, which the CLI imports when the command runs.
"""

from .stats import (END, CellTest, GreedyVerdict, PositionSummary, SamplingVerdict, audit_exact_law, audit_two_sample,
                    compare_greedy, detectable_tv, holm, recheck)

__all__ = ["END", "CellTest", "GreedyVerdict", "PositionSummary", "SamplingVerdict", "audit_exact_law",
           "audit_two_sample", "compare_greedy", "detectable_tv", "holm", "recheck"]
