"""A bug in specot is reported as one: one line ``specot: internal error: ...`` (exit 1), never as
``specot: error: ...``, which says the input was bad; a ``TypeError`` that a check raises on purpose
stays an error of the input. No traceback unless ``SPECOT_TRACEBACK=1``."""

from __future__ import annotations

import pytest

from specot.cli import main as M


def _lines(capsys) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return [ln for ln in err.splitlines() if ln.strip()]


def _calls_a_module() -> None:
    M.json(1)  # a module is not callable: the interpreter's TypeError


def _checks_its_input() -> None:
    raise TypeError("on_text must be a callable taking the new text, got 5")


def _has_a_bad_key() -> None:
    {}["chain_ms"]


@pytest.mark.parametrize("fail,line", [
    (_calls_a_module, "specot: internal error: TypeError: 'module' object is not callable (a bug in specot"),
    (_has_a_bad_key, "specot: internal error: KeyError: 'chain_ms' (a bug in specot"),
    (_checks_its_input, "specot: error: on_text must be a callable taking the new text, got 5"),
])
def test_a_bug_is_not_reported_as_bad_input(monkeypatch, capsys, fail, line):
    monkeypatch.delenv("SPECOT_TRACEBACK", raising=False)
    monkeypatch.setattr(M, "_run", lambda argv, run: fail())
    assert M.main(["theory", "speedup"]) == 1
    lines = _lines(capsys)
    assert len(lines) == 1 and lines[0].startswith(line), lines


def test_the_json_error_says_internal(monkeypatch, capsys):
    monkeypatch.delenv("SPECOT_TRACEBACK", raising=False)
    monkeypatch.setattr(M, "_run", lambda argv, run: _calls_a_module())
    assert M.main(["generate", "--json"]) == 1
    out = capsys.readouterr().out
    assert '"error": "internal error: TypeError: ' in out and '"exit": 1' in out


def test_internal_error_tells_a_check_from_the_interpreter():
    for fail, internal in ((_calls_a_module, True), (_checks_its_input, False), (_has_a_bad_key, True)):
        try:
            fail()
        except Exception as exc:  # noqa: BLE001
            assert M.internal_error(exc) is internal, fail
    assert M.internal_error(ValueError("bad --gamma")) is False
