"""The verifier of a decoding plan: :class:`VerifierSpec` (a name and its parameters, frozen),
built with the checks that keep a run from being silently lossy."""

from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass
from typing import Any, Mapping

from ..sampling import SamplingConfig
from ..verifiers.base import AnyVerifier, available_verifiers, get_verifier
from ..verifiers.otm import MAX_OTM_SETS

__all__ = ["VerifierSpec", "build_verifier", "verifier_info", "check_otm_size"]


@dataclass(frozen=True)
class VerifierSpec:
    """A verifier by name with its parameters, as sorted ``(name, value)`` pairs.

    :meth:`build` makes a fresh verifier for one generation. A plan's verifier is always named:
    where the caller names none (``verifier=None``), :func:`specot.plan.make_plan` names the
    shape's own (:attr:`specot.drafting.TreeSpec.default_verifier`).
    """

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, name: str, params: Mapping[str, Any] | None = None) -> "VerifierSpec":
        """The spec of ``name`` with ``params``, checked (:func:`build_verifier`)."""
        build_verifier(name, params)
        return cls(name, tuple(sorted((params or {}).items())))

    def build(self) -> AnyVerifier:
        """The verifier (:func:`get_verifier`)."""
        return get_verifier(self.name, **dict(self.params))

    @property
    def lossless(self) -> bool:
        return bool(getattr(self.build(), "lossless", True))


def _parameters(cls: type) -> tuple[bool, list[str]]:
    """(takes ``**kwargs``, named parameters) of a verifier class's constructor."""
    if cls.__init__ is object.__init__:  # no constructor: no parameters
        return False, []
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return True, []
    open_kw = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
    return open_kw, [k for k, p in sig.parameters.items()
                     if k != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def build_verifier(name: str, params: Mapping[str, Any] | None = None) -> AnyVerifier:
    """The verifier ``name`` with ``params``, refusing what would silently change the output law.

    Raises:
        ValueError: an unknown name; a parameter the verifier does not take; ``lenience`` with
            ``"speculative"`` (the lossless verifier; use ``"lenient"``); a lossy verifier
            (``lenient``, ``mentored``) without its parameters given explicitly.
    """
    params = dict(params or {})
    if not isinstance(name, str) or name not in available_verifiers():
        raise ValueError(f"unknown verifier {name!r}; available: {', '.join(available_verifiers())}")
    open_kw, takes = _parameters(type(get_verifier(name)))
    unknown = sorted(set(params) - set(takes)) if not open_kw else []
    if unknown:
        have = ", ".join(takes) if takes else "none"
        raise ValueError(f"verifier {name!r} does not take {', '.join(map(repr, unknown))} (its parameters: {have})"
                         + ("; lenience is a parameter of --verifier lenient only" if "lenience" in unknown else ""))
    if name == "speculative" and "lenience" in params and params["lenience"] != 1:
        raise ValueError("verifier 'speculative' is the lossless one and takes no lenience; for a lossy run with "
                         "lenience l < 1 ask for it: verifier 'lenient' with lenience=l (CLI: --verifier lenient "
                         "--lenience L)")
    ver = get_verifier(name, **params)
    if not getattr(ver, "lossless", True) and not params:
        info = verifier_info(ver)["params"]
        shown = ", ".join(f"{k}={v}" for k, v in info.items())
        raise ValueError(f"verifier {name!r} is lossy (its defaults: {shown}); give its parameters explicitly to "
                         f"run it (CLI: " + ("--lenience L" if "lenience" in info else
                                              " ".join(f"--verifier-param {k}=..." for k in info))
                         + f"; Python: verifier_params={info!r})")
    return ver


def verifier_info(ver: Any) -> dict[str, Any]:
    """``{"name", "params", "lossless"}`` of a built verifier: its constructor parameters as set."""
    _, names = _parameters(type(ver))
    params = {}
    for name in names:
        if hasattr(ver, name):
            val = getattr(ver, name)
            params[name] = val.value if isinstance(val, enum.Enum) else val
    return {"name": getattr(ver, "name", type(ver).__name__), "params": params,
            "lossless": bool(getattr(ver, "lossless", True))}


def check_otm_size(ver: Any, vocab: int | None, sampling: SamplingConfig) -> None:
    """Refuse the OTM verifier where its exact LP cannot be built (non-tiny vocabularies).

    Raises:
        ValueError: ``ver`` is ``otm`` and the draft support exceeds :data:`MAX_OTM_SETS`.
    """
    if getattr(ver, "name", "") != "otm" or not vocab:
        return
    support = 1 if sampling.greedy else min(vocab, sampling.top_k or vocab)
    if support > MAX_OTM_SETS:
        raise ValueError(
            f"verifier 'otm' cannot run here: it solves an exact linear program over every set of distinct drafts, "
            f"and a draft support of {support} tokens (vocabulary {vocab}"
            + ("" if sampling.top_k else ", no top-k") + f") gives at least {support} sets, above its limit of "
            f"{MAX_OTM_SETS}. OTM is the reference optimum for tiny vocabularies (tests, specot theory alpha "
            "--verifiers); decode with speculative, kseq, rrs, rrs_wor, greedy or spechub, or bound the support "
            f"with top_k <= {MAX_OTM_SETS}")
