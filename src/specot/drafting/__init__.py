"""Drafting: draft-token samplers for each draft law, the n-gram drafter and Hugging Face draft models."""

from .laws import *  # noqa: F401,F403
from .laws import __all__ as _laws_all

__all__ = [*_laws_all]
