"""Device and dtype choice: bf16 where the hardware has native bf16 matmuls, CPU-friendly
kernels for the few-row passes of speculative verification (the linear layers on oneDNN over
weights reordered once, the output head and grouped-query attention), and on CUDA the attention
kernels that do not re-plan at every new pass shape (:func:`sdpa_without_cudnn`)."""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, ContextManager

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

__all__ = ["cpu_has_native_bf16", "resolve_dtype", "PrepackedLinear", "PREPACK_MIN_WEIGHTS", "prepacking_available",
           "install_prepacked_linears",
           "remove_prepacked_linears", "SmallBatchHead", "small_batch_linear", "install_small_batch_head",
           "GQA_SDPA", "gqa_sdpa_attention", "install_gqa_sdpa", "CUDA_SDPA_BACKENDS", "sdpa_without_cudnn",
           "capture_cuda_graph"]


def cpu_has_native_bf16() -> bool:
    """True if this CPU has bfloat16 matrix instructions (AVX512-BF16 or AMX-BF16).

    Without them (e.g. AVX2-only CPUs) PyTorch's bf16 matmuls over several tokens fall back to slow
    kernels, several times slower than float32 (docs/results.md, "float32").
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = fh.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device = "cpu") -> torch.dtype:
    """Map ``"auto" | "bfloat16" | "float32" | "float16" | "float64"`` (or a dtype) to a torch dtype.

    ``"auto"`` is bfloat16 on CUDA and on CPUs with native bf16 matmuls, float32 otherwise.

    Raises:
        ValueError: an unknown dtype name.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32,
             "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64}
    if dtype == "auto":
        if str(device).startswith("cuda") or cpu_has_native_bf16():
            return torch.bfloat16
        return torch.float32
    if dtype not in names:
        raise ValueError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(names)}")
    return names[dtype]


#: The row count that :class:`PrepackedLinear` reorders its weight for (oneDNN's ``batch_size`` hint).
#: SmolLM2-135M's linear layers over 1-19 rows ran equally fast for hints 4-32 and up to 2x slower
#: for hint 1 at 2-19 rows (docs/results.md, "Component costs").
PREPACK_ROWS = 8
#: The smallest weight (out x in elements) that :func:`install_prepacked_linears` prepacks. A oneDNN
#: call costs about 15 µs of fixed overhead, so smaller layers are faster on ``F.linear``: SmolLM2's
#: 192 x 576 key/value projections are slower prepacked for one row and level at seven, while its
#: 576 x 576 layers are level at one row and about twice as fast prepacked at seven
#: (docs/results.md, "Component costs").
PREPACK_MIN_WEIGHTS = 1 << 18

try:  # oneDNN's reorder and linear ops, resolved once (an op lookup per call costs more than the check)
    _REORDER_WEIGHT = torch.ops.mkldnn._reorder_linear_weight.default
    _LINEAR_POINTWISE = torch.ops.mkldnn._linear_pointwise.default
except (AttributeError, RuntimeError):  # a build without oneDNN
    _REORDER_WEIGHT = _LINEAR_POINTWISE = None


