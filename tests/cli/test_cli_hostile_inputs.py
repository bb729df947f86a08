"""Hostile inputs to every command: each is refused in one line, before any model loads, and
nothing half-done is left behind; output that cannot be written fails loudly; the JSON written is
strict; the help of the lab's commands imports no torch."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import pytest

import specot
import specot.api as api
from cli_helpers import one_error_line, one_json_object
from specot.cli.command import _last_interrupt
from specot.cli.main import main as cli_main

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if a model loads: the error must come from a check made before."""
    def boom(*a, **k):
        raise AssertionError("a model was loaded before the bad input was reported")
    # the lab modules first: their lazy ``load_target`` is bound from specot.api on first access,
    # which must find the real one (else the stand-in would be kept as the value to restore)
    from specot_lab.bench import acceptance, paths
    monkeypatch.setattr(acceptance, "load_target", boom, raising=False)
    monkeypatch.setattr(paths, "load_target", boom, raising=False)
    monkeypatch.setattr(api, "load_target", boom)
    monkeypatch.setattr(api, "load_drafter", boom)


def _usage_or_error(rc: int, err: str) -> str:
    """The one line of a refused command (exit 1: ``specot: error: ...``; exit 2: a usage error)."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc in (1, 2) and len(lines) == 1 and "Traceback" not in err, (rc, err)
    return lines[0]


def _strict_loads(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def _specot(*argv: str, **kw) -> subprocess.CompletedProcess:
    code = "import sys; from specot.cli.main import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code, *argv], env=env, timeout=300, **kw)


# ----------------------------------------------------------------- batch-invariance --tokens 0
@pytest.mark.parametrize("tokens", ["0", "1", "-3"])
def test_batch_invariance_tokens_checked_before_the_model(tokens, no_loading, capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["bench", "batch-invariance", "--tokens", tokens])
    line = _usage_or_error(exc.value.code, capsys.readouterr().err)
    assert "--tokens" in line and ">= 2" in line


# ----------------------------------------------------------------- conflicting options
@pytest.mark.parametrize("extra,flag", [
    (["--tree", "greedy", "--drafts", "2"], "--drafts"),
    (["--tree", "greedy"], "--tree"),
    (["--gamma", "3"], "--gamma"),
    (["--verifier", "lenient", "--lenience", "0.5"], "--verifier"),
    (["--verifier-param", "D=0.1", "--verifier", "mentored"], "--verifier"),
    (["--ngram-n", "2"], "--ngram-n"),
    (["--gamma-schedule", "heuristic"], "--gamma-schedule"),
])
def test_draft_none_refuses_drafting_options(extra, flag, no_loading, capsys):
    rc = cli_main(["generate", "--prompt", "hi", "--draft", "none", *extra])
    line = one_error_line(capsys.readouterr().err)
    assert rc == 1 and flag in line and "draft 'none'" in line


def test_draft_none_alone_is_fine_in_the_api(tiny_target):
    rep = specot.generate([1, 2, 3], target=tiny_target, draft="none", max_new_tokens=2, temperature=0.0)
    assert rep.result.stats.new_tokens == 2 and rep.lossless


# ----------------------------------------------------------------- bounds on input size
def test_theory_max_gamma_is_bounded(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["theory", "speedup", "--alpha", "0.8", "--c", "0.1", "--max-gamma", "100000000"])
    line = _usage_or_error(exc.value.code, capsys.readouterr().err)
    assert "--max-gamma" in line and "at most 1024" in line


def test_prompt_file_from_dev_zero_is_refused_without_reading_it_all(no_loading, capsys):
    rc = cli_main(["generate", "--prompt-file", "/dev/zero", "--draft", "ngram"])
    line = one_error_line(capsys.readouterr().err)
    assert rc == 1 and "/dev/zero" in line and "MiB" in line


def test_a_huge_prompt_file_is_refused_by_its_size(tmp_path, no_loading, capsys):
    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate((16 << 20) + 1)  # sparse: no disk used
    rc = cli_main(["generate", "--prompt-file", str(big), "--draft", "ngram"])
    assert rc == 1 and "big.txt" in one_error_line(capsys.readouterr().err)


# ----------------------------------------------------------------- bad counts
@pytest.mark.parametrize("n", ["-5", "0"])
def test_distill_prompts_refuses_non_positive_counts(tmp_path, n, capsys):
    out = tmp_path / "p.jsonl"
    with pytest.raises(SystemExit) as exc:
        cli_main(["distill", "prompts", "--n", n, "--out", str(out)])
    assert "--n" in _usage_or_error(exc.value.code, capsys.readouterr().err)
    assert not out.exists()


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf"])
def test_audit_max_seconds_must_be_positive(value, monkeypatch, capsys):
    from specot.cli import audit_run
    monkeypatch.setattr(audit_run, "_run_jobs", lambda *a, **k: pytest.fail("the audit started"))
    with pytest.raises(SystemExit) as exc:
        cli_main(["audit", "--max-seconds", value, "--tv", "0.02"])
    assert "--max-seconds" in _usage_or_error(exc.value.code, capsys.readouterr().err)


# ----------------------------------------------------------------- output to a full device
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["--help"], ["theory", "speedup", "--alpha", "0.5", "--c", "0.1"],
                                  ["bench", "paths", "--help"]])
def test_output_to_a_full_device_fails_with_one_line(argv):
    with open("/dev/full", "w") as full:
        proc = _specot(*argv, stdout=full, stderr=subprocess.PIPE, text=True)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "No space left on device" in lines[0], proc.stderr
    assert lines[0].startswith("specot: error: ")


# ----------------------------------------------------------------- strict JSON
def test_generate_json_is_strict(monkeypatch, capsys):
    from specot.cli import generate_run

    class Report:
        def to_dict(self):
            return {"text": "hi", "pass_cost": {"draft_overhead": math.inf, "t_ms": [1.0, math.nan]}}

    monkeypatch.setattr(generate_run, "generate", lambda prompt, **kw: Report())
    assert cli_main(["generate", "--prompt", "hi", "--json"]) == 0
    obj = _strict_loads(capsys.readouterr().out)
    assert obj["pass_cost"]["draft_overhead"] is None and "inf" in obj["pass_cost"]["draft_overhead_note"]
    assert obj["pass_cost"]["t_ms"] == [1.0, None]


# ----------------------------------------------------------------- unclear or late messages
def test_decoding_errors_name_the_file(tmp_path, capsys):
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(b'{"rows": "caf\xe9"}')
    for argv, flag in ((["audit", "--recheck", str(latin1)], "--recheck"),
                       (["audit", "--vllm-harness", str(latin1)], "--vllm-harness"),
                       (["bench", "results", "--speedup", str(latin1), "--out", "-"], None)):
        rc = cli_main(argv)
        line = one_error_line(capsys.readouterr().err)
        assert rc == 1 and "latin1.json" in line and "UTF-8" in line, line
        assert flag is None or flag in line


def test_ngram_corpus_decoding_error_names_the_file(tmp_path):
    from specot.plan.corpus import _texts

    bad = tmp_path / "corpus.txt"
    bad.write_bytes(b"caf\xe9 au lait")
    with pytest.raises(ValueError, match=r"n-gram corpus .*corpus.txt' is not UTF-8 text"):
        _texts(str(bad))


def test_invalid_utf8_prompt_refused_before_loading(no_loading, capsys):
    prompt = b"caf\xe9".decode("utf-8", "surrogateescape")  # what Python makes of such a command-line argument
    rc = cli_main(["generate", "--prompt", prompt, "--draft", "ngram"])
    line = one_error_line(capsys.readouterr().err)
    assert rc == 1 and "not valid UTF-8" in line


def test_xvocab_gguf_directory_is_named_a_directory(tmp_path, no_loading, capsys):
    d = tmp_path / "draft.gguf"
    d.mkdir()
    rc = cli_main(["generate", "--prompt", "hi", "--draft", f"xvocab:{d}"])
    line = one_error_line(capsys.readouterr().err)
    assert rc == 1 and "is a directory" in line and "does not exist" not in line


def test_theory_alpha_prints_nothing_before_its_error(tmp_path, capsys):
    import numpy as np

    np.save(tmp_path / "p.npy", np.array([0.5, 0.5]))
    np.save(tmp_path / "q.npy", np.array([0.25, 0.75]))
    rc = cli_main(["theory", "alpha", "--target-probs", str(tmp_path / "p.npy"), "--draft-probs",
                   str(tmp_path / "q.npy"), "--n", "5", "--law", "wor"])
    captured = capsys.readouterr()
    assert rc == 1 and captured.out == "" and one_error_line(captured.err)


@pytest.mark.parametrize("extra,flag", [(["--temperatures", "nan"], "--temperatures"),
                                        (["--temperatures", "-1"], "--temperatures"),
                                        (["--ns", "0"], "--ns"), (["--ns", "2,-1"], "--ns"),
                                        (["--vocab-eps", "2"], "--vocab-eps")])
def test_bench_acceptance_lists_checked_before_loading(tmp_path, extra, flag, no_loading, monkeypatch, capsys):
    from specot_lab import cli_bench
    monkeypatch.setattr(cli_bench, "run_acceptance_bench", lambda **kw: pytest.fail("the benchmark started"),
                        raising=False)
    rc = cli_main(["bench", "acceptance", "--out", str(tmp_path / "r"), "--no-progress", *extra])
    captured = capsys.readouterr()
    assert rc == 1 and flag in one_error_line(captured.err) and captured.out == ""
    assert not (tmp_path / "r").exists()


def test_sigterm_while_loading_gives_the_signal_in_json(monkeypatch, capsys):
    from specot.cli import generate_run

    def terminated(prompt, **kw):
        _last_interrupt[0] = signal.SIGTERM  # what main's handler records before raising
        raise KeyboardInterrupt

    monkeypatch.setattr(generate_run, "generate", terminated)
    rc = cli_main(["generate", "--prompt", "hi", "--json"])
    obj = one_json_object(capsys.readouterr().out)
    assert rc == 143 and obj["signal"] == "SIGTERM" and obj["phase"] == "loading"


@pytest.mark.parametrize("kw,match", [
    (dict(verifier_params="D=0.1", verifier="mentored"), "verifier_params must be a dict"),
    (dict(on_text=5), "on_text must be a function"),
    (dict(chat="yes"), "chat must be True, False or None"),
])
def test_api_arguments_checked_at_the_call(kw, match, no_loading):
    with pytest.raises(TypeError, match=match):
        specot.generate("hi", draft="ngram", **kw)


@pytest.mark.parametrize("argv", [["bench", "paths", "--help"], ["distill", "eagle", "--help"],
                                  ["bench", "batch-invariance", "--help"]])
def test_lab_help_imports_no_torch(argv):
    code = ("import sys\nfrom specot.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == "False", proc.stderr
    assert "usage:" in proc.stdout


def test_eagle_token_losses_named_without_torch_match_the_training_code():
    from specot_lab.cli_distill import EAGLE_TOKEN_LOSSES
    from specot_lab.distill.eagle import TOKEN_LOSSES

    assert tuple(EAGLE_TOKEN_LOSSES) == tuple(TOKEN_LOSSES)
