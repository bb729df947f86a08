"""Ctrl-C and closed pipes in the ``specot`` command (specot.cli.main, module docstring).

Ctrl-C from the first instruction, the import of torch and transformers included: one line
``specot: interrupted...``, exit 130, and with ``--json`` exactly one JSON object on stdout saying
where it stopped. SIGTERM the same way, exit 143. A pipe its reader closed (``specot generate ... |
head -c 10``): no message, exit 141; a stdout closed from the start (``specot ... >&-``): one line
of error, exit 1.

The subprocess tests send the signal only once the child says it is where the test wants it: during
the import, the first line of ``PYTHONPROFILEIMPORTTIME`` about a torch module (seconds of import
follow); during decoding, a marker written by a wrapper around the decoding loop, which then
slows each streamed batch down so the loop is still running. Nothing depends on timing."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import specot.api as api
from cli_helpers import one_json_object
from specot.cli.main import main as _cli_main
from specot.engine import loop

pytestmark = pytest.mark.filterwarnings("ignore")

EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE

#: The console script's own lines (pyproject's ``specot = "specot.cli.main:main"``).
_ENTRY = "import sys\nfrom specot.cli.main import main\nsys.exit(main())\n"

#: Run the command with the decoding loop wrapped: at its first streamed batch it writes
#: SPECOT-TEST-DECODING to stderr once it has been streamed, then each batch waits 50 ms (the loop
#: keeps running).
_SLOW_DECODING = """
import sys, time
from specot.engine import loop
inner = loop._decode
def slow(*args, on_tokens=None, **kw):
    first = [True]
    def tokens(batch):
        if on_tokens is not None:
            on_tokens(batch)
        if first[0]:
            first[0] = False
            sys.stderr.write("SPECOT-TEST-DECODING\\n")
            sys.stderr.flush()
        time.sleep(0.05)
    return inner(*args, on_tokens=tokens, **kw)
loop._decode = slow
""" + _ENTRY


def cli_main(argv: list[str]) -> int:
    """``specot.cli.main.main``; a Ctrl-C that escapes it fails the test instead of stopping pytest."""
    try:
        return _cli_main(argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped specot's main()")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)
    env.pop("SPECOT_TRACEBACK", None)
    return env


def _command() -> list[str]:
    """The installed ``specot`` console script, or the same lines run by this interpreter."""
    script = Path(sys.executable).parent / "specot"
    return [str(script)] if script.is_file() else [sys.executable, "-c", _ENTRY]


def _gen_args(model_dir, *extra: str) -> list[str]:
    """A run of the tiny model that streams: at temperature 1 with seed 0 it emits 42 tokens before
    its EOS (at temperature 0 a single EOS)."""
    return ["generate", "--prompt", "the cat", "--target", str(model_dir), "--draft", "ngram", "--ngram-corpus",
            "none", "--raw", "--dtype", "float32", "--temperature", "1", "--seed", "0", "--max-new-tokens", "200", *extra]


def _interrupt_when(cmd: list[str], marker, env, signum=signal.SIGINT) -> tuple[int, str, list[str]]:
    """Start ``cmd``, send ``signum`` (SIGINT) at the first stderr line for which ``marker(line)``
    holds; its exit status, stdout and stderr lines (the import profile's lines left out)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen: list[str] = []
    try:
        for line in p.stderr:  # type: ignore[union-attr]
            seen.append(line)
            if marker(line):
                p.send_signal(signum)
                break
        else:
            raise AssertionError("the marker never came: " + "".join(seen[-20:]))
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lines = [ln for ln in "".join(seen).splitlines() + err.splitlines()
             if ln.strip() and not ln.startswith("import time:")]
    return p.returncode, out, lines


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_during_the_import(tiny_model_dir, as_json):
    extra = ["--json"] if as_json else []
    rc, out, err = _interrupt_when(_command() + _gen_args(tiny_model_dir, *extra),
                                   lambda line: line.startswith("import time:") and "torch" in line,
                                   _env(PYTHONPROFILEIMPORTTIME="1"))
    assert rc == EXIT_INTERRUPTED and err == ["specot: interrupted"], err
    if as_json:
        assert one_json_object(out) == {"interrupted": True, "command": None, "phase": "start-up"}
    else:
        assert out == ""


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_during_decoding(tiny_model_dir, as_json):
    extra = ["--json"] if as_json else []
    rc, out, err = _interrupt_when([sys.executable, "-c", _SLOW_DECODING] + _gen_args(tiny_model_dir, *extra),
                                   lambda line: "SPECOT-TEST-DECODING" in line, _env())
    err = [ln for ln in err if "SPECOT-TEST-DECODING" not in ln]
    assert rc == EXIT_INTERRUPTED and len(err) == 1, err
    assert err[0].startswith("specot: interrupted during the speculative run after ")
    if as_json:
        obj = one_json_object(out)
        assert obj["interrupted"] is True and obj["phase"] == "speculative"
        assert 1 <= obj["new_tokens"] < 200 and len(obj["tokens"]) == obj["new_tokens"]
    else:
        assert out.strip() and "the text above is all that was generated" in err[0]


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_while_loading_the_models(tiny_model_dir, capsys, monkeypatch, as_json):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "load_target", interrupted)
    assert cli_main(_gen_args(tiny_model_dir, *(["--json"] if as_json else []))) == EXIT_INTERRUPTED
    cap = capsys.readouterr()
    assert [ln for ln in cap.err.splitlines() if ln.strip()] == \
        ["specot: interrupted before decoding started (loading the models)"]
    if as_json:
        obj = one_json_object(cap.out)
        assert obj["interrupted"] is True and obj["phase"] == "loading" and obj["tokens"] == []
    else:
        assert cap.out == ""