class PrepackedLinear(torch.nn.Linear):
    """An ``nn.Linear`` whose CPU inference passes run oneDNN's matmul over a copy of the weight
    reordered once into oneDNN's blocked layout ("prepacked", as ``torch.compile`` does for CPU
    inference with frozen weights).

    Why: PyTorch's ``F.linear`` on a CPU takes MKL's GEMM, which for the 1-20 rows of a decoding
    step or a verification pass reads the weight in a layout that wastes most of the memory
    bandwidth: SmolLM2-135M's linear layers run 1.5-3.5x faster prepacked over 1-13 rows in float32
    and about 1.5x in bfloat16 (docs/results.md, "Component costs"). The product is the same;
    the summation order differs (float32 results agree with ``F.linear`` to about 1e-6
    relative), as it already differs between ``F.linear``'s own 1-row and many-row kernels.

    The module keeps the original ``weight`` and ``bias`` Parameters (tied embeddings stay tied,
    ``state_dict`` is unchanged) and computes ``F.linear`` whenever the prepacked path does not
    apply: a non-CPU tensor, an input dtype other than the weight's, a pass that records gradients
    for the input or the weight, a pass traced by ``torch.compile``, or a dtype that oneDNN cannot
    reorder on this CPU (e.g. float16 without AVX512-FP16). The copy is made again when the weight
    changes (a new tensor, or an in-place update such as an optimizer step), and it is not pickled.

    Shapes: ``x [..., in_features]`` → ``[..., out_features]``.
    """

    _packed: Tensor | None = None
    _packed_ptr: int = -1  # data_ptr() of the weight the copy was made from
    _packed_version: int | None = None  # its version counter then (None: an inference tensor, which has none)
    _unsupported: bool = False

    @classmethod
    def wrap(cls, linear: torch.nn.Linear) -> "PrepackedLinear":
        """A :class:`PrepackedLinear` sharing ``linear``'s Parameters (nothing is copied but the
        reordered weight, made here)."""
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        new.weight = linear.weight
        new.bias = linear.bias
        new.training = linear.training
        new.prepack()
        return new

    def _fresh(self, w: Tensor) -> bool:
        """Whether the reordered copy was made from ``w`` as it is now (same storage, no in-place update)."""
        return (self._packed is not None and w.data_ptr() == self._packed_ptr
                and (self._packed_version is None or w._version == self._packed_version))

    def prepack(self) -> bool:
        """Reorder the weight for oneDNN (again, if it changed). Returns whether the prepacked path
        is available for this weight."""
        w = self.weight
        if self._unsupported or w.device.type != "cpu" or _LINEAR_POINTWISE is None:
            return False
        if not self._fresh(w):
            try:
                with torch.no_grad():
                    self._packed = _REORDER_WEIGHT(w.detach(), PREPACK_ROWS)
            except RuntimeError:  # a dtype oneDNN cannot handle on this CPU
                self._packed, self._unsupported = None, True
                return False
            self._packed_ptr = w.data_ptr()
            self._packed_version = None if w.is_inference() else w._version
        return True

    def forward(self, x: Tensor) -> Tensor:  # x: [..., in] → [..., out]
        w = self.weight
        # cheap checks first: this runs ~200 times per target pass (each costs ~1 µs). Under
        # torch.compile, F.linear: the compiler does its own weight prepacking on a CPU.
        if (x.is_cpu and x.dtype == w.dtype and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))
                and not torch.compiler.is_compiling() and (self._fresh(w) or self.prepack())):
            return _LINEAR_POINTWISE(x, self._packed, self.bias, "none", [], "")
        return torch.nn.functional.linear(x, w, self.bias)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(super().__getstate__())
        state.pop("_packed", None)  # oneDNN's blocked tensor is neither picklable nor needed
        state.pop("_packed_ptr", None)
        state.pop("_packed_version", None)
        return state


@functools.lru_cache(maxsize=None)
def prepacking_available(dtype: torch.dtype) -> bool:
    """Whether :class:`PrepackedLinear` runs prepacked for ``dtype`` weights on this machine's CPU
    (oneDNN present and able to reorder that dtype: float32 and bfloat16 on x86, not float64)."""
    return torch.backends.mkldnn.is_available() and PrepackedLinear.wrap(
        torch.nn.Linear(64, 8, bias=False, dtype=dtype))._packed is not None


def _linear_children(model: torch.nn.Module, kind: type) -> list[tuple[torch.nn.Module, str, torch.nn.Module]]:
    """(parent, attribute name, module) for every direct child of type exactly ``kind``, anywhere in ``model``."""
    return [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
            if type(child) is kind]


def install_prepacked_linears(model: torch.nn.Module, min_weights: int = PREPACK_MIN_WEIGHTS) -> int:
    """Replace every ``nn.Linear`` of ``model`` (exactly that type) with at least ``min_weights``
    weights (:data:`PREPACK_MIN_WEIGHTS`) by a :class:`PrepackedLinear` sharing its Parameters, for
    CPU inference. Returns how many layers now run prepacked (0 without oneDNN, for weights off the
    CPU, or for a dtype oneDNN cannot reorder here; those stay ``nn.Linear``). Costs one reordered
    copy of each replaced weight in memory."""
    done = 0
    for parent, name, child in _linear_children(model, torch.nn.Linear):
        w = child.weight
        if w.numel() < min_weights or w.device.type != "cpu" or not prepacking_available(w.dtype):
            continue
        new = PrepackedLinear.wrap(child)
        if new._packed is None:
            continue
        setattr(parent, name, new)
        done += 1
    return done


