"""Bad inputs give one line ``specot: error: ...`` (exit 1), never a traceback; lossy runs say so;
everything that does not need the model is checked before loading it; Ctrl-C exits 130 with what
was generated."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

import specot
import specot.api as api
import specot.measure as measure
import specot.plan.run as plan_run
from cli_helpers import one_error_line, one_json_object
from specot.cli.main import main as cli_main

pytestmark = pytest.mark.filterwarnings("ignore")


def _gen(tiny_model_dir, *extra: str) -> list[str]:
    return ["generate", "--prompt", "the cat", "--target", str(tiny_model_dir), "--draft", "ngram",
            "--ngram-corpus", "none", "--raw", "--dtype", "float32", "--max-new-tokens", "4", *extra]


def _one_error_line(capsys) -> str:
    return one_error_line(capsys.readouterr().err)


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if a model is loaded: the error must come from a check before loading."""
    def boom(*a, **k):
        raise AssertionError("a model was loaded before the bad input was reported")
    monkeypatch.setattr(api, "load_target", boom)
    monkeypatch.setattr(api, "load_drafter", boom)


# --------------------------------------------------------------------------- model / file inputs
def test_unloadable_targets_one_line(tmp_path, tiny_model_dir, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in tiny_model_dir.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "config.json").write_text('{"model_type": "llama", broken')
    cases = [
        ("gpt2", "not a local directory"),
        (str(empty), "it is empty"),
        (str(broken), "is not valid JSON"),
        (str(tmp_path / "missing"), "does not exist"),
    ]
    for target, match in cases:
        rc = cli_main(["generate", "--prompt", "hi", "--target", target, "--draft", "ngram", "--ngram-corpus", "none",
                       "--raw", "--max-new-tokens", "2"])
        line = _one_error_line(capsys)
        assert rc == 1 and match in line, (target, line)
        assert "sentencepiece" not in line


def test_model_dir_without_tokenizer(tmp_path, tiny_model_dir, capsys):
    d = tmp_path / "notok"
    d.mkdir()
    for f in ("config.json", "model.safetensors"):
        (d / f).write_bytes((tiny_model_dir / f).read_bytes())
    rc = cli_main(_gen(tiny_model_dir)[:4] + [str(d)] + _gen(tiny_model_dir)[5:])
    assert rc == 1 and "no tokenizer files" in _one_error_line(capsys)


def test_prompt_file_errors(tmp_path, tiny_model_dir, capsys):
    base = ["generate", "--target", str(tiny_model_dir), "--draft", "ngram", "--ngram-corpus", "none", "--raw"]
    assert cli_main(base + ["--prompt-file", str(tmp_path)]) == 1
    assert "is a directory" in _one_error_line(capsys)
    assert cli_main(base + ["--prompt-file", str(tmp_path / "nope.txt")]) == 1
    assert "does not exist" in _one_error_line(capsys)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9")
    assert cli_main(base + ["--prompt-file", str(bad)]) == 1
    assert "not UTF-8" in _one_error_line(capsys)


def test_an_unreadable_prompt_file_is_named_without_errno_text(tmp_path, tiny_model_dir, capsys, monkeypatch,
                                                              no_loading):
    from pathlib import Path

    locked = tmp_path / "locked.txt"
    locked.write_text("the cat")
    read_text = Path.read_text

    def refuse(self, *a, **k):  # a file this user may not read (chmod does not stop root, who runs some suites)
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", refuse)
    assert cli_main(["generate", "--prompt-file", str(locked), "--draft", "ngram"]) == 1
    line = _one_error_line(capsys)
    assert f"--prompt-file {str(locked)!r} cannot be read (permission denied)" in line and "[Errno" not in line


