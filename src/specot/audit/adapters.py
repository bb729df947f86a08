"""One interface over the engines an audit runs (:class:`Adapter`).

* ``sample_first_tokens(prompt_ids, k, n_samples, sampling, seed) -> [n, k]`` int64 token ids
  (``END = -1`` after a sequence that ended early);
* ``target_law(prompt_ids, prefixes, sampling) -> [M, V]`` the standardized target law after the
  prompt + each prefix, where the engine exposes its target's logits (``has_law``);
* ``greedy_tokens(prompt_ids, n)`` and ``logit_gap(prompt_ids, prefix, a, b)`` for T = 0.

Engines: :class:`SpecotAdapter` (specot's engine on either backend, every verifier),
:class:`HFAdapter` (Hugging Face ``generate()`` with an assistant model or prompt lookup),
:class:`LlamaCppPythonAdapter` (llama-cpp-python, optionally with ``LlamaPromptLookupDecoding``),
and :class:`ServerAdapter` (any OpenAI-compatible completions server, a black box).
"""

from __future__ import annotations

import json
import urllib.request
from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np
import torch

from ..drafting import Drafter, ModelDrafter, TreeSpec
from ..drafting.tree import default_law_for
from ..engine import GenerationConfig, make_generator, speculative_generate, tree_generate
from ..sampling import SamplingConfig, standardize
from ..verifiers import get_verifier
from .memo import MemoModel, memo_drafter
from .stats import END

__all__ = ["Adapter", "SpecotAdapter", "HFAdapter", "LlamaCppPythonAdapter", "ServerAdapter", "SPECOT_METHODS",
           "pad_rows"]

#: specot's methods an audit runs: ``plain`` (autoregressive), ``speculative`` (one chain of γ),
#: and multi-draft trees of K i.i.d. (or the verifier's law) chains verified by the named verifier.
SPECOT_METHODS = ("plain", "speculative", "kseq", "rrs", "importance", "greedy")


def pad_rows(rows: Sequence[Sequence[int]], k: int) -> np.ndarray:
    """Token rows as ``[n, k]`` int64, cut at ``k`` and padded with ``END``."""
    out = np.full((len(rows), k), END, dtype=np.int64)
    for i, r in enumerate(rows):
        r = list(r)[:k]
        out[i, :len(r)] = r
    return out


class Adapter(ABC):
    """An engine × method under audit (module docstring).

    Attributes:
        engine, method: labels of the table.
        has_law: ``target_law`` and ``logit_gap`` are available.
        near_tie: the logit gap (nats) under which a greedy difference is a near-tie.
    """

    engine = "?"
    method = "?"
    has_law = False
    near_tie = 1e-4

    @abstractmethod
    def sample_first_tokens(self, prompt_ids: Sequence[int], k: int, n_samples: int, sampling: SamplingConfig,
                            seed: int) -> np.ndarray:
        """``[n_samples, k]`` int64: the first ``k`` tokens of ``n_samples`` independent runs."""

    def target_law(self, prompt_ids: Sequence[int], prefixes: list[tuple[int, ...]],
                   sampling: SamplingConfig) -> np.ndarray:
        """``[M, V]`` float64 standardized target law after the prompt + each prefix.

        Raises:
            NotImplementedError: the engine exposes no logits.
        """
        raise NotImplementedError(f"{self.engine} exposes no target logits")

    def greedy_tokens(self, prompt_ids: Sequence[int], n: int) -> list[int]:
        """The first ``n`` tokens at temperature 0."""
        return [int(t) for t in self.sample_first_tokens(prompt_ids, n, 1, SamplingConfig(0.0), 0)[0] if t != END]

    def logit_gap(self, prompt_ids: Sequence[int], prefix: Sequence[int], a: int, b: int) -> float | None:
        """|z_a − z_b| of the target's logits after prompt + prefix; ``None`` without logits."""
        return None

    def close(self) -> None:
        """Free what the adapter holds (a no-op by default)."""


def _as_np(p: torch.Tensor) -> np.ndarray:
    return p.detach().to(torch.float64).cpu().numpy()


