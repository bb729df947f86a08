"""Drafting: draft-token samplers for each draft law, the n-gram drafter and Hugging Face draft models."""

from .base import DraftProposal, Drafter
from .laws import *  # noqa: F401,F403
from .laws import __all__ as _laws_all
from .model import ModelDrafter, check_vocab_compatible
from .ngram import NGramDrafter, NGramTable

__all__ = [
    "DraftProposal",
    "Drafter",
    "ModelDrafter",
    "check_vocab_compatible",
    "NGramDrafter",
    "NGramTable",
    *_laws_all,
]
