"""A draft model's verdict on this machine (:mod:`specot.plan.draft_verdict`) and ``auto`` reading it:
the speedup model on hand-computed iterations, the cache (round trip, temperature classes, another
target, a damaged entry), and the choice — the table alone without verdicts, the table with the draft
model added where one pays, the table with the reason where none does, never with tree options.
No model runs: the verdicts are written directly (``specot calibrate --draft`` measures them, tested
in tests/llamacpp)."""

from __future__ import annotations

import json

import pytest

from specot.plan import make_plan
from specot.plan.auto import auto_choice, with_draft_model
from specot.plan.draft_verdict import (PAYS_AT, DraftVerdict, best_verdict, draft_verdict_key, predicted_speedup,
                                       read_verdicts, store_verdict)

specot_llamacpp = pytest.importorskip("specot_llamacpp")
from specot_llamacpp.auto import AUTO_TABLE  # noqa: E402


def _ratio(b: int) -> float:  # r(B) = 1 + (B - 1) / 3
    return 1.0 + (b - 1) / 3.0


def test_predicted_speedup_prices_each_iteration_with_the_curve_and_the_draft_passes():
    # iterations: a plain step (1 token, r(1) = 1), 3 nodes with 3 accepted (4 tokens, r(4) = 2),
    # 3 nodes with 1 accepted (2 tokens, r(4) = 2); 6 draft passes at d = 0.1
    assert predicted_speedup([0, 3, 3], [1, 4, 2], _ratio, 0.6) == pytest.approx(7 / 5.6)
    assert predicted_speedup([0, 0], [1, 1], _ratio) == 1.0  # plain decoding is 1 by construction
    for sizes, emitted in (([], []), ([1], [1, 2])):
        with pytest.raises(ValueError, match="one length"):
            predicted_speedup(sizes, emitted, _ratio)


