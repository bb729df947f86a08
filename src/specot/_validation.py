"""Input checks shared by every public entry point.

Every check raises a :class:`TypeError` or :class:`ValueError` whose message names the bad value
and says how to fix it. Nothing here ever returns NaN or silently repairs bad input.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Iterator

import torch
from torch import Tensor

__all__ = [
    "sum_tolerance",
    "check_probs",
    "check_tokens",
    "check_same_vocab",
    "working_dtype",
    "check_probability_scalar",
    "check_count",
    "check_seed",
    "check_positive_number",
    "check_device",
    "check_generator",
    "trusted_inputs",
    "check_prob_values",
]

_TRUSTED: contextvars.ContextVar[bool] = contextvars.ContextVar("specot_trusted_inputs", default=False)


@contextlib.contextmanager
def trusted_inputs() -> Iterator[None]:
    """Within this block :func:`check_probs` and :func:`check_tokens` check types and shapes only,
    not values: for the decoding loop, whose p and q come from :func:`specot.sampling.standardize`
    (which rejects NaN and infinite logits) and whose tokens were drawn from them. The value checks
    cost several passes over ``[B, V]`` and, on a GPU, a host sync each."""
    token = _TRUSTED.set(True)
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def sum_tolerance(dtype: torch.dtype, vocab_size: int) -> float:
    """Tolerance on ``|Σ p − 1|`` for a probability vector of ``vocab_size`` entries of ``dtype``."""
    if dtype == torch.float64:
        return 1e-9 + 1e-12 * vocab_size
    if dtype == torch.float32:
        return 1e-4 + 1e-7 * vocab_size
    return 2e-2  # bf16 / fp16: a softmax over 49k entries rounds to ~1e-2


def working_dtype(*tensors: Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32 (bf16/fp16 are upcast for verification)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def check_probs(p: object, name: str, *, ndim: int | None = None) -> Tensor:
    """Check that ``p`` is a floating tensor of probability vectors over its last axis.

    Args:
        p: tensor ``[..., V]``.
        name: the argument's name, used in error messages (e.g. ``"p (target probs)"``).
        ndim: required number of dimensions, if any.

    Returns:
        ``p`` unchanged.

    Raises:
        TypeError: ``p`` is not a floating-point ``torch.Tensor``.
        ValueError: wrong rank, empty vocabulary, NaN/inf entries, negative entries, or rows that
            do not sum to 1 within :func:`sum_tolerance`.
    """
    if not isinstance(p, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of probabilities, got {type(p).__name__}")
    if not p.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {p.dtype}")
    if ndim is not None and p.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(p.shape)}")
    if p.ndim == 0 or p.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty vocabulary axis, got shape {tuple(p.shape)}")
    if _TRUSTED.get():
        return p
    return check_prob_values(p, name)


def check_prob_values(p: Tensor, name: str) -> Tensor:
    """The value part of :func:`check_probs` (finite, non-negative, rows summing to 1), always run.

    Raises:
        ValueError: as :func:`check_probs`.
    """
    # Fast path, two passes over the data: a non-negative minimum and finite, normalised row sums
    # imply every entry is finite (NaN and +inf propagate into the sums). The detailed checks
    # below run only when something is wrong, to name the problem.
    sums = p.sum(-1, dtype=torch.float64).reshape(-1)
    tol = sum_tolerance(p.dtype, p.shape[-1])
    if p.numel() and bool(p.min() >= 0) and bool(((sums - 1.0).abs() <= tol).all()):
        return p
    if not bool(torch.isfinite(p).all()):
        raise ValueError(f"{name} contains NaN or infinite entries; pass finite probabilities")
    if bool((p < 0).any()):
        raise ValueError(f"{name} contains negative entries (min {p.min().item():.3g}); probabilities must be >= 0")
    if sums.numel():
        worst = int((sums - 1.0).abs().argmax())
        worst_sum = float(sums[worst])
        err = abs(worst_sum - 1.0)
        if err > tol:
            raise ValueError(
                f"{name} rows must sum to 1 (row {worst} sums to {worst_sum:.6g}, |error| {err:.3g} > "
                f"tolerance {tol:.3g}); normalise with p / p.sum(-1, keepdim=True) or pass softmax output"
            )
    return p


def check_tokens(tokens: object, name: str, vocab_size: int, *, ndim: int | None = None) -> Tensor:
    """Check an integer token tensor with every id in ``[0, vocab_size)``.

    Raises:
        TypeError: not an integer ``torch.Tensor``.
        ValueError: wrong rank or an id out of range.
    """
    if not isinstance(tokens, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor of token ids, got dtype {tokens.dtype}")
    if ndim is not None and tokens.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(tokens.shape)}")
    if tokens.numel() and not _TRUSTED.get():
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= vocab_size:
            hint = (" (a negative id such as -1 is a placeholder, not a token: drop unused slots or pad with a "
                    "real token id)" if lo < 0 else "")
            raise ValueError(f"{name} has token ids outside [0, {vocab_size}) (min {lo}, max {hi}){hint}")
    return tokens


def check_same_vocab(p: Tensor, q: Tensor, p_name: str = "p (target)", q_name: str = "q (draft)") -> None:
    """Raise ``ValueError`` if the target and draft distributions disagree in shape.

    A vocabulary-size mismatch between target and draft is the most common integration error
    (different tokenizers, padded embedding matrices): the message says so.
    """
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"vocabulary mismatch: {p_name} has {p.shape[-1]} entries, {q_name} has {q.shape[-1]}; "
            "target and draft must share one tokenizer (slice padded logits to the tokenizer's size)"
        )
    if p.shape != q.shape:
        raise ValueError(f"shape mismatch: {p_name} {tuple(p.shape)} vs {q_name} {tuple(q.shape)}")


def check_probability_scalar(x: object, name: str, *, low_open: bool = True) -> float:
    """Validate a scalar in (0, 1] (or [0, 1] with ``low_open=False``)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(x).__name__}")
    x = float(x)
    if not math.isfinite(x) or x > 1 or x < 0 or (low_open and x == 0):
        interval = "(0, 1]" if low_open else "[0, 1]"
        raise ValueError(f"{name} must lie in {interval}, got {x}")
    return x


