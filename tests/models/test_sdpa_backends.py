"""The attention kernels of specot's passes on CUDA: cuDNN's SDPA kernel left out
(:func:`specot.models.device.sdpa_without_cudnn`), because it re-plans at every new pass shape.

CI has no GPU, so these tests check the backend flags the context sets (PyTorch keeps them on CPU
builds too) and that the target's passes and the EAGLE head's attention run inside it; the speed
itself was measured on a GPU (docs/results.md, "GPU runs: An H200, eager")."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from model_helpers import tiny_lm
from torch.nn.attention import SDPBackend

import specot.drafting.eagle.head as eagle_mod  # the head attends inside the context
import specot.models.hf as hf_mod
from specot.models.device import CUDA_SDPA_BACKENDS, sdpa_without_cudnn

FLAGS = {
    "cudnn": torch.backends.cuda.cudnn_sdp_enabled,
    "flash": torch.backends.cuda.flash_sdp_enabled,
    "efficient": torch.backends.cuda.mem_efficient_sdp_enabled,
    "math": torch.backends.cuda.math_sdp_enabled,
}


def _flags() -> dict[str, bool]:
    return {k: f() for k, f in FLAGS.items()}


def test_cuda_context_leaves_out_cudnn_only_and_restores():
    before = _flags()
    assert before["cudnn"], "PyTorch's default has cuDNN attention on; the test needs it on to see it go"
    with sdpa_without_cudnn("cuda:0"):
        assert _flags() == {"cudnn": False, "flash": True, "efficient": True, "math": True}
    assert _flags() == before
    with pytest.raises(RuntimeError), sdpa_without_cudnn(torch.device("cuda")):
        raise RuntimeError("boom")
    assert _flags() == before  # restored on an exception too
    assert SDPBackend.CUDNN_ATTENTION not in CUDA_SDPA_BACKENDS


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu"), "meta"])
def test_other_devices_change_nothing(device):
    before = _flags()
    with sdpa_without_cudnn(device):
        assert _flags() == before


def _as_if_cuda(seen: list):
    """A stand-in for sdpa_without_cudnn that records the device and applies the CUDA context."""

    def ctx(device):
        seen.append(torch.device(device).type)
        return sdpa_without_cudnn("cuda")

    return ctx


def test_target_passes_run_inside_the_context(monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(hf_mod, "sdpa_without_cudnn", _as_if_cuda(seen))
    lm = tiny_lm(0)
    during: list[bool] = []
    lm.model.register_forward_pre_hook(lambda *_: during.append(torch.backends.cuda.cudnn_sdp_enabled()))
    lm.logits_after([1, 2, 3])  # the prefill
    lm.forward([4, 5])  # a verification-sized pass
    lm.forward_tree([6, 7], [len(lm.cached_ids) - 1, len(lm.cached_ids) - 1])  # a draft tree
    assert during == [False, False, False] and seen == ["cpu"] * 3
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_eagle_attention_runs_inside_the_context(monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(eagle_mod, "sdpa_without_cudnn", _as_if_cuda(seen))
    during: list[bool] = []
    real = F.scaled_dot_product_attention

    def spy(*a, **k):
        during.append(torch.backends.cuda.cudnn_sdp_enabled())
        return real(*a, **k)

    monkeypatch.setattr(eagle_mod.F, "scaled_dot_product_attention", spy)
    q, keys = torch.randn(4, 2, 8), torch.randn(2, 5, 8)
    out = eagle_mod._attend(q, keys, torch.randn(2, 5, 8), torch.ones(2, 5, dtype=torch.bool))
    assert out.shape == (4, 2, 8) and during == [False] and seen == ["cpu"]
