"""Token-level verifiers: one algorithm per module, a registry by name.

``get_verifier("speculative")``, ``available_verifiers()``; see :mod:`specot.verifiers.base` for
the common interface (``p [B, V]``, ``q [B, V]``, ``drafts [B, n]``, a ``torch.Generator``).
"""

from .base import (
    Acceptance,
    AnyVerifier,
    DraftLaw,
    SequenceVerifier,
    TreeVerifyOutput,
    Verifier,
    VerifyOutput,
    available_verifiers,
    get_verifier,
    LAW_VERIFIERS,
    prepare_inputs,
    register_verifier,
)
from .speculative import LenientVerifier, SpeculativeVerifier, residual_distribution
from .otm import MAX_OTM_SETS, MAX_OTM_VARIABLES, OTMSolution, OTMVerifier, draft_sets, solve_otm_lp
from .kseq import KSeqVerifier, kseq_rho
from .rrs import RRSVerifier
from .rrs_wor import RRSWORVerifier
from .greedy import GreedyVerifier
from .spechub import SpecHubVerifier
from .mentored import MentoredSolution, MentoredVerifier, mentored_solve
from .block import BlockVerifier, block_expected_accepted, block_output_law, block_weights
from .traversal import TraversalVerifier, TraversalWORVerifier, traversal_output_law, traversal_weights
from .importance import ImportanceVerifier, importance_selection
from .ot import OTPlan, OTVerifier, ot_selection_law
from .gbv import GBVVerifier, gbv_expected_accepted, gbv_output_law, paths_to_tree

__all__ = [
    "Acceptance",
    "DraftLaw",
    "Verifier",
    "SequenceVerifier",
    "TreeVerifyOutput",
    "AnyVerifier",
    "VerifyOutput",
    "available_verifiers",
    "get_verifier",
    "LAW_VERIFIERS",
    "prepare_inputs",
    "register_verifier",
    "SpeculativeVerifier",
    "LenientVerifier",
    "residual_distribution",
    "OTMVerifier",
    "OTMSolution",
    "solve_otm_lp",
    "draft_sets",
    "MAX_OTM_SETS",
    "MAX_OTM_VARIABLES",
    "KSeqVerifier",
    "kseq_rho",
    "RRSVerifier",
    "RRSWORVerifier",
    "GreedyVerifier",
    "SpecHubVerifier",
    "MentoredVerifier",
    "MentoredSolution",
    "mentored_solve",
    "BlockVerifier",
    "block_output_law",
    "block_weights",
    "block_expected_accepted",
    "TraversalVerifier",
    "TraversalWORVerifier",
    "traversal_output_law",
    "traversal_weights",
    "ImportanceVerifier",
    "importance_selection",
    "OTVerifier",
    "OTPlan",
    "ot_selection_law",
    "GBVVerifier",
    "gbv_output_law",
    "gbv_expected_accepted",
    "paths_to_tree",
]
