"""The CLI's help lists come from the registries: :mod:`specot.cli.catalog` is what
:mod:`specot.cli.catalog_build` renders from them (drafter kinds, their flagged options, verifiers,
backends), and ``specot generate --help`` names every entry of it."""

from __future__ import annotations

import argparse

from specot.cli import catalog
from specot.cli.catalog_build import CATALOG_PATH, catalog_source
from specot.cli.generate import register
from specot.plan import available_backends
from specot.verifiers import available_verifiers


def test_the_catalog_is_the_registries():
    assert CATALOG_PATH.read_text(encoding="utf-8") == catalog_source(), (
        "specot/cli/catalog.py differs from the registries: run python -m specot.cli.catalog_build")
    assert list(catalog.VERIFIERS) == available_verifiers()
    assert catalog.backend_names() == available_backends()


def _generate_help(monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100000")  # no wrapping (argparse breaks words at hyphens)
    parser = argparse.ArgumentParser(prog="specot")
    register(parser.add_subparsers())
    return " ".join(parser._subparsers._group_actions[0].choices["generate"].format_help().split())


def test_generate_help_names_every_drafter_kind_verifier_and_backend(monkeypatch):
    text = _generate_help(monkeypatch)
    for syntax, summary in catalog.DRAFTS:
        assert syntax in text and " ".join(summary.split()) in text
    for name in catalog.VERIFIERS + tuple(catalog.backend_names()):
        assert name in text
    for flag, default, text_of in catalog.DRAFT_FLAGS.values():
        assert flag in text and f"{text_of} (default {default})" in text
