"""``draft="auto"`` on the llama.cpp backend: what measured fastest there, as data (chain-length 1 suffix "trees": children 1, depth 4). Imports neither
llama-cpp-python nor the target, so the ``specot.backends`` entry point loads without them."""

from __future__ import annotations

import torch

from specot.models.protocol import Capabilities
from specot.plan.auto import AutoChoice

__all__ = ["AUTO_PLAN", "CAPABILITIES", "PASS_COST", "auto_choice"]

#: What a llama.cpp target can do, declared by the backend entry before any load
#: (:attr:`LlamaCppTarget.capabilities` adds its tree limits): no per-layer hidden states (llama.cpp
#: exposes only the last layer's output), no static cache, float32 logits, a measured pass-cost curve
#: (:meth:`LlamaCppTarget.pass_cost_curve`).
CAPABILITIES = Capabilities(hidden_states=False, dtypes=(torch.float32,), pass_cost=True)

#: What ``auto`` should decode with on the llama.cpp backend, per temperature: suffix-decoding chains
#: (:class:`specot.drafting.SuffixDrafter`, the GREEDY law, up to 8 deep) whose adaptive budget prices
#: a pass of 1 + N tokens at r(1 + N) one-token passes of the curve measured on this machine
#: (:meth:`LlamaCppTarget.pass_cost_curve`, calibrated on first use and cached; with
#: ``SPECOT_CALIBRATE=0`` or a failed calibration, at ``1 + cost_fixed + cost_per_token·N``, the
#: fallback :data:`PASS_COST`) — drafting only after a match of at least ``min_n = 4`` tokens, each
#: node scored by the copy model (``copy_model``: the rate at which text after a match of its
#: length is copied, learned per generation around :data:`specot.drafting.suffix.COPY_PRIOR`), so a
#: long copy drafts a long chain and a short match none. Where a wide pass costs about its width
#: (a CPU), a draft pays only when nearly certain: against the count-discounted scores (κ = 0.05)
#: and chains of 4 it had before, the copy model and chains of 8 raise the speedup the measured
#: curve predicts from 1.01 / 0.99 / 0.98 to 1.06 / 1.01 / 1.01 on three prompt sets it was not
#: fitted to (code_more, tasks, kinds; T = 0, 12 prompts, 64 tokens) and from 1.15 to 1.26 on the
#: repeat set; at T = 1 it drafts less (1.00 everywhere; 1.03 on the repeat set). n-gram chains,
#: fixed trees and the distilled draft model do not pay on this cost curve at any temperature;
#: EAGLE is not available (no hidden states). No n-gram corpus (``corpus``): its nodes start at a
#: 0.3 acceptance gate and a draft token here needs about 0.9, so it never drafted, and building it
#: took 0.2 s of every run's start. ``overhead``: a drafted step's work outside its pass beyond a
#: plain step's (the suffix drafter's proposal, the chain's verification, the drafter's update),
#: ``"measure"``d on the machine that runs against its measured t(1) and cached
#: (:mod:`specot.plan.step_work`; ~0.1 ms, 0.013 of a 7.5 ms pass on a 2-core Zen 4, where the
#: constant 0.05 priced before also counted the logits rows the curve already holds): a budget that
#: ignores it drafts chains that gain less than they cost, and on a fast pass (a GPU) it is most of
#: the price.
AUTO_PLAN = {
    0.0: {"draft": "suffix", "children": 1, "depth": 8, "kappa": 0.05, "min_n": 4, "copy_model": True,
          "corpus": "none", "overhead": "measure"},
    1.0: {"draft": "suffix", "children": 1, "depth": 8, "kappa": 0.05, "min_n": 4, "copy_model": True,
          "corpus": "none", "overhead": "measure"},
}
#: FALLBACK ``(cost_fixed, cost_per_token)``: a pass over 1 + N tokens costs ``1 + f + c·N`` one-token
#: passes, the linear fit of :data:`specot_llamacpp.plan.QUIET_CURVE` (measured on a Zen 4 with
#: AVX-512; ``specot_llamacpp.bench.fit_linear_cost``). :class:`LlamaCppTarget` carries it as
#: ``pass_cost``; specot's suffix drafter prices with it only where no curve was measured on the
#: machine that runs (``SPECOT_CALIBRATE=0``, or the calibration failed): on an AVX2-only EPYC the
#: real r(2) is 1.56, not 1.93.
PASS_COST = (0.55, 0.38)


def auto_choice(temperature: float) -> AutoChoice:
    """The backend's ``draft="auto"`` rule (``Backend.auto``): :data:`AUTO_PLAN`'s entry of the
    nearest temperature listed."""
    e = AUTO_PLAN[min(AUTO_PLAN, key=lambda t: abs(t - float(temperature)))]
    return AutoChoice(e["draft"], e["children"], e["depth"],
                      options=(("suffix_kappa", e["kappa"]), ("suffix_min_match", e["min_n"]),
                               ("suffix_copy_model", e["copy_model"]), ("ngram_corpus", e["corpus"]),
                               ("suffix_draft_overhead", e["overhead"])))