class SpecotAdapter(Adapter):
    """specot's engine (:func:`specot.engine.speculative_generate` / :func:`tree_generate`) on a
    loaded target.

    Args:
        target: a loaded target (either backend).
        drafter: any :class:`~specot.drafting.Drafter` (the methods other than ``plain``); a
            :class:`~specot.drafting.ModelDrafter` is memoized with ``memo``.
        method: one of :data:`SPECOT_METHODS`.
        gamma: draft length γ (chains) or tree depth.
        n: the number of drafts, n chains of a tree (kseq, rrs, importance, greedy).
        memo: memoize both models' logits by prefix (:mod:`specot.audit.memo`): fast, the engine's
            loop unchanged, the real KV rollback not exercised.
        verifier: a verifier object used instead of the method's (the planted-defect tests).
        backend: the label of the backend.

    Raises:
        ValueError: an unknown method, or a method that needs a drafter without one.
    """

    engine = "specot"

    def __init__(self, target: Any, drafter: Drafter | None, method: str, *, gamma: int = 3, n: int = 2,
                 memo: bool = True, verifier: Any = None, backend: str = "transformers") -> None:
        if method not in SPECOT_METHODS:
            raise ValueError(f"unknown specot method {method!r}; choose from {', '.join(SPECOT_METHODS)}")
        if method != "plain" and drafter is None:
            raise ValueError(f"method {method!r} needs a draft model")
        self.method, self.gamma, self.n = method, gamma, n
        self.engine = f"specot[{backend}]"
        self.has_law = True
        self.near_tie = 1e-4 if backend == "transformers" else 0.05
        self.target = MemoModel(target) if memo and not isinstance(target, MemoModel) else target
        self.drafter = memo_drafter(drafter) if memo and isinstance(drafter, ModelDrafter) else drafter
        self._verifier = verifier

    def _one(self, prompt: list[int], cfg: GenerationConfig, gen: torch.Generator) -> list[int]:
        if self.method == "plain":
            return speculative_generate(self.target, None, prompt, cfg, generator=gen).tokens
        if self.method == "speculative":
            ver = self._verifier or get_verifier("speculative")
            return speculative_generate(self.target, self.drafter, prompt, cfg, verifier=ver, generator=gen).tokens
        ver = self._verifier or get_verifier(self.method)
        spec = TreeSpec.sequences(self.n, self.gamma, law=default_law_for(ver))
        if self.method == "greedy" or getattr(ver, "name", "") == "greedy":
            ver = get_verifier("greedy") if self._verifier is None else ver
        return tree_generate(self.target, self.drafter, prompt, spec, cfg, verifier=ver, generator=gen).tokens

    def sample_first_tokens(self, prompt_ids, k, n_samples, sampling, seed):  # noqa: D102 (Adapter's)
        cfg = GenerationConfig(max_new_tokens=k, gamma=self.gamma, sampling=sampling, stop_at_eos=False)
        gen = make_generator(seed)
        prompt = [int(t) for t in prompt_ids]
        return pad_rows([self._one(prompt, cfg, gen) for _ in range(n_samples)], k)

    def target_law(self, prompt_ids, prefixes, sampling):  # noqa: D102
        prompt = tuple(int(t) for t in prompt_ids)
        if isinstance(self.target, MemoModel):
            logits = self.target.rows([prompt + tuple(s) for s in prefixes])
        else:
            logits = torch.cat([self.target.logits_after(list(prompt + tuple(s)))[:1] for s in prefixes])
        return _as_np(standardize(logits.double(), sampling))

    def logit_gap(self, prompt_ids, prefix, a, b):  # noqa: D102
        z = self.target_logits(list(prompt_ids) + list(prefix))
        return float(abs(z[a] - z[b]))

    def target_logits(self, ids: list[int]) -> np.ndarray:
        """The target's logits ``[V]`` after ``ids``."""
        if isinstance(self.target, MemoModel):
            return _as_np(self.target.rows([tuple(ids)])[0])
        return _as_np(self.target.logits_after(ids)[0])


