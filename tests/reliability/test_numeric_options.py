"""Every numeric option of every sub-command, given NaN, ±inf, a negative number, zero or a huge
number: refused with exit 1 or 2 and exactly one line on stderr (no traceback), nothing written,
and no model loaded, no measurement started; or, for the few options where the value is
meaningful (a seed may be negative, a temperature or a thread count zero, a count huge), accepted,
and then the command gets as far as its work without a crash.

The options are collected from the parsers themselves (so a new option is covered the day it is
added); the runs are in-process, with every loader and every measurement replaced by a stand-in
that stops the run, so the test needs no model (property-based: hypothesis, seeded by the
database-free default profile, a modest number of examples)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specot.api as api
from specot.cli.main import build_parser
from specot.cli.main import main as cli_main

pytestmark = pytest.mark.filterwarnings("ignore")


class WorkStarted(BaseException):
    """Raised by the stand-ins: the command got past its checks (not an ``Exception``, so that the
    CLI's own error handling does not report it)."""


def _stop(*args, **kwargs):
    raise WorkStarted


#: The sub-commands' required arguments (files named relative to the run's directory).
BASE: dict[str, list[str]] = {
    "generate": ["--prompt", "hi", "--draft", "ngram"],
    "theory alpha": ["--target-probs", "p.npy", "--draft-probs", "q.npy", "--n", "2"],
    "theory speedup": ["--alpha", "0.5", "--c", "0.1"],
    "calibrate": ["--backend", "transformers"],
    "bench acceptance": ["--out", "results", "--no-progress"],
    "bench speedup": ["--out", "results", "--no-progress"],
    "bench suite": ["--out", "suite", "--readme", "none", "--results", "none"],
    "bench paths": ["--out", "paths.json"],
    "bench batch-invariance": ["--out", "bi.json"],
    "distill prompts": ["--out", "prompts.jsonl"],
    "distill data": ["--out", "shards"],
    "distill train": ["--data", "shards", "--out", "run"],
    "distill eagle": ["--out", "run"],
    "bench llamacpp run": ["--prompts", "prompts.jsonl"],
}
#: The values of each class an option may accept, by its destination: what the value means there.
MAY_ACCEPT = {
    "negative": {"seed"},
    "zero": {"seed", "temperature", "threads", "top_k", "c", "c_hat", "alpha", "warmup", "ce_weight",
             "prompt_weight", "feat_weight", "vocab_eps", "temperatures"},
    "huge": {"n_prompts", "max_tokens", "max_new_tokens", "temperature", "bench_prompts", "c", "c_hat", "steps",
             "max_steps", "epochs", "time_budget_min", "n", "samples", "save_every", "eval_every", "warmup",
             "ce_weight", "prompt_weight", "feat_weight", "repeats", "draft_vocab", "batch_tokens", "top_k",
             "max_seconds", "ttt_steps", "threads", "batch_size", "mc_samples", "vocab_eps", "positions", "tokens",
             "reps", "vocab", "hidden", "max_len", "intermediate", "layers", "heads", "kv_heads", "num_layers",
             "gamma", "drafts", "ngram_n", "temperatures", "suffix_depth", "cost_repeats"},
}


def _numeric(action: argparse.Action) -> str | None:
    """``"int"`` or ``"float"`` for an option whose value is a number, else ``None``."""
    t = action.type
    name = getattr(t, "__name__", "")
    if t is int or name in ("int", "_pos_int", "_k", "_max_gamma"):
        return "int"
    if t is float or name in ("finite_float", "_unit", "_nonneg", "_unit_open"):
        return "float"
    return None


def _options() -> list[tuple[str, str, str, str]]:
    """``(command, flag, dest, kind)`` for every numeric option of every sub-command."""
    found = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        if hasattr(parser, "_populate"):
            parser._populate()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if name != "readme":  # an alias of results
                        walk(sub, path + [name])
            elif action.option_strings and (kind := _numeric(action)):
                found.append((" ".join(path), action.option_strings[-1], action.dest, kind))

    walk(build_parser(), [])
    return found


OPTIONS = _options()


def test_the_options_are_found():
    commands = {c for c, *_ in OPTIONS}
    assert {"generate", "theory speedup", "audit", "bench paths", "bench batch-invariance", "distill prompts",
            "calibrate", "bench head-speed"} <= commands
    assert len(OPTIONS) > 60


def _value(kind: str) -> st.SearchStrategy[tuple[str, str]]:
    """(value class, the value as typed on the command line)."""
    non_finite = st.sampled_from(["nan", "inf", "-inf", "NaN", "-Infinity"]).map(lambda v: ("non-finite", v))
    zero = st.sampled_from(["0", "0.0", "-0"] if kind == "float" else ["0"]).map(lambda v: ("zero", v))
    if kind == "int":
        negative = st.integers(max_value=-1).map(lambda v: ("negative", str(v)))
        huge = st.integers(min_value=10**19, max_value=10**40).map(lambda v: ("huge", str(v)))
    else:
        negative = st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False).map(lambda v: ("negative", repr(v)))
        huge = st.floats(min_value=1e20, max_value=1e300).map(lambda v: ("huge", repr(v)))
    return st.one_of(non_finite, negative, zero, huge)