def remove_prepacked_linears(model: torch.nn.Module) -> int:
    """Undo :func:`install_prepacked_linears`: every :class:`PrepackedLinear` becomes an
    ``nn.Linear`` sharing its Parameters (the reordered copies are freed). Returns how many."""
    found = _linear_children(model, PrepackedLinear)
    for parent, name, child in found:
        old = torch.nn.Linear(child.in_features, child.out_features, bias=child.bias is not None, device="meta")
        old.weight, old.bias, old.training = child.weight, child.bias, child.training
        setattr(parent, name, old)
    return len(found)


class SmallBatchHead(torch.nn.Linear):
    """A bias-free output head computing ``W @ xᵀ`` when x has 2–8 rows (2–32 with ≥ 2 threads) of
    float32 on the CPU.

    On x86 CPUs PyTorch's float32 ``F.linear`` over a [49152, 576] head costs 2.5–4x more for 2–9
    rows than ``W @ xᵀ`` (docs/results.md, "Component costs"): a speculative verification pass scores
    γ + 1 rows, exactly this regime. In bfloat16 it is the other way round on a CPU with native bf16,
    so bf16 heads keep ``F.linear``. ``specot bench head-speed``
    measures both (``docs/bench/head_speed*.json``). Same product, another GEMM layout; the logits
    come back contiguous (a transposed view would make every later reduction over V strided and
    3x slower). It shares the original head's weight ``Parameter`` (tied embeddings stay tied).
    """

    def forward(self, x: Tensor) -> Tensor:  # x: [..., d] → [..., V]
        return small_batch_linear(self.weight, self.bias, x)


def small_batch_linear(weight: Tensor, bias: Tensor | None, x: Tensor) -> Tensor:
    """``F.linear(x, weight, bias)``, as ``W @ xᵀ`` for 2–32 rows of a bias-free float32 head on the CPU.

    Shapes: ``weight [V, d]``, ``x [..., d]`` → ``[..., V]`` (contiguous).
    """
    rows = x.numel() // x.shape[-1] if x.numel() else 0
    if (2 <= rows <= (8 if torch.get_num_threads() == 1 else 32) and bias is None and x.device.type == "cpu"
            and weight.dtype == torch.float32):
        flat = x.reshape(rows, x.shape[-1])  # [M, d]
        return (weight @ flat.t()).t().contiguous().reshape(*x.shape[:-1], weight.shape[0])  # [..., V]
    return torch.nn.functional.linear(x, weight, bias)


def install_small_batch_head(model: Any, min_size: int = 1 << 22) -> bool:
    """Replace a large bias-free ``nn.Linear`` output head by a :class:`SmallBatchHead` sharing its
    weight, through transformers' ``set_output_embeddings`` (no method patching).

    Only heads with at least ``min_size`` weights (V·d; SmolLM2: 28 M) are replaced, so tiny test
    models keep ``nn.Linear``. Returns whether the head was replaced. Any post-head processing of the
    model (soft-capping, scaling) is kept: the model still calls its head module.
    """
    get = getattr(model, "get_output_embeddings", None)
    head = get() if get is not None else None
    if isinstance(head, SmallBatchHead):
        return True
    if type(head) is not torch.nn.Linear or head.bias is not None or head.weight.numel() < min_size:
        return False
    new = SmallBatchHead(head.in_features, head.out_features, bias=False, device="meta")
    new.weight = head.weight  # the same Parameter: ties and dtype kept, nothing copied
    model.set_output_embeddings(new)
    return True


#: The name under which :func:`gqa_sdpa_attention` is registered in transformers' ``AttentionInterface``.
GQA_SDPA = "specot_gqa_sdpa"