def test_a_verdict_pays_from_the_margin_and_names_its_files_by_name():
    v = DraftVerdict("xvocab-slem:/some/dir/small.gguf", 0.0, PAYS_AT, 1.2, 1.3, 2.0, 0.16, 144)
    assert v.pays and not DraftVerdict(v.draft, 0.0, PAYS_AT - 1e-9, 2.0, 2.0, 2.0, 0.16, 144).pays
    assert "xvocab-slem:small.gguf measured 1.10x over auto without it" in v.why() and "/some/dir" not in v.why()
    assert best_verdict([]) is None
    assert best_verdict([v, DraftVerdict("b.gguf", 0.0, 1.5, 1.0, 1.0, 1.5, 0.1, 10)]).draft == "b.gguf"


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A cache of its own; a target file and two draft files (only their names and sizes matter)."""
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path / "cache"))
    out = {}
    for name, size in (("target.gguf", 100), ("other.gguf", 101), ("d1.gguf", 10), ("d2.gguf", 11)):
        (tmp_path / name).write_bytes(b"\0" * size)
        out[name] = tmp_path / name
    return out


def _verdict(draft, T, measured):
    return DraftVerdict(f"xvocab-slem:{draft}", T, measured, measured + 0.01, measured + 0.02, 2.0, 0.16, 144)


def test_verdicts_are_cached_per_target_and_temperature_class(files):
    key = draft_verdict_key(str(files["target.gguf"]), "llamacpp")
    assert key["target"] == {"file": "target.gguf", "size": 100} and key["backend"] == "llamacpp"
    assert draft_verdict_key("no-such-model", "llamacpp") is None and read_verdicts(None, 0.0) == []
    embedded = draft_verdict_key(None, "llamacpp")  # the embedded target, unnamed or by its name
    assert embedded is not None and draft_verdict_key("smollm2", "llamacpp") == embedded
    assert read_verdicts(key, 0.0) == []
    store_verdict(key, _verdict(files["d1.gguf"], 0.0, 1.3))
    store_verdict(key, _verdict(files["d1.gguf"], 1.0, 0.9))
    store_verdict(key, _verdict(files["d2.gguf"], 0.0, 1.2))
    greedy = sorted(read_verdicts(key, 0.0), key=lambda v: v.measured)
    assert [(v.measured, v.temperature) for v in greedy] == [(1.2, 0.0), (1.3, 0.0)]
    assert greedy[1].draft == f"xvocab-slem:{files['d1.gguf']}" and greedy[1].measured_at
    assert [v.measured for v in read_verdicts(key, 0.6)] == [0.9]  # any T > 0 reads the T = 1 verdict
    store_verdict(key, _verdict(files["d1.gguf"], 0.0, 1.05))  # measured again: replaced, not added
    assert sorted(v.measured for v in read_verdicts(key, 0.0)) == [1.05, 1.2]
    assert read_verdicts(draft_verdict_key(str(files["other.gguf"]), "llamacpp"), 0.0) == []


def test_a_damaged_verdict_is_left_out(files):
    key = draft_verdict_key(str(files["target.gguf"]), "llamacpp")
    store_verdict(key, _verdict(files["d1.gguf"], 0.0, 1.3))
    store_verdict(key, _verdict(files["d2.gguf"], 0.0, 1.2))
    entries = list((files["target.gguf"].parent / "cache" / "calibration").glob("*.json"))
    obj = json.loads(entries[0].read_text())
    obj["measurement"]["values"]["measured"] = -1.0  # an impossible speedup
    entries[0].write_text(json.dumps(obj))
    assert len(read_verdicts(key, 0.0)) == 1
    with pytest.raises(ValueError, match="impossible"):
        store_verdict(key, DraftVerdict("x.gguf", 0.0, 0.0, 1.0, 1.0, 1.0, 0.1, 1))


def test_auto_adds_a_draft_model_only_where_its_verdict_pays(files):
    target = str(files["target.gguf"])
    key = draft_verdict_key(target, "llamacpp")
    own0, own1 = AUTO_TABLE.at(0.0), AUTO_TABLE.at(1.0)
    assert auto_choice(target, backend="llamacpp", temperature=0.0) == own0  # nothing measured: the table
    store_verdict(key, _verdict(files["d1.gguf"], 0.0, 1.3))
    store_verdict(key, _verdict(files["d2.gguf"], 0.0, 1.2))
    store_verdict(key, _verdict(files["d1.gguf"], 1.0, 0.9))
    choice = auto_choice(target, backend="llamacpp", temperature=0.0)
    assert choice.draft == f"suffix+xvocab-slem:{files['d1.gguf']}"  # the fastest, beside the table's suffix
    assert choice.options == own0.options and choice.gamma == own0.gamma and choice.children is None
    assert choice.reason.startswith("a draft model pays here: xvocab-slem:d1.gguf measured 1.30x")
    at1 = auto_choice(target, backend="llamacpp", temperature=1.0)
    assert (at1.draft, at1.options) == (own1.draft, own1.options)
    assert at1.reason.startswith("no draft model pays here: xvocab-slem:d1.gguf measured 0.90x")
    assert auto_choice(target, backend="llamacpp", temperature=0.0, n=2) == own0  # the caller's tree: as asked
    files["d1.gguf"].unlink()  # a verdict whose draft is gone is not planned
    assert auto_choice(target, backend="llamacpp", temperature=0.0).draft == f"suffix+xvocab-slem:{files['d2.gguf']}"


def test_with_draft_model_keeps_a_table_that_is_not_suffix_decoding_out():
    from specot.plan.auto import AutoChoice

    own = AUTO_TABLE.at(0.0)
    assert with_draft_model(own, "d.gguf").draft == "suffix+d.gguf"
    assert with_draft_model(own, "suffix+d.gguf").draft == "suffix+d.gguf"  # a hybrid as measured
    assert with_draft_model(AutoChoice("ngram", None, 3), "d.gguf") == AutoChoice("d.gguf", None, None)


def test_the_plan_says_why_auto_drafted_with_a_model(files, monkeypatch):
    """On a real GGUF (the embedded SmolLM2) as target and as its own plain draft model: the plan is
    the hybrid with the table's suffix options, and its description carries the reason."""
    from specot.models.embedded import embedded_gguf

    directory, name = embedded_gguf()
    gguf = str(directory / name)
    store_verdict(draft_verdict_key(gguf, "llamacpp"), DraftVerdict(gguf, 0.0, 1.4, 1.4, 1.45, 2.1, 0.2, 144))
    plan = make_plan("auto", target=gguf, backend="llamacpp", temperature=0.0)
    assert plan.draft.name == f"suffix+{gguf}" and plan.tree is None and plan.gamma == AUTO_TABLE.at(0.0).gamma
    assert plan.draft.option("suffix_copy_anchor") is True and plan.draft.option("suffix_min_match") == 4
    assert "(auto: a draft model pays here:" in plan.describe() and plan.to_dict()["reason"] == plan.reason
    plain = make_plan("auto", target=gguf, backend="llamacpp", temperature=1.0)
    assert plain.draft.name == "suffix" and plain.reason == ""


def test_the_embedded_gguf_drafts_by_its_name():
    """``xvocab-slem:smollm2`` names the embedded SmolLM2 GGUF (the draft of ``make demo``'s verdict)."""
    from specot.models.embedded import embedded_gguf
    from specot.plan import parse_draft
    from specot.plan.kinds.xvocab import _source_file

    directory, name = embedded_gguf()
    assert _source_file("smollm2") == (str(directory), name)
    spec = parse_draft("xvocab-slem:smollm2")
    spec.check()
    assert spec.source == "smollm2"