# --------------------------------------------------------------------------- --json: one object on every exit
def test_json_errors_are_one_json_object(tmp_path, tiny_model_dir, capsys, no_loading):
    assert cli_main(_gen(tiny_model_dir, "--json", "--verifier", "lenient")) == 1
    cap = capsys.readouterr()
    obj = one_json_object(cap.out)
    assert obj["exit"] == 1 and obj["error"].startswith("--verifier lenient is lossy") and set(obj) == {"error", "exit"}
    assert [ln for ln in cap.err.splitlines() if ln.strip()] == ["specot: error: " + obj["error"]]
    missing = str(tmp_path / "missing.txt")
    assert cli_main(["generate", "--prompt-file", missing, "--json"]) == 1
    assert "does not exist" in one_json_object(capsys.readouterr().out)["error"]


@pytest.mark.parametrize("argv,match", [
    (["generate", "--json"], "one of the arguments --prompt --prompt-file is required"),
    (["generate", "--prompt", "x", "--json", "--gamma", "two"], "argument --gamma: invalid int value: 'two'"),
    (["--json"], "the following arguments are required: COMMAND"),
])
def test_json_usage_errors_are_one_json_object_with_exit_2(capsys, argv, match):
    with pytest.raises(SystemExit) as exc:
        cli_main(argv)
    assert exc.value.code == 2
    cap = capsys.readouterr()
    obj = one_json_object(cap.out)
    assert obj["exit"] == 2 and match in obj["error"] and obj["error"] in cap.err


def test_without_json_errors_leave_stdout_empty(tmp_path, capsys):
    """``theory alpha --json FILE`` names a file: its errors stay on stderr."""
    assert cli_main(["theory", "alpha", "--target-probs", str(tmp_path / "p.npy"), "--draft-probs",
                     str(tmp_path / "q.npy"), "--n", "2", "--json", str(tmp_path / "out.json")]) == 1
    cap = capsys.readouterr()
    assert cap.out == "" and "not found" in one_error_line(cap.err)