class HFAdapter(Adapter):
    """Hugging Face ``model.generate()``: plain, with an assistant model (``assistant``) or with
    prompt lookup (``prompt_lookup`` tokens). Batch size 1 (assisted generation's requirement):
    one call per sample, ``torch.manual_seed(seed)`` once before the first.

    The exact law: the same model's logits standardized by specot (temperature, top-k, top-p, the
    order of Hugging Face's logits processors); ``top_k=None`` is passed as 0 (off: the model's
    generation config would otherwise add its own top-k of 50).
    """

    engine = "hf"
    has_law = True

    def __init__(self, model: Any, *, assistant: Any = None, prompt_lookup: int | None = None,
                 eos_token_id: int | None = None) -> None:
        self.model, self.assistant, self.prompt_lookup = model, assistant, prompt_lookup
        self.method = "assisted" if assistant is not None else (
            f"prompt-lookup-{prompt_lookup}" if prompt_lookup else "plain")
        self.eos = eos_token_id
        self.near_tie = 1e-4

    def _kwargs(self, k: int, sampling: SamplingConfig) -> dict[str, Any]:
        kw: dict[str, Any] = dict(max_new_tokens=k, pad_token_id=self.eos, eos_token_id=self.eos,
                                  repetition_penalty=1.0)
        if sampling.greedy:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kw.update(do_sample=True, temperature=float(sampling.temperature), top_p=float(sampling.top_p),
                      top_k=int(sampling.top_k or 0))
        if self.assistant is not None:
            kw["assistant_model"] = self.assistant
        if self.prompt_lookup:
            kw["prompt_lookup_num_tokens"] = int(self.prompt_lookup)
        return kw

    @torch.inference_mode()
    def sample_first_tokens(self, prompt_ids, k, n_samples, sampling, seed):  # noqa: D102
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
        mask = torch.ones_like(ids)
        kw = self._kwargs(k, sampling)
        torch.manual_seed(seed)
        rows = []
        for _ in range(n_samples):
            out = self.model.generate(input_ids=ids, attention_mask=mask, **kw)
            rows.append(out[0, ids.shape[1]:].tolist())
        return pad_rows(rows, k)

    @torch.inference_mode()
    def _logits(self, seqs: list[list[int]]) -> torch.Tensor:
        """Last-position logits ``[M, V]`` (float64) of equal-length sequences, batched."""
        out = []
        for i in range(0, len(seqs), 16):
            out.append(self.model(input_ids=torch.tensor(seqs[i:i + 16])).logits[:, -1, :].double())
        return torch.cat(out)

    def target_law(self, prompt_ids, prefixes, sampling):  # noqa: D102
        by_len: dict[int, list[int]] = {}
        for i, s in enumerate(prefixes):
            by_len.setdefault(len(s), []).append(i)
        out = np.zeros((len(prefixes), 0))
        for n, idx in by_len.items():
            z = self._logits([list(prompt_ids) + list(prefixes[i]) for i in idx])
            p = _as_np(standardize(z, sampling))
            if out.shape[1] == 0:
                out = np.zeros((len(prefixes), p.shape[1]))
            out[idx] = p
        return out

    def logit_gap(self, prompt_ids, prefix, a, b):  # noqa: D102
        z = self._logits([list(prompt_ids) + list(prefix)])[0]
        return float(abs(z[a] - z[b]))


