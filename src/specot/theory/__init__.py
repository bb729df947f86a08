"""Theory toolkit: optimal acceptance α*, SpecTr bounds and the speedup model.

* :func:`optimal_acceptance` — α* = 1 + min_H [p(H) − Q(H)] (Hu et al. 2025) for the ``iid``,
  ``wor`` (successive sampling, exact), ``cps`` (conditional Poisson), ``greedy``, ``spechub`` and
  explicit joint draft laws, with the minimising set H*.
* :mod:`specot.theory.successive` — exact ``Q(H)`` of successive sampling (exponential race).
* :mod:`specot.theory.bounds` — SpecTr Lemma 1 / Lemma 3 / App. B.
* :mod:`specot.theory.speedup` — Leviathan §3 speedup model and block efficiency.
* :mod:`specot.theory.plots` — figures (``specot theory plots``).
"""

from .bounds import (
    bernoulli_alpha,
    kseq_guarantee_factor,
    kseq_lower_bound,
    otm_limit,
    rrs_acceptance,
    spectr_upper_bound,
    uniform_alpha,
    uniform_kseq_rho,
)
from .optimal import (
    THEORY_LAWS,
    JointDraftLaw,
    OptimalAcceptance,
    optimal_acceptance,
    optimal_acceptance_all_laws,
    optimal_acceptance_bruteforce,
    set_probability,
)
from .speedup import (
    OptimalGamma,
    block_efficiency,
    block_walltime_improvement,
    expected_tokens,
    improvement_lower_bound,
    operations_factor,
    optimal_gamma,
    speedup_table,
    tree_acceptance_rates,
    walltime_improvement,
)
from .successive import SuccessivePrefixEvaluator, successive_subset_probability

__all__ = [
    "THEORY_LAWS",
    "JointDraftLaw",
    "OptimalAcceptance",
    "optimal_acceptance",
    "optimal_acceptance_all_laws",
    "optimal_acceptance_bruteforce",
    "set_probability",
    "successive_subset_probability",
    "SuccessivePrefixEvaluator",
    "spectr_upper_bound",
    "kseq_lower_bound",
    "kseq_guarantee_factor",
    "otm_limit",
    "bernoulli_alpha",
    "uniform_alpha",
    "uniform_kseq_rho",
    "rrs_acceptance",
    "expected_tokens",
    "walltime_improvement",
    "optimal_gamma",
    "OptimalGamma",
    "operations_factor",
    "improvement_lower_bound",
    "block_efficiency",
    "tree_acceptance_rates",
    "block_walltime_improvement",
    "speedup_table",
]