def check_count(v: object, name: str, flag: str | None = None, *, minimum: int = 1) -> int:
    """``v`` if it is an integer ``>= minimum`` (a bool is not), else ``ValueError`` naming ``name``
    and, where given, the CLI ``flag`` that sets it: one line for the CLI, never a default in its place."""
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{name}{f' ({flag})' if flag else ''} must be an integer >= {minimum}, got {v!r}")
    return v


#: The seeds a ``torch.Generator`` takes (``manual_seed``).
SEED_RANGE = (-(1 << 63), (1 << 64) - 1)


def check_seed(seed: object, flag: str = "--seed") -> int | None:
    """``seed`` if it is ``None`` or an int a ``torch.Generator`` takes, else one line naming it.

    Raises:
        TypeError: not an int (a bool is not) or ``None``.
        ValueError: outside :data:`SEED_RANGE`.
    """
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int or None ({flag}), got {type(seed).__name__}")
    lo, hi = SEED_RANGE
    if not lo <= seed <= hi:
        raise ValueError(f"seed must be an integer in [{lo}, {hi}] ({flag}; what a torch.Generator takes), got {seed}")
    return seed


def check_positive_number(x: object, name: str, flag: str | None = None, *, allow_zero: bool = False) -> float:
    """``x`` as a float if it is finite and ``> 0`` (``>= 0`` with ``allow_zero``), else ``ValueError``
    naming ``name`` and, where given, its CLI ``flag``."""
    ok = not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and (x > 0 or allow_zero and x == 0)
    if not ok:
        raise ValueError(f"{name}{f' ({flag})' if flag else ''} must be a finite number {'>=' if allow_zero else '>'} 0, "
                         f"got {x!r}")
    return float(x)


def check_device(device: object) -> torch.device:
    """The ``torch.device`` for ``device``, checked to be usable on this machine.

    Raises:
        ValueError: an unknown device string (``"foo"``), or a CUDA / MPS device this machine or
            this torch build does not have; the message names the device and the fix.
    """
    try:
        dev = torch.device(device)  # type: ignore[call-overload]
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}; use cpu, cuda, cuda:N or mps") from None
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch build has no CUDA support" if torch.version.cuda is None
                   else "no CUDA GPU is visible")
            raise ValueError(f"device {str(device)!r} is not available: {why} (torch {torch.__version__}); "
                             "use device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {str(device)!r} is not available: only {torch.cuda.device_count()} CUDA "
                             f"device(s); use cuda:0..cuda:{torch.cuda.device_count() - 1}")
        return dev
    if dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {str(device)!r} is not available on this machine; use device cpu")
        return dev
    try:
        torch.empty(1, device=dev)
    except Exception:  # noqa: BLE001 - any failure means the device cannot be used
        raise ValueError(f"device {str(device)!r} is not available on this machine; use device cpu") from None
    return dev


def check_generator(generator: object, name: str = "generator") -> None:
    """Raise ``TypeError`` unless ``generator`` is ``None`` or a ``torch.Generator``."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"{name} must be a torch.Generator or None, got {type(generator).__name__} ({generator!r}); "
            f"for a seed use torch.Generator().manual_seed(seed) (or seed= in GenerationConfig / specot.generate)"
        )