# --------------------------------------------------------------------------- the lab's bench: files named
def test_bench_prompts_jsonl_errors_name_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "a"}\n{not json\n')
    assert cli_main(["bench", "acceptance", "--prompts", str(bad), "--quick", "--no-progress",
                     "--out", str(tmp_path / "out")]) == 1
    line = _one_error_line(capsys)
    assert f"{bad}:2: not valid JSON" in line and "'prompt' field" in line
    assert cli_main(["bench", "speedup", "--prompts", str(tmp_path), "--quick", "--no-progress",
                     "--out", str(tmp_path / "out")]) == 1
    line = _one_error_line(capsys)
    assert f"prompt file {tmp_path} cannot be read (is a directory)" in line and "[Errno" not in line


@pytest.mark.parametrize("bench", ["acceptance", "speedup"])
def test_bench_out_naming_a_file_is_refused_before_measuring(tmp_path, capsys, bench):
    taken = tmp_path / "results.txt"
    taken.write_text("keep me")
    assert cli_main(["bench", bench, "--prompts", "zen", "--quick", "--no-progress", "--out", str(taken)]) == 1
    line = _one_error_line(capsys)
    assert f"--out {str(taken)!r} is a file; name a directory" in line and "[Errno" not in line
    assert taken.read_text() == "keep me"


def test_a_non_float_dtype_is_refused_before_loading(tiny_model_dir, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a model was loaded before the dtype was refused")

    monkeypatch.setattr(api, "get_backend", boom)
    monkeypatch.setattr(api, "make_plan", boom)
    for call in (lambda: specot.generate("hi", target=str(tiny_model_dir), dtype=torch.int8),
                 lambda: specot.load_target(str(tiny_model_dir), dtype=torch.int8)):
        with pytest.raises(ValueError, match="dtype torch.int8 is not a floating-point dtype"):
            call()


@pytest.mark.parametrize("device,match", [("cuda", "not available"), ("foo", "unknown device"),
                                          ("cuda:7", "not available")])
def test_bad_device_before_loading(tiny_model_dir, capsys, no_loading, device, match):
    if torch.cuda.is_available() and device != "foo":
        pytest.skip("this machine has CUDA")
    assert cli_main(_gen(tiny_model_dir, "--device", device)) == 1
    assert match in _one_error_line(capsys)


def test_load_model_bad_device_and_paths(tmp_path, tiny_model_dir):
    from specot.models import load_model

    with pytest.raises(ValueError, match="unknown device 'foo'"):
        load_model(tiny_model_dir, device="foo")
    with pytest.raises(FileNotFoundError, match="it is empty"):
        load_model(tmp_path)
    with pytest.raises(OSError, match="HF_HUB_OFFLINE"):
        load_model("gpt2")


def test_theory_garbage_npy(tmp_path, capsys):
    good = tmp_path / "p.npy"
    np.save(good, np.full(4, 0.25))
    garbage = tmp_path / "g.npy"
    garbage.write_bytes(b"definitely not numpy")
    assert cli_main(["theory", "alpha", "--target-probs", str(garbage), "--draft-probs", str(good), "--n", "2"]) == 1
    assert "not a readable .npy array" in _one_error_line(capsys)
    garbage_pt = tmp_path / "g.pt"
    garbage_pt.write_bytes(b"not a torch file")
    assert cli_main(["theory", "alpha", "--target-probs", str(garbage_pt), "--draft-probs", str(good), "--n", "2"]) == 1
    assert "not a readable torch file" in _one_error_line(capsys)
    assert cli_main(["theory", "alpha", "--target-probs", str(tmp_path), "--draft-probs", str(good), "--n", "2"]) == 1
    assert "is a directory" in _one_error_line(capsys)


def test_generator_must_be_a_torch_generator(tiny_target, tiny_draft):
    from specot.drafting import ModelDrafter

    with pytest.raises(TypeError, match=r"generator must be a torch.Generator.*got int") as info:
        specot.speculative_generate(tiny_target, ModelDrafter(tiny_draft), [1, 2],
                                    specot.GenerationConfig(max_new_tokens=3), generator=123)
    assert "\n" not in str(info.value)
    p = torch.full((1, 4), 0.25)
    with pytest.raises(TypeError, match="torch.Generator"):
        specot.get_verifier("speculative").verify(p, p, torch.tensor([[1]]), 123)
    with pytest.raises(TypeError, match="seed must be an int"):
        specot.generate("hi", target=tiny_target, draft=ModelDrafter(tiny_draft), seed="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got int"):
        specot.generate("hi", target=tiny_target, draft=ModelDrafter(tiny_draft), generator=123)  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(5)
    a = specot.generate([1, 2], target=tiny_target, draft=ModelDrafter(tiny_draft), max_new_tokens=6, generator=g)
    b = specot.generate([1, 2], target=tiny_target, draft=ModelDrafter(tiny_draft), max_new_tokens=6,
                        generator=torch.Generator().manual_seed(5))
    assert a.result.tokens == b.result.tokens
    with pytest.raises(TypeError, match="target must be"):
        specot.generate("hi", target=123)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- lossy runs are visible
def test_lenience_needs_lenient_and_lenient_needs_lenience(tiny_model_dir, capsys, no_loading):
    assert cli_main(_gen(tiny_model_dir, "--lenience", "0.5")) == 1
    assert "--lenience applies only to --verifier lenient" in _one_error_line(capsys)
    assert cli_main(_gen(tiny_model_dir, "--verifier", "lenient")) == 1
    assert "needs its lenience explicitly" in _one_error_line(capsys)
    assert cli_main(_gen(tiny_model_dir, "--verifier", "kseq", "--verifier-param", "foo=1")) == 1
    assert "does not take 'foo'" in _one_error_line(capsys)
    assert cli_main(_gen(tiny_model_dir, "--verifier", "mentored")) == 1
    assert "is lossy" in _one_error_line(capsys)


def test_api_refuses_silent_lossy_parameters(tiny_target):
    with pytest.raises(ValueError, match="lossy"):
        specot.generate("hi", target=tiny_target, draft="ngram", verifier="lenient")
    with pytest.raises(ValueError, match="takes no lenience"):
        specot.generate("hi", target=tiny_target, draft="ngram", verifier="speculative", verifier_params={"lenience": 0.5})
    with pytest.raises(ValueError, match="does not take 'D'"):
        specot.generate("hi", target=tiny_target, draft="ngram", verifier="lenient", verifier_params={"D": 0.1})


def test_json_and_stats_line_report_the_verifier(tiny_model_dir, capsys):
    assert cli_main(_gen(tiny_model_dir, "--json", "--verifier", "lenient", "--lenience", "0.5")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verifier"] == "lenient" and out["verifier_params"] == {"lenience": 0.5}
    assert out["lossless"] is False and "lossy" in out["exactness"]
    assert cli_main(_gen(tiny_model_dir, "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verifier"] == "speculative" and out["lossless"] is True and out["dtype"] == "float32"
    assert "float32" in out["exactness"]
    assert cli_main(_gen(tiny_model_dir, "--verifier", "lenient", "--lenience", "0.5")) == 0
    stats = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[speculative]")]
    assert len(stats) == 1 and "verifier lenient(lenience=0.5): LOSSY" in stats[0]


def test_report_to_dict_has_lossless(tiny_target, tiny_draft):
    from specot.drafting import ModelDrafter

    rep = specot.generate([1, 2, 3], target=tiny_target, draft=ModelDrafter(tiny_draft), max_new_tokens=3,
                          verifier="lenient", verifier_params={"lenience": 0.7})
    d = rep.to_dict()
    assert d["lossless"] is False and d["verifier"] == "lenient" and d["verifier_params"] == {"lenience": 0.7}
    rep = specot.generate([1, 2, 3], target=tiny_target, draft=ModelDrafter(tiny_draft), max_new_tokens=3)
    assert rep.lossless and rep.to_dict()["lossless"] is True


# --------------------------------------------------------------------------- early checks
@pytest.mark.parametrize("extra,match", [
    (["--drafts", "2"], "needs a draft MODEL"),
    (["--tree", "prefix:2,x"], "needs a draft MODEL"),
    (["--max-new-tokens", "100000"], "context"),
    (["--verifier", "nope"], "unknown verifier"),
    (["--temperature", "-1"], "temperature"),  # NaN is refused by the parser: exit 2
    (["--dtype", "float8"], "unknown dtype"),
    (["--ngram-n", "0"], "ngram_n"),
    (["--ngram-corpus", "/no/such/corpus.txt"], "does not exist"),
    (["--cuda-graphs"], "--cuda-graphs needs --device cuda"),
])
def test_checked_before_loading(tiny_model_dir, capsys, no_loading, extra, match):
    assert cli_main(_gen(tiny_model_dir, *extra)) == 1
    assert match in _one_error_line(capsys)


@pytest.mark.parametrize("extra,match", [
    (["--tree", "prefix:2,x"], "expansion factors must be integers"),
    (["--drafts", "2", "--tree", "wor", "--verifier", "kseq"], "cannot be verified by 'kseq'"),
    (["--tree", "topology:/no/such/tree.json"], "tree.json"),
    (["--drafts", "0"], "n (--drafts) must be an integer >= 1"),
])
def test_tree_checked_before_loading(tiny_model_dir, capsys, no_loading, extra, match):
    args = _gen(tiny_model_dir, *extra)
    args[args.index("ngram")] = str(tiny_model_dir)
    assert cli_main(args) == 1
    assert match in _one_error_line(capsys)


@pytest.mark.parametrize("drafts", [0, -1, True, 2.0])
def test_drafts_below_one_refused_not_replaced(tiny_model_dir, capsys, no_loading, drafts):
    # a suffix+MODEL draft once read drafts=0 as "unset" and drew 2 drafts per node without a word
    for draft in (f"suffix+{tiny_model_dir}", str(tiny_model_dir), "suffix"):
        with pytest.raises(ValueError, match=r"n \(--drafts\) must be an integer >= 1"):
            specot.generate("the cat", target=str(tiny_model_dir), draft=draft, n=drafts, max_new_tokens=2)
    if drafts == 0:
        args = _gen(tiny_model_dir, "--drafts", "0")
        args[args.index("ngram")] = f"suffix+{tiny_model_dir}"
        assert cli_main(args) == 1
        assert "n (--drafts) must be an integer >= 1" in _one_error_line(capsys)


def test_empty_raw_prompt_and_missing_draft_before_loading(tiny_model_dir, capsys, no_loading, tmp_path):
    args = _gen(tiny_model_dir)
    args[args.index("the cat")] = ""
    assert cli_main(args) == 1
    assert "prompt is empty" in _one_error_line(capsys)
    args = _gen(tiny_model_dir)
    args[args.index("ngram")] = str(tmp_path / "nodraft")
    assert cli_main(args) == 1
    assert "does not exist" in _one_error_line(capsys)


def test_otm_refused_for_real_vocabularies(capsys, no_loading):
    assert cli_main(["generate", "--prompt", "hi", "--verifier", "otm", "--max-new-tokens", "4"]) == 1
    line = _one_error_line(capsys)
    assert "verifier 'otm' cannot run here" in line and "49152" in line


def test_otm_help_says_what_it_is_for(capsys):
    with pytest.raises(SystemExit):
        cli_main(["generate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "otm is the exact LP optimum" in out and "tiny vocabularies" in out
    assert "greedy (--temperature 0) equals autoregressive decoding in float32" in out


# --------------------------------------------------------------------------- Ctrl-C
def test_ctrl_c_exits_130_with_what_was_generated(tiny_model_dir, capsys, monkeypatch):
    def interrupted(target, drafter, ids, cfg, *, verifier=None, on_tokens=None, **kw):
        on_tokens([1, 2])
        on_tokens([3])
        raise KeyboardInterrupt

    monkeypatch.setattr(plan_run, "speculative_generate", interrupted)
    assert cli_main(_gen(tiny_model_dir)) == 130
    cap = capsys.readouterr()
    assert "the a cat" in cap.out  # what was streamed stays on screen
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "interrupted during the speculative run after 3 tokens" in lines[0]
    assert "Traceback" not in cap.err
    assert cli_main(_gen(tiny_model_dir, "--json")) == 130
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["interrupted"] is True and out["tokens"] == [1, 2, 3] and out["new_tokens"] == 3


def test_api_interrupt_carries_tokens(tiny_target, tiny_draft):
    from specot.drafting import ModelDrafter

    seen: list[str] = []

    def on_text(piece: str) -> None:
        seen.append(piece)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        specot.generate([1, 2, 3], target=tiny_target, draft=ModelDrafter(tiny_draft), max_new_tokens=8,
                        on_text=on_text)
    exc = info.value
    assert isinstance(exc, api.GenerationInterrupted) and exc.phase == "speculative"
    assert 1 <= len(exc.tokens) <= 8


def test_generic_ctrl_c_in_any_command(capsys, monkeypatch):
    import specot.cli.theory_run as theory

    def boom(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(theory, "cmd_speedup", boom)  # the handler is looked up when the command runs
    rc = cli_main(["theory", "speedup", "--alpha", "0.8", "--c", "0.1"])
    assert rc == 130 and "interrupted" in capsys.readouterr().err


# --------------------------------------------------------------------------- speedup over equal lengths
def test_baseline_decodes_as_many_tokens_and_repeats(tiny_model_dir, capsys):
    rep = specot.generate("the cat sat", target=str(tiny_model_dir), draft=str(tiny_model_dir), chat=False,
                          temperature=1.0, max_new_tokens=12, seed=3, baseline=True, repeats=2, dtype="float32")
    assert rep.baseline is not None
    assert rep.baseline.stats.new_tokens == rep.result.stats.new_tokens == rep.timing["tokens"]
    assert len(rep.speedups) == 2 and rep.speedup == pytest.approx(sorted(rep.speedups)[0] / 2 + sorted(rep.speedups)[1] / 2)
    assert {"load_average", "cpu_count", "busy"} <= set(rep.timing)
    rc = cli_main(["generate", "--prompt", "the cat", "--target", str(tiny_model_dir), "--draft", str(tiny_model_dir),
                   "--raw", "--dtype", "float32", "--max-new-tokens", "6", "--baseline", "--repeats", "3"])
    assert rc == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("speedup over autoregressive")]
    assert len(line) == 1 and "median of 3 runs" in line[0] and "tokens of the same prompt" in line[0]
    with pytest.raises(ValueError, match="repeats"):
        specot.generate("the", target=str(tiny_model_dir), repeats=0)


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_repeats_decode_a_fresh_answer_per_pair_when_sampling(tiny_model_dir, monkeypatch, temperature):
    """At T > 0 every (speculative, autoregressive) pair of ``repeats`` decodes a fresh sample, so the
    median speedup is over answers, not over timings of one answer; at T = 0 the same text. Each
    baseline decodes exactly as many tokens as its own pair's speculative run."""
    spec_runs, base_lens = [], []
    real_spec, real_ar = plan_run.speculative_generate, measure.autoregressive_generate

    def spec(*a, **kw):
        out = real_spec(*a, **kw)
        spec_runs.append(list(out.tokens))
        return out

    def ar(tgt, ids, cfg, **kw):
        base_lens.append(cfg.max_new_tokens)
        return real_ar(tgt, ids, cfg, **kw)

    monkeypatch.setattr(plan_run, "speculative_generate", spec)
    monkeypatch.setattr(measure, "autoregressive_generate", ar)
    rep = specot.generate("the cat sat", target=str(tiny_model_dir), draft=str(tiny_model_dir), chat=False,
                          temperature=temperature, max_new_tokens=16, seed=5, baseline=True, repeats=3, dtype="float32")
    assert len(spec_runs) == len(base_lens) == len(rep.speedups) == 3
    assert base_lens == [len(t) for t in spec_runs]
    assert spec_runs[0] == list(rep.result.tokens)
    distinct = {tuple(t) for t in spec_runs}
    assert len(distinct) == (3 if temperature > 0 else 1)


def test_environment_info_records_versions_and_cpu():
    from specot.envinfo import environment_info

    info = environment_info()
    assert json.loads(json.dumps(info)) == info
    for key in ("torch", "transformers", "numpy", "scipy"):
        assert info["versions"][key]
    assert set(info["cpu_flags"]) >= {"avx512_bf16", "amx_bf16"}
    assert info["torch_threads"] >= 1 and "load_average" in info and isinstance(info["busy"], bool)


def test_loading_prints_no_transformers_bars_or_warnings(tiny_model_dir, capfd):
    from transformers.utils import logging as hf_logging

    from specot.models import load_model

    before = (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled())
    capfd.readouterr()
    load_model(tiny_model_dir, dtype="float32")
    cap = capfd.readouterr()
    assert "Loading weights" not in cap.err and "it/s" not in cap.err and not cap.out
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == before  # restored


@pytest.mark.parametrize("draft,extra,match", [
    ("suffix+ngram", [], "after 'suffix+' name a draft MODEL"),
    ("suffix+", [], "after 'suffix+' name a draft MODEL"),
    ("suffix+eagle:/no/such/head", [], "no config.json"),
    ("suffix+MODEL", ["--drafts", "2", "--verifier", "kseq"], "cannot be verified by 'kseq'"),
    ("suffix+MODEL", ["--drafts", "2", "--tree", "wor"], "GREEDY-law trees"),
])
def test_hybrid_draft_checked_before_loading(tiny_model_dir, capsys, no_loading, draft, extra, match):
    args = _gen(tiny_model_dir, *extra)
    args[args.index("ngram")] = draft.replace("MODEL", str(tiny_model_dir))
    assert cli_main(args) == 1
    assert match in _one_error_line(capsys)


def test_a_warning_prints_as_one_line(tiny_model_dir, capsys, monkeypatch):
    load = api.load_target

    def warn_then_load(*a, **k):
        warnings.simplefilter("always")  # this module ignores warnings; main() restores the filters
        warnings.warn("could not cache the model\nin /nowhere")
        return load(*a, **k)

    monkeypatch.setattr(api, "load_target", warn_then_load)
    assert cli_main(_gen(tiny_model_dir)) == 0
    err = capsys.readouterr().err
    assert "specot: warning: could not cache the model in /nowhere\n" in err
    assert "UserWarning" not in err and "warnings.warn" not in err
