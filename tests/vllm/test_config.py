"""The plugin's settings (``additional_config["specot"]``): every key checked in one place before any
engine process starts, each refusal one line naming the value and the accepted ones; a lossy
verifier runs only with its parameter stated, and that value is in the log line and on /metrics.
The command line refuses bad settings in one line without starting vLLM; ``specot-vllm model-path``
(the serve recipe's model) prints the embedded target's converted copy only."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("specot_vllm")  # the integration's package (installed beside specot)

from specot_vllm.config import SpecotConfigError, parse_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TREE_SPEC = {"method": "custom_class", "model": "specot_vllm.SuffixTreeProposer", "num_speculative_tokens": 4}
CHAIN_SPEC = {"method": "custom_class", "model": "specot_vllm.SuffixProposer", "num_speculative_tokens": 4}


def _refused(settings: dict, *, tree: bool = False, nodes: int | None = None) -> str:
    """The one-line message refusing ``settings``."""
    with pytest.raises(SpecotConfigError) as e:
        parse_config({"specot": settings}, tree=tree, nodes=nodes)
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and "\n" not in msg and msg
    return msg


@pytest.mark.parametrize("settings, param", [
    ({"verifier": "lenient"}, "lenience"),
    ({"verifier": "lenient", "verifier_params": {}}, "lenience"),
    ({"verifier": "mentored"}, "D"),
    ({"verifier": "mentored", "verifier_params": {"tol": 0.01}}, "D"),  # D = 0.1 would be taken silently
])
def test_a_lossy_verifier_without_its_parameter_is_refused(settings, param):
    msg = _refused(settings)
    assert "lossy" in msg and f'"verifier_params": {{"{param}": ...}}' in msg


def test_a_lossless_verifier_does_not_take_a_lossy_parameter():
    msg = _refused({"verifier": "speculative", "verifier_params": {"lenience": 0.5}})
    assert "['lenience'] = 0.5" in msg and '"verifier": "lenient"' in msg


@pytest.mark.parametrize("settings, label", [
    ({"verifier": "lenient", "verifier_params": {"lenience": 0.5}}, "lenient(lenience=0.5) LOSSY"),
    ({"verifier": "mentored", "verifier_params": {"D": 0.1}}, "mentored(D=0.1) LOSSY"),
    ({"verifier": "lenient", "verifier_params": {"lenience": 1}}, "lenient(lenience=1) lossless"),
    ({}, "speculative() lossless"),
])
def test_a_verifier_with_its_parameter_is_accepted_and_labelled_with_it(settings, label):
    assert parse_config({"specot": settings}).label() == label


def test_the_lossy_value_is_in_the_log_line_and_the_metric():
    prometheus_client = pytest.importorskip("prometheus_client")  # a vLLM dependency
    from specot_vllm import observe

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    observe.log.addHandler(handler)
    try:
        observe.announce_verifier(parse_config({"specot": {"verifier": "lenient", "verifier_params": {"lenience": 0.25}}}))
    finally:
        observe.log.removeHandler(handler)
    assert any("lenient(lenience=0.25) LOSSY" in r.getMessage() and r.levelno == logging.WARNING for r in records)
    metrics = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    assert 'specot_verifier_info{lossless="false",params="lenience=0.25",verifier="lenient"} 1.0' in metrics


@pytest.mark.parametrize("settings, key, accepted", [
    ({"verfier": "lenient"}, "['verfier']", "'verifier_params'"),
    ({"suffix": {"max_nodez": 3}}, "['max_nodez']", "'max_nodes'"),
    ({"suffix": {"corpus": "x"}}, "['corpus']", "'max_n'"),
    ({"verifier": "lenient", "verifier_params": {"lenienc": 0.5}}, "['lenienc']", "['lenience']"),
    ({"verifier": "speculative", "verifier_params": {"D": 0.1}}, "['D']", "['lenience']"),
])
def test_unknown_keys_at_any_level_are_refused_in_one_line_naming_them(settings, key, accepted):
    msg = _refused(settings)
    assert f"unknown keys {key}" in msg and "accepted: [" in msg and accepted in msg


@pytest.mark.parametrize("tree, choices", [(False, "'speculative', 'lenient'"), (True, "'greedy', 'kseq'")])
def test_an_unknown_verifier_is_refused_in_one_line(tree, choices):
    msg = _refused({"verifier": "bogus"}, tree=tree)
    assert msg.startswith("additional_config['specot']['verifier'] = 'bogus'; choose one of [") and choices in msg


@pytest.mark.parametrize("settings, tree, words", [
    ({"suffix": {"adaptive": "no"}}, False, "['adaptive'] = 'no'; use true or false"),
    ({"suffix": {"max_n": 2.5}}, False, "['max_n'] = 2.5; use an integer"),
    ({"suffix": {"max_n": 0}}, False, "max_n must be an integer >= 1"),
    ({"suffix": {"min_n": 4, "max_n": 2}}, False, "min_n <= max_n"),
    ({"suffix": {"max_nodes": 8}}, True, "exceeds num_speculative_tokens = 4"),
    ({"depth": 3}, False, "draft trees only"),
    ({"verifier": "vllm", "verifier_params": {"lenience": 0.5}}, False, "takes no parameters"),
    ({"verifier": "lenient", "verifier_params": {"lenience": "0.5"}}, False, "lenience must be a number"),
    ({"verifier_params": []}, False, "must be a JSON object"),
])
def test_bad_values_are_refused_in_one_line(settings, tree, words):
    assert words in _refused(settings, tree=tree, nodes=4)


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "specot_vllm.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.parametrize("settings, spec, expected", [
    ({"specot": {"verifier": "bogus"}}, CHAIN_SPEC, "additional_config['specot']['verifier'] = 'bogus'; choose one of"),
    ({"specot": {"verifier": "lenient"}}, CHAIN_SPEC, "verifier 'lenient' is lossy"),
    ({"specot": {"suffix": {"max_nodez": 3}}}, TREE_SPEC, "additional_config['specot']['suffix'] has unknown keys"),
    ({"specot": {"suffix": {"max_nodes": 8}}}, TREE_SPEC, "exceeds num_speculative_tokens = 4"),
])
def test_serve_on_bad_settings_prints_one_line_and_exits_1_before_vllm_starts(settings, spec, expected):
    t0 = time.monotonic()
    out = _cli("serve", "/nonexistent-model", "--enforce-eager", "--speculative-config", json.dumps(spec),
               "--additional-config", json.dumps(settings))
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert out.returncode == 1 and len(lines) == 1 and expected in lines[0], lines[-5:]
    assert time.monotonic() - t0 < 90  # no model, no engine: checked before vLLM reads anything


def test_the_command_line_check_reads_vllms_spellings():
    from specot_vllm.cli import check_settings

    bad = json.dumps({"specot": {"verifier": "kseq"}})  # a tree verifier: refused for chains only
    assert "choose one of" in check_settings(["serve", "M", "--additional_config=" + bad])
    assert check_settings(["serve", "M", "-sc", json.dumps(TREE_SPEC), "--additional-config", bad]) is None
    assert check_settings(["serve", "M", "--spec-method", "custom_class", "--spec-model",
                           "specot_vllm.SuffixTreeProposer", "--enforce-eager", "--additional-config", bad]) is None
    # forms vLLM's own parser merges: checked when vLLM builds its engine configuration
    assert check_settings(["serve", "M", "--additional-config.specot.verifier", "bogus"]) is None
    assert check_settings(["serve", "M", "--config", "settings.yaml"]) is None


@pytest.mark.slow
def test_serve_on_bad_settings_in_vllms_dotted_form_is_one_line_too():
    pytest.importorskip("vllm.config")
    from specot_vllm import engines

    try:
        model = engines.target_dir()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    engines.cpu_env()
    out = _cli("serve", model, "--dtype", "float32", "--enforce-eager", "--speculative-config", json.dumps(CHAIN_SPEC),
               "--additional-config.specot.verifier", "bogus", timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "Traceback" not in text and "EngineCore" not in text, text[-3000:]
    assert text.rstrip().splitlines()[-1].startswith("additional_config['specot']['verifier'] = 'bogus'")


@pytest.mark.slow
def test_the_python_api_raises_one_value_error_before_any_engine_starts():
    pytest.importorskip("vllm.config")
    from specot_vllm import engines

    try:
        engines.target_dir()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    with pytest.raises(ValueError) as e:
        engines.make_llm(CHAIN_SPEC, {"specot": {"verifier": "lenient"}})
    assert str(e.value).startswith("verifier 'lenient' is lossy") and "\n" not in str(e.value)


def _fake_cache(root: Path) -> Path:
    """A model cache as specot leaves it after a transformers run and a llama.cpp run: the complete
    float32 copy, the tokenizer llama.cpp caches beside it, and a copy without its marker."""
    stem = "SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f"
    model = root / f"{stem}-transformers-5.23.0"
    tokenizer = root / f"{stem}-tokenizer-transformers-5.23.0"
    partial = root / f"{stem}-transformers-5.24.0"
    for d in (model, tokenizer, partial):
        d.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "specot_converted.json").write_text("{}")
    (tokenizer / "tokenizer.json").write_text("{}")
    (tokenizer / "specot_tokenizer.json").write_text("{}")
    (partial / "config.json").write_text("{}")
    return model


def test_the_serve_recipes_model_command_prints_the_converted_copy_only(tmp_path):
    recipe = (ROOT / "docs" / "vllm.md").read_text(encoding="utf-8")
    line = next(ln for ln in recipe.splitlines() if ln.startswith("MODEL="))
    command = re.fullmatch(r'MODEL="?\$\((.*)\)"?(\s+#.*)?', line).group(1)
    assert "model-path" in command
    model = _fake_cache(tmp_path / "cache")
    env = {k: v for k, v in os.environ.items() if k != "SPECOT_VLLM_TARGET"}
    env.update(SPECOT_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    command = command.replace(".venv-vllm/bin/", "")  # this environment's own command
    if shutil.which(command.split()[0], path=str(Path(sys.executable).parent)) is None:
        pytest.skip(f"{command.split()[0]} is not installed in this environment")
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.splitlines() == [str(model)], out.stderr[-2000:]


def test_model_path_without_a_copy_says_how_to_make_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SPECOT_VLLM_TARGET"}
    env.update(SPECOT_CACHE_DIR=str(tmp_path), HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-m", "specot_vllm.cli", "model-path"], capture_output=True, text=True,
                         timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 1 and out.stdout == "" and "specot.load_target(None)" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
