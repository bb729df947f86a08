"""The decoding plan: a draft parsed once, its tree, its verifier, its cache and backend.

* :func:`make_plan` → a frozen :class:`DecodingPlan` (``draft="auto"`` included), every check made
  before a model is loaded; :func:`run_plan` decodes it on a loaded target.
* :func:`parse_draft` → a :class:`DraftSpec`, through the registry of drafter kinds
  (:mod:`specot.plan.kinds`: one module per kind, each declaring its syntax, options, checks, tree
  laws and loader).
* :class:`VerifierSpec` / :func:`build_verifier`: the verifier, refusing a silently lossy run.
* :mod:`specot.plan.backends`: target backends by name (``transformers``, and those of installed
  extras such as ``llamacpp``).
"""

from . import kinds  # noqa: F401  (registers the built-in drafter kinds)
from .auto import AutoChoice, auto_choice
from .backends import Backend, available_backends, get_backend
from .draft import DraftKind, DraftSpec, Option, TreeSupport, draft_kinds, parse_draft, register_kind
from .plan import MAX_TREE_NODES, DecodingPlan, make_plan, resolve_tree_spec
from .run import prepare_cache, run_plan, warm_up
from .verify import VerifierSpec, build_verifier, verifier_info

__all__ = [
    "DecodingPlan",
    "make_plan",
    "run_plan",
    "DraftSpec",
    "parse_draft",
    "DraftKind",
    "TreeSupport",
    "Option",
    "register_kind",
    "draft_kinds",
    "VerifierSpec",
    "build_verifier",
    "Backend",
    "available_backends",
    "get_backend",
    "auto_choice",
]