def test_ctrl_c_in_argument_parsing_or_any_command(capsys, monkeypatch):
    import specot.cli.main as cli

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)  # where the sub-commands are imported
    assert cli_main(["generate", "--prompt", "x", "--json"]) == EXIT_INTERRUPTED
    cap = capsys.readouterr()
    assert one_json_object(cap.out) == {"interrupted": True, "command": None, "phase": "start-up"}
    assert [ln for ln in cap.err.splitlines() if ln.strip()] == ["specot: interrupted"]


def test_interrupting_the_baseline_keeps_the_speculative_statistics(tiny_model_dir, capsys, monkeypatch):
    inner = loop._decode

    def baseline_interrupted(target, drafter, *args, on_tokens=None, **kw):
        if drafter is None:  # the autoregressive baseline
            on_tokens([1, 2])
            raise KeyboardInterrupt
        return inner(target, drafter, *args, on_tokens=on_tokens, **kw)

    monkeypatch.setattr(loop, "_decode", baseline_interrupted)
    args = _gen_args(tiny_model_dir, "--baseline")
    args[args.index("200")] = "12"
    assert cli_main(args) == EXIT_INTERRUPTED
    cap = capsys.readouterr()
    spec = [ln for ln in cap.out.splitlines() if ln.startswith("[speculative] ")]
    assert len(spec) == 1 and "verifier speculative" in spec[0]
    assert not any(ln.startswith(("[autoregressive]", "speedup")) for ln in cap.out.splitlines())
    err = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("specot: interrupted during the baseline run after 2 tokens")
    assert "the statistics above are the finished speculative run's" in err[0]
    assert cli_main(args + ["--json"]) == EXIT_INTERRUPTED
    obj = one_json_object(capsys.readouterr().out)
    assert obj["phase"] == "baseline" and obj["tokens"] == [1, 2] and obj["report"]["prompt_tokens"] >= 1


@pytest.mark.parametrize("as_json", [False, True])
def test_a_closed_stdout_exits_quietly(tiny_model_dir, as_json):
    """``specot generate ... | head -c 0``: the reader is gone before the first write."""
    read, write = os.pipe()
    os.close(read)  # nobody will read: the first write fails with EPIPE
    try:
        p = subprocess.run(_command() + _gen_args(tiny_model_dir, *(["--json"] if as_json else [])),
                           stdout=write, stderr=subprocess.PIPE, text=True, env=_env(), timeout=300)
    finally:
        os.close(write)
    assert p.returncode == EXIT_BROKEN_PIPE and p.stderr == "", p.stderr


def test_a_broken_pipe_in_process_is_quiet(tiny_model_dir, capsys, monkeypatch):
    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert cli_main(_gen_args(tiny_model_dir)) == EXIT_BROKEN_PIPE
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_head_reading_a_few_bytes(tiny_model_dir):
    """The shell pipeline itself: ``specot generate ... | head -c 10``; whether the command wrote
    everything before ``head`` exited (0) or met the closed pipe (141), it says nothing."""
    cmd = shlex.join(_command() + _gen_args(tiny_model_dir))
    p = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd} | head -c 10"], capture_output=True, text=True,
                       env=_env(), timeout=300)
    assert len(p.stdout) == 10 and p.stderr == "" and p.returncode in (0, EXIT_BROKEN_PIPE), (p.returncode, p.stderr)


