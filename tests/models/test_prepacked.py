"""PrepackedLinear: oneDNN over reordered weights gives F.linear's product, falls back wherever it
does not apply, follows weight updates, and leaves decoding exact."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from specot.engine import GenerationConfig, autoregressive_generate, tree_generate
from specot.drafting import ModelDrafter
from specot.drafting.tree import TreeSpec
from specot.laws import DraftLaw
from specot.models import CausalLM
from specot.models.device import PrepackedLinear, install_prepacked_linears, remove_prepacked_linears
from specot.sampling import SamplingConfig
from specot.verifiers import get_verifier

from model_helpers import tiny_llama

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")


def _packs(dtype: torch.dtype) -> bool:
    return PrepackedLinear.wrap(torch.nn.Linear(8, 4, dtype=dtype))._packed is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_same_product_as_f_linear_for_any_row_count(dtype, bias):
    if not _packs(dtype):
        pytest.skip(f"oneDNN cannot reorder {dtype} weights on this CPU")
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 200, bias=bias, dtype=dtype)
    new = PrepackedLinear.wrap(lin)
    assert new.weight is lin.weight and new.bias is lin.bias  # shared, not copied
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    with torch.no_grad():
        for shape in [(1, 96), (2, 96), (7, 96), (19, 96), (40, 96), (1, 5, 96), (2, 3, 96), (0, 96)]:
            x = torch.randn(shape, dtype=dtype)
            out = new(x)
            assert out.shape == (*shape[:-1], 200) and out.dtype == dtype
            torch.testing.assert_close(out.float(), torch.nn.functional.linear(x, lin.weight, lin.bias).float(), **tol)


def test_falls_back_to_f_linear_where_prepacking_does_not_apply(monkeypatch):
    torch.manual_seed(1)
    lin = torch.nn.Linear(16, 8)
    new = PrepackedLinear.wrap(lin)
    calls = []
    real = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(3, 16)
    with torch.no_grad():
        new(x)
    assert calls == []  # the prepacked path
    y = new(x)  # gradients recorded for the weight: F.linear, so backward is exact
    assert calls == [1]
    y.sum().backward()
    torch.testing.assert_close(lin.weight.grad, x.sum(0).expand(8, 16))
    f64 = PrepackedLinear.wrap(torch.nn.Linear(16, 8, dtype=torch.float64))
    assert f64._packed is None  # oneDNN has no float64 matmul: F.linear
    with torch.no_grad():
        f64(torch.randn(2, 16, dtype=torch.float64))
    assert calls == [1, 1]


def test_follows_in_place_updates_and_new_weights():
    torch.manual_seed(2)
    lin = torch.nn.Linear(16, 8, bias=False)
    new = PrepackedLinear.wrap(lin)
    x = torch.randn(4, 16)
    with torch.no_grad():
        lin.weight.mul_(-2.0)  # an optimizer step updates in place
        torch.testing.assert_close(new(x), x @ lin.weight.t())
        new.weight = torch.nn.Parameter(torch.randn(8, 16))
        torch.testing.assert_close(new(x), x @ new.weight.t())


def test_install_keeps_parameters_ties_and_outputs_and_removal_restores_nn_linear():
    model = tiny_llama(0, dtype=torch.float32, vocab=40)
    model.lm_head.weight = model.model.embed_tokens.weight  # a tied head, as SmolLM2's
    ids = torch.tensor([[1, 5, 2, 9, 3, 7, 11]])
    keys = list(model.state_dict())
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    n_linear = sum(type(m) is torch.nn.Linear for m in model.modules())
    assert install_prepacked_linears(model) == 0  # every layer is below PREPACK_MIN_WEIGHTS: F.linear is faster
    assert install_prepacked_linears(model, min_weights=1) == n_linear > 0
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied
    assert list(model.state_dict()) == keys  # the reordered copies are not state
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, ref, rtol=1e-5, atol=1e-5)
    clone = copy.deepcopy(model)  # the reordered copies are dropped, and made again on use
    with torch.no_grad():
        torch.testing.assert_close(clone(input_ids=ids).logits, ref, rtol=1e-5, atol=1e-5)
    pickle.loads(pickle.dumps(model.lm_head))
    assert install_prepacked_linears(model, min_weights=1) == 0  # nothing left to replace
    assert remove_prepacked_linears(model) == n_linear
    assert sum(type(m) is torch.nn.Linear for m in model.modules()) == n_linear
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, ref)  # F.linear again, bit for bit


def test_causal_lm_installs_them_on_large_layers_and_greedy_tree_decoding_stays_exact():
    """CausalLM prepacks the layers of at least PREPACK_MIN_WEIGHTS weights on the CPU; greedy
    draft-tree decoding with a prepacked float32 target and draft equals autoregressive decoding
    token for token (the exactness contract in float32)."""
    wide = CausalLM(tiny_llama(2, dtype=torch.float32, vocab=16, hidden=512), name="wide")  # MLP 512 x 1024
    mlp = wide.model.model.layers[0].mlp
    assert isinstance(mlp.down_proj, PrepackedLinear) and isinstance(mlp.up_proj, PrepackedLinear)
    assert type(wide.model.model.layers[0].self_attn.k_proj) is torch.nn.Linear  # 256 x 512: below the threshold
    target = CausalLM(tiny_llama(0, dtype=torch.float32, vocab=40, layers=3), name="t")
    draft = CausalLM(tiny_llama(1, dtype=torch.float32, vocab=40), name="d")
    assert type(target.model.lm_head) is torch.nn.Linear  # tiny layers keep F.linear
    for lm in (target, draft):
        assert install_prepacked_linears(lm.model, min_weights=1) > 0
    assert isinstance(target.model.lm_head, PrepackedLinear)
    cfg = GenerationConfig(max_new_tokens=24, sampling=SamplingConfig(temperature=0.0), seed=0, stop_at_eos=False)
    for prompt in ([1, 2, 3], [7, 30, 4, 4, 9]):
        ar = autoregressive_generate(target, prompt, cfg).tokens
        spec = TreeSpec.sequences(3, 3, DraftLaw.GREEDY)
        got = tree_generate(target, ModelDrafter(draft), prompt, spec, cfg, verifier=get_verifier("greedy")).tokens
        assert got == ar


def test_torch_compile_traces_f_linear():
    """Under torch.compile the module computes F.linear (dynamo cannot trace the freshness check,
    and inductor prepacks CPU weights itself); the compiled output equals the eager one."""
    torch.manual_seed(3)
    new = PrepackedLinear.wrap(torch.nn.Linear(16, 8))
    x = torch.randn(3, 16)
    compiled = torch.compile(new, backend="eager", fullgraph=True)  # fullgraph: no graph break allowed
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), new(x), rtol=1e-5, atol=1e-5)