@contextlib.contextmanager
def _isolated():
    """A fresh directory as the working directory (with the probability files theory alpha reads),
    and every loader and measurement replaced by :func:`_stop`."""
    from specot.cli import audit_run, calibrate_run
    from specot_lab import cli_bench, cli_distill
    from specot_lab.bench import (batch_invariance, generate_speed, head_speed, paths, suite, theory_speed,
                                  tree_speed, verifier_speed)

    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        mp.chdir(d)
        np.save("p.npy", np.array([0.5, 0.25, 0.25]))
        np.save("q.npy", np.array([0.25, 0.5, 0.25]))
        Path("prompts.jsonl").write_text('{"prompt": "hi"}\n', encoding="utf-8")
        for mod, name in [(api, "load_target"), (api, "load_drafter"), (calibrate_run, "get_backend"),
                          (audit_run, "_run_jobs"), (cli_bench, "run_acceptance_bench"),
                          (cli_bench, "run_speedup_bench"), (suite, "run_suite"), (paths, "run_paths_bench"),
                          (batch_invariance, "compare_passes"), (batch_invariance, "load_target"),
                          (theory_speed, "measure"), (verifier_speed, "measure"), (head_speed, "measure_head"),
                          (generate_speed, "run_generate_bench"), (tree_speed, "measure_grid"),
                          (tree_speed, "load_embedded_target")]:
            mp.setattr(mod, name, _stop, raising=False)
        with contextlib.suppress(ImportError):  # the llama.cpp benchmark, where llama-cpp-python is installed
            from specot_lab.bench import llamacpp as llamacpp_bench
            mp.setattr(llamacpp_bench, "load_target", _stop, raising=False)
        for name in cli_distill._NAMES.table:  # the distillation code: every name the handlers bind
            if name not in ("torch", "check_count", "check_positive_number"):
                mp.setattr(cli_distill, name, _stop, raising=False)
        yield Path(d)


def _run(argv: list[str]) -> tuple[int | None, str, bool]:
    """(exit status or None when the work started, stderr, whether the work started)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return cli_main(argv), err.getvalue(), False
        except WorkStarted:
            return None, err.getvalue(), True
        except SystemExit as exc:
            return exc.code, err.getvalue(), False


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_numeric_options_refuse_hostile_values_before_any_work(data):
    command, flag, dest, kind = data.draw(st.sampled_from(OPTIONS), label="option")
    cls, value = data.draw(_value(kind), label="value")
    argv = command.split() + BASE.get(command, []) + [f"{flag}={value}"]
    with _isolated() as d:
        before = {p.name for p in d.iterdir()}
        rc, err, started = _run(argv)
        after = {p.name for p in d.iterdir()}
    accepted = started or rc == 0
    if accepted:
        assert dest in MAY_ACCEPT.get(cls, set()), f"{argv} accepted ({'work started' if started else 'exit 0'})"
        assert "Traceback" not in err
        return
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc in (1, 2), (argv, rc, err)
    assert len(lines) == 1 and "Traceback" not in err, (argv, err)
    assert after == before, (argv, sorted(after - before))