@pytest.mark.parametrize("library_does", ["converts", "swallows"])
def test_an_interrupt_a_library_turned_into_another_error_is_still_an_interrupt(capsys, monkeypatch, library_does):
    """An import interrupted half-way once ended in numpy's RecursionError, which transformers
    re-raised as ModuleNotFoundError: a Ctrl-C that came is reported as one, whatever it became."""
    import specot.cli.main as cli

    def import_interrupted(*a, **k):
        try:
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C, through main's handler
        except KeyboardInterrupt as exc:
            if library_does == "converts":
                raise ModuleNotFoundError("Could not import module 'LlamaConfig'") from exc
        return cli.argparse.ArgumentParser()

    monkeypatch.setattr(cli, "build_parser", import_interrupted)
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where the suite runs as a background job
    assert cli_main(["generate", "--prompt", "x", "--json"]) == EXIT_INTERRUPTED
    cap = capsys.readouterr()
    assert one_json_object(cap.out)["phase"] == "start-up"
    assert [ln for ln in cap.err.splitlines() if ln.strip()] == ["specot: interrupted"]
    assert signal.getsignal(signal.SIGINT) is before  # restored


# --------------------------------------------------------------------------- SIGTERM: handled like Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM


@pytest.mark.parametrize("as_json", [False, True])
def test_sigterm_during_decoding_keeps_the_tokens(tiny_model_dir, as_json):
    """``kill PID`` mid-run: what was generated is kept as after Ctrl-C (the text, or one JSON
    object with the tokens), one line on stderr, exit 143."""
    extra = ["--json"] if as_json else []
    rc, out, err = _interrupt_when([sys.executable, "-c", _SLOW_DECODING] + _gen_args(tiny_model_dir, *extra),
                                   lambda line: "SPECOT-TEST-DECODING" in line, _env(), signal.SIGTERM)
    err = [ln for ln in err if "SPECOT-TEST-DECODING" not in ln]
    assert rc == EXIT_TERMINATED and len(err) == 1, (rc, err)
    assert err[0].startswith("specot: terminated (SIGTERM) during the speculative run after "), err
    if as_json:
        obj = one_json_object(out)
        assert obj["interrupted"] is True and obj["signal"] == "SIGTERM" and obj["phase"] == "speculative"
        assert 1 <= obj["new_tokens"] < 200 and len(obj["tokens"]) == obj["new_tokens"]
    else:
        assert out.strip() and "the text above is all that was generated" in err[0]


def test_sigterm_during_the_import(tiny_model_dir):
    rc, out, err = _interrupt_when(_command() + _gen_args(tiny_model_dir, "--json"),
                                   lambda line: line.startswith("import time:") and "torch" in line,
                                   _env(PYTHONPROFILEIMPORTTIME="1"), signal.SIGTERM)
    assert rc == EXIT_TERMINATED and err == ["specot: terminated (SIGTERM)"], err
    assert one_json_object(out) == {"interrupted": True, "command": None, "phase": "start-up", "signal": "SIGTERM"}


def test_sigterm_in_process_restores_the_handlers(capsys, monkeypatch):
    import specot.cli.main as cli

    def terminated(*a, **k):
        signal.raise_signal(signal.SIGTERM)  # through main's handler
        return cli.argparse.ArgumentParser()

    def outside(signum, frame):  # pytest's own would end the test run
        raise AssertionError("SIGTERM reached the handler in place outside main()")

    monkeypatch.setattr(cli, "build_parser", terminated)
    before = signal.signal(signal.SIGTERM, outside)
    try:
        assert cli_main(["generate", "--prompt", "x", "--json"]) == EXIT_TERMINATED
        assert signal.getsignal(signal.SIGTERM) is outside  # restored
    finally:
        signal.signal(signal.SIGTERM, before)
    cap = capsys.readouterr()
    assert one_json_object(cap.out)["signal"] == "SIGTERM"
    assert [ln for ln in cap.err.splitlines() if ln.strip()] == ["specot: terminated (SIGTERM)"]


# --------------------------------------------------------------------------- a closed stdout
_CLOSED = "specot: error: stdout is closed; "


@pytest.mark.parametrize("how", [">&-", "1</dev/null"])  # closed; open for reading only
@pytest.mark.parametrize("command", ["theory", "generate-json", "generate"])
def test_a_closed_stdout_is_an_error_not_a_silent_success(tiny_model_dir, how, command):
    """``specot ... >&-``: nothing can be written, so the command says so and fails (it once exited
    0 having written nothing, or streamed into a 33-line traceback)."""
    args = {"theory": ["theory", "speedup", "--alpha", "0.8", "--c", "0.1"],
            "generate-json": _gen_args(tiny_model_dir, "--json"), "generate": _gen_args(tiny_model_dir)}[command]
    cmd = shlex.join(_command() + args)
    p = subprocess.run(["bash", "-c", f"{cmd} {how}"], capture_output=True, text=True, env=_env(), timeout=300)
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 1 and len(err) == 1 and err[0].startswith(_CLOSED), (p.returncode, p.stderr[-2000:])


def test_no_stdout_in_process(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)  # what Python sets when fd 1 is closed at start-up
    assert cli_main(["theory", "speedup", "--alpha", "0.8", "--c", "0.1"]) == 1
    assert capsys.readouterr().err.startswith(_CLOSED)
