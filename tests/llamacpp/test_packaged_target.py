"""A packaged target on llama.cpp: the name resolves to the assembled GGUF, generation ends at the
GGUF's end-of-generation tokens, the chat template comes from the GGUF. The stand-in package holds
the embedded SmolLM2 GGUF as its one part (whose chat template uses ``<|im_start|>`` /
``<|im_end|>`` as Qwen's does); no test needs the 1.1 GB model."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import pytest

import specot
from specot.models import packaged
from specot.models.cache_integrity import file_sha256
from specot.models.embedded import embedded_gguf
from specot.plan.backends import choose_backend
import specot_llamacpp.loading as loading
from specot_llamacpp import load_target
from specot_llamacpp.loading import end_of_generation_ids


@pytest.fixture
def smollm2_packaged(tmp_path, monkeypatch):
    """A packaged model named ``smollm2-packaged`` whose one part (a link to the embedded GGUF) is
    installed on a temporary ``sys.path``; the cache in ``tmp_path``."""
    directory, name = embedded_gguf()
    gguf = directory / name
    site = tmp_path / "site"
    data = "specot_test_gguf_part1/data/part01.bin"
    (site / data).parent.mkdir(parents=True)
    (site / data).symlink_to(gguf)
    info = site / "specot_test_gguf_part1-0.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: specot-test-gguf-part1\nVersion: 0.2.0\n")
    size = gguf.stat().st_size
    digest = file_sha256(gguf)
    b64 = base64.urlsafe_b64encode(bytes.fromhex(digest)).rstrip(b"=").decode()
    (info / "RECORD").write_text(f"{data},sha256={b64},{size}\n")
    model = packaged.PackagedModel(name="smollm2-packaged", label="SmolLM2 packaged", parts=(("specot-test-gguf-part1", data),),
                                   version="0.2.0", file_name="smollm2-packaged.gguf", size=size, sha256=digest,
                                   license="Apache-2.0", extra="tiny", vocab_size=49152, context=512)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(packaged.PACKAGED_MODELS, model.name, model)
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECOT_NO_CACHE", raising=False)
    return model


def _id(tokenizer, text: str) -> int:
    ids = tokenizer.convert_tokens_to_ids([text])
    assert len(ids) == 1 and ids[0] is not None
    return int(ids[0])


def test_the_end_of_generation_tokens_come_from_the_gguf(target):
    directory, name = embedded_gguf()
    tok = target.tokenizer
    eog = end_of_generation_ids(directory / name, tok)
    assert {_id(tok, "<|im_end|>"), _id(tok, "<|endoftext|>")} <= eog  # the end of a turn and of a text
    assert target.eos_token_ids <= eog  # the GGUF's EOS among them
    assert "<|im_start|>" in tok.chat_template and "<|im_end|>" in tok.chat_template


def test_tokens_the_tokenizer_holds_as_text_do_not_end_generation(target):
    """llama.cpp names some end-of-generation tokens by their text alone (Qwen's ``</s>``, an
    ordinary word piece there): only those the tokenizer holds as special tokens are kept, and the
    GGUF's EOS always."""
    directory, name = embedded_gguf()
    full = end_of_generation_ids(directory / name, target.tokenizer)
    eos = _id(target.tokenizer, "<|im_end|>")
    only_eos = SimpleNamespace(added_tokens_decoder={eos: SimpleNamespace(special=True)})
    assert end_of_generation_ids(directory / name, only_eos) == {eos} | (target.eos_token_ids & full)
    nothing_special = SimpleNamespace(added_tokens_decoder={i: SimpleNamespace(special=False) for i in full})
    assert end_of_generation_ids(directory / name, nothing_special) <= target.eos_token_ids


def test_a_packaged_name_loads_its_assembled_gguf_on_llamacpp(smollm2_packaged, target, tmp_path):
    model = smollm2_packaged
    assert choose_backend("auto", model.name, device="cpu", dtype="auto", automatic=True) == "llamacpp"
    t = load_target(model.name, tokenizer=target.tokenizer, n_threads=1)
    try:
        assert t.path == tmp_path / "cache" / model.cache_name / model.file_name
        assert t.name == model.label and t.max_context == model.context  # the entry's context by default
        tok = target.tokenizer
        assert {_id(tok, "<|im_end|>"), _id(tok, "<|endoftext|>")} <= t.eos_token_ids
        prompt = t.encode_prompt("Say hello.")
        assert prompt == target.encode_prompt("Say hello.")  # the GGUF's chat template
        t.reset()
        target.reset()
        ours, ref = t.logits_after(prompt)[0], target.logits_after(prompt)[0]
        assert int(ours.argmax()) == int(ref.argmax())  # the same file, the same model
    finally:
        t.close()


def test_the_api_loads_a_packaged_name_on_llamacpp_by_default(smollm2_packaged, monkeypatch):
    seen = []
    monkeypatch.setattr(loading, "load_target", lambda spec, **kw: seen.append(spec) or "loaded")
    assert specot.load_target(smollm2_packaged.name) == "loaded" and seen == [smollm2_packaged.name]
