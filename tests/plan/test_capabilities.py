"""Declared backend capabilities (:class:`specot.models.protocol.Capabilities`): each backend declares
what it can do, by its :class:`~specot.plan.Backend` entry before any load and by a loaded target's
``capabilities``; the plan checks them once, with one message."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import specot.plan.backends as B
from specot.drafting.base import Drafter
from specot.engine.loop import _held_state, _locks_for, generation_lock
from specot.models.hf import GRAPH_WIDTHS
from specot.models.protocol import Capabilities, TargetModel, capabilities_of
from specot.plan import Backend, make_plan
from specot.plan.kinds.eagle import KIND as EAGLE

from model_helpers import tiny_lm

REFUSAL = "reads the target's hidden states, which the {} backend does not expose"


def _install(monkeypatch, *backends):
    """Register ``backends`` as if extras had installed them under ``specot.backends``."""
    eps = {b.name: SimpleNamespace(load=lambda b=b: b) for b in backends}
    monkeypatch.setattr(B, "_entry_point_backends", lambda: eps)


def _never_loads(*args, **kwargs):
    raise AssertionError("the plan loaded a target")


def test_a_backend_declaring_no_hidden_states_gets_eagle_refused_before_any_load(monkeypatch):
    plain = Backend("plain", _never_loads, capabilities=Capabilities(hidden_states=False, max_tree_nodes=64,
                                                                      dtypes=(torch.float32,), pass_cost=True))
    deep = Backend("deep", _never_loads, capabilities=Capabilities(hidden_states=True, hidden_layers=30))
    _install(monkeypatch, plain, deep)
    assert not plain.hidden_states and deep.hidden_states
    for draft in ("eagle", "suffix+eagle"):
        with pytest.raises(ValueError, match=REFUSAL.format("plain")):
            make_plan(draft, backend="plain")
        assert make_plan(draft, backend="deep").backend == "deep"  # declared: planned, nothing loaded
    assert make_plan("suffix", backend="plain").draft.name == "suffix"  # what needs no hidden states runs


def test_the_backends_declare_their_capabilities():
    assert B.TRANSFORMERS.capabilities.hidden_states and B.TRANSFORMERS.capabilities.static_cache
    caps = tiny_lm(0).capabilities  # a loaded target says more than its backend entry
    assert caps.hidden_states and caps.static_cache and caps.graph_widths == GRAPH_WIDTHS
    assert caps.hidden_layers == tiny_lm(0).model.config.num_hidden_layers
    assert isinstance(caps.cuda_graphs, bool)  # whether the architecture compiles whole
    pytest.importorskip("specot_llamacpp")
    from specot_llamacpp.backend import BACKEND

    assert not BACKEND.capabilities.hidden_states and BACKEND.capabilities.pass_cost
    with pytest.raises(ValueError, match=REFUSAL.format("llamacpp")):
        BACKEND.capabilities.check_hidden_states("draft 'eagle'", "llamacpp")


class _Plain:
    """A target of another backend: the protocol's members, no hidden states, no lock of its own."""

    name, vocab_size, max_context, tokenizer, forward_calls, last_start, last_hidden = "plain", 8, 64, None, 0, 0, None
    backend = "plain"
    device, dtype, forward_time_s, eos_token_ids = torch.device("cpu"), torch.float32, 0.0, set()
    capabilities = Capabilities(hidden_states=False)

    def encode_prompt(self, prompt, *, chat=None, system=None):
        return [1]

    def decode(self, ids):
        return ""

    def reset(self):
        pass

    def reset_stats(self):
        pass

    def logits_after(self, context, extra=(), *, hidden_layers=None):
        return torch.zeros(1 + len(extra), self.vocab_size)

    def tree_logits(self, context, tree, *, hidden_layers=None):
        return torch.zeros(len(tree.tokens), self.vocab_size)

    def keep_tree_path(self, path):
        pass


def test_a_loaded_target_is_judged_by_its_own_capabilities(monkeypatch):
    target = _Plain()
    assert isinstance(target, TargetModel) and capabilities_of(target).hidden_states is False
    assert capabilities_of(object()) == Capabilities()  # undeclared: the defaults
    _install(monkeypatch, Backend("plain", _never_loads, capabilities=Capabilities(hidden_states=True)))
    with pytest.raises(ValueError, match=REFUSAL.format("plain")):  # the target's word over its backend's
        make_plan("eagle", target=target)
    with pytest.raises(ValueError, match=REFUSAL.format("plain")):  # the draft kind's own guard: one message
        EAGLE.load(EAGLE.parse("eagle", {}), target, dtype="auto", device="cpu")


class _Holding(Drafter):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def propose(self, *args, **kwargs):  # pragma: no cover - never drafts here
        raise NotImplementedError


def test_a_generation_locks_every_target_a_drafter_holds_whatever_its_backend():
    held = _Plain()
    drafter = _Holding(held)
    assert held in list(_held_state(drafter))
    assert generation_lock(held) in _locks_for(tiny_lm(0), drafter)
    assert held.generation_lock is generation_lock(held)  # attached on first use, then kept