def gqa_sdpa_attention(module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                       dropout: float = 0.0, scaling: float | None = None, is_causal: bool | None = None,
                       **kwargs: Any) -> tuple[Tensor, None]:
    """transformers' SDPA attention, with grouped-query attention left to the kernel on multi-token
    CPU passes under a mask.

    Shapes: ``query [B, H, T, D]``, ``key``/``value [B, H_kv, S, D]``, ``attention_mask [B, 1, T, S]``
    (additive or bool) → ``[B, T, H, D]``.

    For ``T > 1`` with a mask — every speculative verification pass after the prompt: a chain over
    the cache, or a draft tree under its tree mask — transformers' ``sdpa_attention_forward``
    copies the whole cached K and V ``H / H_kv`` times per layer (``repeat_kv``), because CUDA's
    masked GQA kernels fall back to slow math. PyTorch's CPU kernel takes ``enable_gqa`` with a mask
    directly, with the same result bit for bit (the same products in the same order): SmolLM2-135M
    (9 query heads, 3 KV heads) over a few hundred cached positions, the copies cost about a tenth of
    a 1-token step. Every other case
    (one query token, no mask, a CUDA tensor, no head groups, position biases, paged caches,
    attention sinks) is transformers' own function, unchanged.
    """
    groups = getattr(module, "num_key_value_groups", 1)
    if (query.device.type != "cpu" or groups <= 1 or query.shape[2] == 1 or attention_mask is None
            or kwargs.get("position_bias") is not None or kwargs.get("cache") is not None
            or kwargs.get("s_aux") is not None or kwargs.get("sinks") is not None
            or kwargs.get("softcap") is not None or kwargs.get("output_attentions", False)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask[:, :, :, : key.shape[2]], dropout_p=dropout, scale=scaling,
        enable_gqa=True)  # [B, H, T, D]
    return out.transpose(1, 2).contiguous(), None


def install_gqa_sdpa(model: Any) -> bool:
    """Run ``model``'s attention through :func:`gqa_sdpa_attention` when it uses transformers' SDPA
    attention with grouped-query heads (registered as :data:`GQA_SDPA`, with SDPA's mask builder;
    transformers' documented ``AttentionInterface`` route, no method patching). Returns whether it
    was installed; models on other attention implementations, or without head groups, are left as
    they are."""
    cfg = model.config
    if getattr(cfg, "_attn_implementation", None) not in ("sdpa", GQA_SDPA):
        return False
    heads, kv_heads = getattr(cfg, "num_attention_heads", None), getattr(cfg, "num_key_value_heads", None)
    if not heads or not kv_heads or kv_heads >= heads:
        return False
    AttentionInterface.register(GQA_SDPA, gqa_sdpa_attention)  # idempotent: a dict update
    AttentionMaskInterface.register(GQA_SDPA, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    if cfg._attn_implementation != GQA_SDPA:
        model.set_attn_implementation(GQA_SDPA)
    return cfg._attn_implementation == GQA_SDPA


#: The attention kernels specot's passes may use on CUDA: every fused SDPA kernel except cuDNN's
#: (priority as PyTorch's own order: flash, then memory-efficient, then the math fallback).
CUDA_SDPA_BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def sdpa_without_cudnn(device: torch.device | str) -> ContextManager[Any]:
    """A context in which ``scaled_dot_product_attention`` on ``device`` uses
    :data:`CUDA_SDPA_BACKENDS` (``torch.nn.attention.sdpa_kernel``: PyTorch's process-wide backend
    flags, restored on exit); a no-op off CUDA.

    Why: PyTorch's cuDNN attention, which it prefers on Hopper GPUs, builds an execution graph for
    every (query length, key length) it has not met before, and decoding meets a new one at every
    pass: each cache length, each draft length, each draft tree. A pass over a shape met for the
    first time costs several times a pass without cuDNN, and so does each EAGLE draft step
    (docs/results.md, "GPU runs"). The kernels compute the same attention up to floating-point rounding, so this
    changes no exactness guarantee (autoregressive decoding and verification run under the same
    choice)."""
    if torch.device(device).type != "cuda":
        return contextlib.nullcontext()
    return sdpa_kernel(list(CUDA_SDPA_BACKENDS), set_priority=True)


def capture_cuda_graph(fn: Callable[[], Any], device: torch.device, pool: Any = None) -> tuple[Any, Any, Any]:
    """``fn`` captured as a ``torch.cuda.CUDAGraph``, after two warm-up runs on a side stream (the
    recipe of ``torch.cuda.graphs``; they compute what the capture records). Returns the graph, the
    outputs of ``fn`` inside the capture (fixed buffers that every ``replay()`` overwrites in place)
    and the memory pool, made here when ``pool`` is ``None``: graphs replayed one at a time, whose
    outputs are read before the next replay, can share one. Raises whatever the capture raises."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    pool = torch.cuda.graph_pool_handle() if pool is None else pool
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = fn()
    return graph, out, pool