class LlamaCppPythonAdapter(Adapter):
    """llama-cpp-python's ``Llama.generate`` (its own sampler chain), plain or with
    ``LlamaPromptLookupDecoding`` (``prompt_lookup`` predicted tokens) as its draft model.

    Its sampler chain (top-k, top-p, min-p, temperature, llama.cpp's order) differs from specot's
    standardization, so the reference is a plain-decoding sample of the same library (two-sample
    test); min-p is set to 0 and the penalties to neutral. Each sample reseeds the sampler
    (``seed + i``): llama-cpp-python seeds its sampler once per ``generate``.

    Raises:
        ImportError: llama-cpp-python is not installed.
    """

    engine = "llama-cpp-python"

    def __init__(self, model_path: str, *, prompt_lookup: int | None = None, n_ctx: int = 512,
                 n_threads: int | None = None) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        draft = LlamaPromptLookupDecoding(num_pred_tokens=prompt_lookup) if prompt_lookup else None
        self.llm = Llama(model_path=model_path, n_ctx=n_ctx, n_threads=n_threads, draft_model=draft, verbose=False,
                         logits_all=draft is not None)
        self.method = f"prompt-lookup-{prompt_lookup}" if prompt_lookup else "plain"
        self.has_law = False
        self.near_tie = 0.05

    def _run(self, prompt: list[int], k: int, sampling: SamplingConfig, seed: int) -> list[int]:
        self.llm.set_seed(seed)
        toks = []
        gen = self.llm.generate(prompt, top_k=int(sampling.top_k or 0), top_p=float(sampling.top_p), min_p=0.0,
                                typical_p=1.0, temp=float(sampling.temperature), repeat_penalty=1.0,
                                frequency_penalty=0.0, presence_penalty=0.0, tfs_z=1.0)
        for t in gen:
            toks.append(int(t))
            if len(toks) >= k or t == self.llm.token_eos():
                break
        gen.close()
        return toks

    def sample_first_tokens(self, prompt_ids, k, n_samples, sampling, seed):  # noqa: D102
        prompt = [int(t) for t in prompt_ids]
        return pad_rows([self._run(prompt, k, sampling, seed + i) for i in range(n_samples)], k)

    def close(self) -> None:  # noqa: D102
        self.llm.close()


class ServerAdapter(Adapter):
    """Any OpenAI-compatible server's completions API (``POST {url}/v1/completions``), a black box.

    One request per sample (``n`` is not widely honoured): ``prompt`` (the text when the audit's
    prompt is a string, as llama-cpp-python's server needs; else the token ids), ``max_tokens=k``,
    ``temperature``, ``top_p``, ``top_k`` (an extension most servers take), ``seed = seed + i``,
    ``logprobs=1`` to read the tokens position by position. Tokens are categories (their text, as
    the server names them), numbered in order of first appearance and shared with the reference
    adapter through ``vocab``: the audit compares two samples (``--server`` against
    ``--reference``), it cannot see the target's law.

    Raises:
        OSError: the server cannot be reached (on use).
    """

    engine = "server"
    has_law = False

    def __init__(self, url: str, *, method: str = "speculative", model: str | None = None, timeout: float = 60.0,
                 vocab: dict[str, int] | None = None, extra: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/")
        self.method, self.model, self.timeout = method, model, timeout
        self.vocab = vocab if vocab is not None else {}
        self.extra = dict(extra or {})
        self.near_tie = 0.05

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(self.url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read())

    def _tokens(self, prompt: str | list[int], k: int, sampling: SamplingConfig, seed: int) -> list[int]:
        body: dict[str, Any] = dict(prompt=prompt, max_tokens=k, temperature=float(sampling.temperature),
                                    top_p=float(sampling.top_p), seed=int(seed), logprobs=1, **self.extra)
        if sampling.top_k:
            body["top_k"] = int(sampling.top_k)
        if self.model:
            body["model"] = self.model
        choice = self._post(body)["choices"][0]
        lp = choice.get("logprobs") or {}
        names = lp.get("tokens") if lp.get("tokens") is not None else [choice.get("text", "")]
        return [self.vocab.setdefault(str(t), len(self.vocab)) for t in names]

    def sample_first_tokens(self, prompt_ids, k, n_samples, sampling, seed):  # noqa: D102
        prompt = prompt_ids if isinstance(prompt_ids, str) else [int(t) for t in prompt_ids]
        return pad_rows([self._tokens(prompt, k, sampling, seed + i) for i in range(n_samples)], k)

    def greedy_tokens(self, prompt_ids, n):  # noqa: D102
        prompt = prompt_ids if isinstance(prompt_ids, str) else [int(t) for t in prompt_ids]
        return self._tokens(prompt, n, SamplingConfig(0.0), 0)
