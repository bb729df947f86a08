"""specot's lab: benchmarks, distillation, their corpus and reports.

The lab imports the core (:mod:`specot`) and is never imported by it. Its commands, ``specot
bench`` and ``specot distill``, reach the core CLI through the ``specot.commands`` entry-point
group (see ``pyproject.toml``), so the core has no import of the lab.

* :mod:`specot_lab.corpus` — the one corpus: real text installed with Python, the one train /
  held-out split, benchmark and distillation prompt sets;
* :mod:`specot_lab.bench` — the papers' tables on the embedded target (acceptance, speedup, tree
  cost, ...), JSON + markdown + plots, ``docs/results.md``;
* :mod:`specot_lab.distill` — distilled draft models and EAGLE heads trained from the target.
"""
