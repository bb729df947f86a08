"""Drafting: the one drafter protocol, draft-tree shapes, draft models, the n-gram and suffix drafters,
the hybrid of a suffix drafter with a draft model, and drafting with a draft of another tokenizer."""

from .base import DraftOutcome, DraftSchedule, DraftTree, Drafter
from .eagle import Eagle3Head, EagleDrafter
from .hybrid import HybridDrafter
from .model import ModelDrafter, check_vocab_compatible, draft_tree_from_model
from .ngram import NGramCounts, NGramDrafter, NGramTable
from .suffix import SuffixDrafter, SuffixIndex
from .xvocab import XVocabDrafter
from .tree import EAGLE_DEFAULT_TREE, DraftShape, TreeBudget, TreeSpec, default_law_for, load_topology, parse_tree_spec

__all__ = [
    "Drafter",
    "DraftTree",
    "DraftOutcome",
    "DraftSchedule",
    "ModelDrafter",
    "EagleDrafter",
    "Eagle3Head",
    "check_vocab_compatible",
    "draft_tree_from_model",
    "NGramDrafter",
    "NGramTable",
    "SuffixDrafter",
    "HybridDrafter",
    "XVocabDrafter",
    "NGramCounts",
    "SuffixIndex",
    "TreeSpec",
    "TreeBudget",
    "DraftShape",
    "EAGLE_DEFAULT_TREE",
    "parse_tree_spec",
    "load_topology",
    "default_law_for",
]
