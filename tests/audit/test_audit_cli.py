"""``specot audit``: the command's recheck of a saved run and its one-line errors (no model loads)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specot.audit.run import AuditRow, rows_to_json
from specot.audit.stats import audit_exact_law
from specot.cli.main import main


def _saved(tmp_path, tamper=False):
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.3, 0.2])
    good = rng.choice(3, (600, 2), p=p)
    bad = rng.choice(3, (600, 2), p=[0.2, 0.3, 0.5])
    law = lambda pre: np.tile(p, (len(pre), 1))  # noqa: E731
    rows = [AuditRow("synthetic", m, "T=1", dict(temperature=1.0, top_p=1.0, top_k=None),
                     audit_exact_law(s, law), "exact law", 0.1, (1, 2)) for m, s in (("good", good), ("bad", bad))]
    data = json.loads(rows_to_json(rows, dict(command="test")))
    if tamper:
        data["rows"][1]["label"] = "exact"
    f = tmp_path / "audit.json"
    f.write_text(json.dumps(data))
    return f


def test_recheck_recomputes_and_exits_3_on_a_failure(tmp_path, capsys):
    assert main(["audit", "--recheck", str(_saved(tmp_path)), "--json"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in out["rows"]] == ["exact", "NOT EXACT"]


def test_recheck_warns_when_a_saved_label_disagrees(tmp_path, capsys):
    assert main(["audit", "--recheck", str(_saved(tmp_path, tamper=True))]) == 3
    captured = capsys.readouterr()
    assert "saved exact, recomputed NOT EXACT" in captured.err
    assert "NOT EXACT" in captured.out


def test_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert main(["audit", "--recheck", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("specot: error: --recheck ") and "x.json" in err and "not a saved specot audit" in err
    assert main(["audit", "--engine", "server"]) == 1
    assert "--server URL" in capsys.readouterr().err
    try:
        import vllm  # noqa: F401
    except ImportError:  # the core's environment: the vLLM engine names its own
        assert main(["audit", "--engine", "vllm", "--temperature", "1"]) == 1
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and ".venv-vllm/bin/specot audit --engine vllm" in err
    with pytest.raises(SystemExit) as exc:
        main(["audit", "--alpha", "2"])
    assert exc.value.code == 2


def test_vllm_harness_verdicts(tmp_path, capsys):
    data = {"n": 1000, "vocab": 5, "temperature": 0.7, "alpha": 1e-3, "results": {
        "stock/sampled": {"first": [0.0, 4], "second": [1.0, 0], "accepted_first": 0.0, "exact": False},
        "fixed/sampled": {"first": [0.3, 4], "second": [0.0009, 4], "accepted_first": 0.34, "exact": False}}}
    f = tmp_path / "h.json"
    f.write_text(json.dumps(data))
    assert main(["audit", "--vllm-harness", str(f)]) == 3
    out = capsys.readouterr().out
    assert "| stock/sampled | NOT EXACT | 0 |" in out
    assert "| fixed/sampled | exact | 0.0018 |" in out  # Holm over the row's two checks: 2 × 0.0009


def test_the_drafter_is_the_one_named(capsys):
    """``--draft`` names the drafter of specot's jobs (any kind, e.g. a draft with another tokenizer);
    a malformed name is refused in one line before any model loads."""
    from specot.cli import audit_run

    class Models:
        asked: list = []

        def target(self, backend):
            return f"target-{backend}"

        def drafter(self, backend, draft="distilled"):
            self.asked.append((backend, draft))
            return None

    args = audit_run.argparse.Namespace(backend="llamacpp", no_memo=True, samples=10, draft="xvocab-slem:gemma3-270m")
    models = Models()
    jobs = audit_run._jobs("specot", ["plain"], args, models)
    jobs[0].make()
    assert models.asked == [("llamacpp", "xvocab-slem:gemma3-270m")]
    assert main(["audit", "--draft", "xvocab:", "--method", "speculative"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("specot: error:") and "names no model" in err and "\n" not in err


def test_the_target_is_the_one_named(monkeypatch, capsys):
    """``--target`` names specot's target (loaded once, its own tokenizer encodes the prompt); with
    another engine, or the fixed set of ``--all``, it is refused in one line before any model loads."""
    from specot.cli import audit_run

    asked = []

    class Target:
        def encode_prompt(self, text):
            return [len(text)]

    monkeypatch.setattr(audit_run, "load_target", lambda spec, **kw: asked.append((spec, kw.get("backend"))) or Target())
    models = audit_run._Models("qwen2.5-coder-1.5b")
    models.target("llamacpp")
    assert asked == [("qwen2.5-coder-1.5b", "llamacpp")]
    assert audit_run._prompt_ids(models, "abc") == [3] and len(asked) == 1  # the loaded target's tokenizer
    assert audit_run._Models().spec is None  # the default: the embedded model
    for argv in (["--engine", "hf"], ["--all"]):
        assert main(["audit", "--target", "x.gguf", *argv]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("specot: error: --target 'x.gguf'") and "\n" not in err
    assert asked == [("qwen2.5-coder-1.5b", "llamacpp")]  # nothing loaded for the refused runs
