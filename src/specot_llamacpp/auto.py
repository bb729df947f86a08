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

#: What ``auto`` should decode with on the llama.cpp backend, per temperature: suffix-decoding trees
#: (:class:`specot.drafting.SuffixDrafter`, the GREEDY law, depth 4) whose adaptive budget prices a
#: pass of 1 + N tokens at r(1 + N) one-token passes of the curve measured on this machine
#: (:meth:`LlamaCppTarget.pass_cost_curve`, calibrated on first use and cached; with
#: ``SPECOT_CALIBRATE=0`` or a failed calibration, at ``1 + cost_fixed + cost_per_token·N``, the
#: fallback :data:`PASS_COST`) instead of the drafter's defaults (0.05, 0.03, fitted
#: to the transformers backend, whose 7-token pass costs 1.25 one-token passes) — drafting only after
#: a match of at least ``min_n = 4`` tokens, with the count discount ``kappa = 0.05`` (a continuation
#: seen once scores 0.95, not 0.67: with the default 0.5 a priced budget never drafts even when the
#: answer copies the prompt). Chosen by the speedup the quiet curve predicts for each run's passes
#: (``plan.run_speedup``; timing-free) on 8 prompts (2 chat, 2 code edits, a summary, raw prose, raw
#: code, a copy), 64 tokens: mean 1.14 at T = 0 (chat 1.00–1.03, edits 1.25 / 1.43, copy 1.46) and
#: 1.04 at T = 1, against 1.04 / 0.99 with the default kappa and min_n and 0.68 / 0.47 for n-gram chains
#: of 4 (docs/llamacpp.md). n-gram chains, fixed trees and the distilled draft model do not pay on
#: this cost curve at any temperature; EAGLE is not available (no hidden states).
AUTO_PLAN = {
    0.0: {"draft": "suffix", "children": 1, "depth": 4, "kappa": 0.05, "min_n": 4},
    1.0: {"draft": "suffix", "children": 1, "depth": 4, "kappa": 0.05, "min_n": 4},
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
                      options=(("suffix_kappa", e["kappa"]), ("suffix_min_match", e["min_n"])))
