"""Shared checks of the CLI tests: what stdout and stderr must hold."""

from __future__ import annotations

import json


def one_json_object(out: str) -> dict:
    """The one JSON object ``out`` holds (fails when it holds anything else)."""
    obj, end = json.JSONDecoder().raw_decode(out.strip())
    assert out.strip()[end:].strip() == "", out  # exactly one object
    return obj


def one_error_line(err: str) -> str:
    """The one line ``specot: error: ...`` that ``err`` holds, with no traceback."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("specot: error: ") and "Traceback" not in err
    return lines[0]
