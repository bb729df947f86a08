"""The suffix drafter's copy model: match-length buckets, their prior copy rates, and the copy
anchor that finds the source again after the target leaves it.

**Copy rates** (:data:`COPY_EDGES`, :data:`COPY_PRIOR`): how often the token that followed an
earlier occurrence of the context's last L tokens is the target's next token, per bucket of L —
the prior of :class:`specot.drafting.SuffixDrafter`'s copy model, learned per generation.

**Copy anchor** (:class:`CopyAnchor`). A copy that breaks at an edit — a renamed variable, an added
type hint — leaves a short suffix behind it: the text just written is new, so the longest earlier
match is one or two tokens long (copy rates 0.2–0.5) and nothing is drafted until the target has
written several source tokens again. Speculative edits (Cursor, "Editing files at 1000 tokens per
second", 2024) draft the original text again right after the edit. The anchor keeps the source
position s where the verified copy stopped (the source token the target did not emit) and, for the
next ``horizon`` committed tokens, offers continuations of the source near it:

* ``resync``: the context's last token found again in the source at a position e in
  ``[s, s + k + window)`` (k tokens written since the copy stopped; the nearest such e): the copy
  resumes at e + 1 — the target wrote a replacement and came back;
* ``insert``: resume at s — the target inserted text (``st`` → ``st_value``, then `` = ...``);
* ``replace``: resume at s + 1 — the target replaced one source token.

Each is scored by the copy model as a match of :data:`ALIGN_MATCH` tokens of its kind (its own
bucket past :data:`COPY_EDGES`, with the prior :data:`ALIGN_PRIOR`), learned per generation like
every bucket: where edits are long the anchor's continuations stop being drafted. Drafting from
them changes which tokens are proposed, never how they are verified: lossless as every suffix draft.
"""

from __future__ import annotations

import bisect
from typing import Sequence

__all__ = ["COPY_EDGES", "COPY_PRIOR", "COPY_MATCH_CAP", "ALIGN_KINDS", "ALIGN_PRIOR", "ANCHOR_MIN_MATCH", "CopyAnchor",
           "copy_bucket"]

#: Lower edges of the match-length buckets of the copy model (``copy_model=True``): L = 1, 2, 3,
#: 4–5, 6–7, 8–11, 12–15, 16–31, 32+.
COPY_EDGES = (1, 2, 3, 4, 6, 8, 12, 16, 32)
#: Prior copy rate h(L) per bucket of :data:`COPY_EDGES`, at T = 0 (how often the token after the
#: most recent longest earlier match of the context's last L tokens is the greedy next token) and
#: at T = 1 (the target's mean probability of it): SmolLM2-135M-Instruct Q4_1 on llama.cpp, 10
#: prompts each of benchmarks/prompts/{code,chat,held_out,tasks,kinds,languages,code_more}.jsonl,
#: 128 tokens (2026-11-27; the repeat set left out: it is what the copy model is measured on). Per
#: bucket the LOWER QUARTILE of the seven sets' rates (the means are 0.02–0.06 higher; sets differ
#: by up to 0.25 at L = 4–5): a prior that drafts where the text at hand copies less than the mean
#: set loses, and the generation's own verified nodes raise it where the text copies more. Between
#: the two temperatures the rates are interpolated linearly; above T = 1 the T = 1 row.
COPY_PRIOR = {0.0: (0.22, 0.46, 0.61, 0.70, 0.79, 0.84, 0.90, 0.95, 0.97),
              1.0: (0.11, 0.35, 0.45, 0.53, 0.68, 0.80, 0.82, 0.82, 0.82)}
#: Longest match length the copy model reads (tokens compared past the index's ``max_n``).
COPY_MATCH_CAP = 64

#: The anchor's continuation kinds (module docstring), each the copy model's bucket
#: ``len(COPY_EDGES) + i`` for the first token drafted from it.
ALIGN_KINDS = ("resync", "insert", "replace")
#: Prior copy rate of the first token of each anchor kind at T = 0 and T = 1 (interpolated like
#: :data:`COPY_PRIOR`): a resync (a token found again next to where the copy stopped) as a match
#: of 4–5 tokens; a guessed insertion or replacement as one of 2 and 1 (a guess, learned in each
#: generation from its own verified nodes). Deeper tokens of the same continuation are scored as
#: matches of :data:`ALIGN_MATCH` + their depth − 1.
ALIGN_PRIOR = {0.0: (0.70, 0.46, 0.22), 1.0: (0.53, 0.35, 0.11)}
#: The match length an anchor continuation's second token counts as (its first has its own bucket).
ALIGN_MATCH = 4
#: The shortest verified copy (match length L behind its last copied token) whose break sets an
#: anchor: an edit breaks a long copy; a short match that stops is rarely a copy at all (the
#: Qwen2.5-Coder-1.5B target at T = 0, 4 prompts each: after any break the guesses were right 0 of
#: 12 times on code and 0 of 7 on chat, resyncs 6 of 25 and 2 of 13; after renames 8 of 8).
ANCHOR_MIN_MATCH = 12


def copy_bucket(match: int) -> int:
    """Index of the :data:`COPY_EDGES` bucket of a match length (0 for matches shorter than 1)."""
    return max(0, bisect.bisect_right(COPY_EDGES, match) - 1)


class CopyAnchor:
    """Where the last verified copy left its source (module docstring).

    Args:
        window: source positions searched past ``s + k`` for the context's last token (default 8).
        horizon: committed tokens after the copy stopped for which the anchor is kept (default 16).
        min_match: the shortest copy that sets an anchor: the match length (the copy model's L)
            behind the last verified copied token (default :data:`ANCHOR_MIN_MATCH`).
    """

    def __init__(self, window: int = 8, horizon: int = 16, min_match: int | None = None) -> None:
        self.window, self.horizon = int(window), int(horizon)
        self.min_match = ANCHOR_MIN_MATCH if min_match is None else int(min_match)
        self.reset()

    def reset(self) -> None:
        """Forget the anchor (a new generation)."""
        self.source: int | None = None  # s: the source position the copy would have emitted next
        self.stopped_at = 0  # context length when the target left the source (its token's position)

    def observe(self, seq: Sequence[int], next_source: int | None, stopped_at: int, accepted: int,
                match: int) -> None:
        """After a verified draft: ``next_source`` is the source position a continuing copy would emit
        at position ``stopped_at`` of ``seq`` (the committed sequence; ``None``: the draft followed no
        source), after ``accepted`` drafts, the copy behind it ``match`` tokens long (the copy model's
        L of the last accepted node, or of the first drafted one). The anchor is set when the
        committed token there is not the source's and the copy was at least ``min_match`` long, and
        cleared when it is the source's (the copy goes on, and the suffix match with it); a guess of
        the anchor's own that failed at its first token (``accepted`` 0) leaves it where it was."""
        if next_source is None or not 0 <= next_source < stopped_at or stopped_at >= len(seq):
            return
        s = self.source
        if accepted == 0 and s is not None and next_source in (s, s + 1):
            return
        if seq[stopped_at] == seq[next_source] or match < self.min_match:
            self.source = None
        else:
            self.source, self.stopped_at = next_source, stopped_at

    def starts(self, seq: Sequence[int]) -> list[tuple[int, int]]:
        """``(start, kind)`` of the continuations after ``seq`` (the committed sequence): the source
        resumes at ``seq[start]``; ``kind`` indexes :data:`ALIGN_KINDS`. ``[]`` without an anchor or
        once ``horizon`` tokens were committed after it (then it is dropped)."""
        s = self.source
        if s is None:
            return []
        k = len(seq) - self.stopped_at  # tokens written since the copy stopped (>= 1)
        if k < 1 or k > self.horizon:
            self.source = None
            return []
        out: list[tuple[int, int]] = []
        last, end = seq[-1], min(self.stopped_at, s + k + self.window)
        for e in range(s, end):  # nearest first
            if seq[e] == last:
                out.append((e + 1, 0))
                break
        if k <= 2:  # the insertion and replacement guesses only right after the copy stopped
            out += [(c, kind) for c, kind in ((s, 1), (s + 1, 2)) if c < self.stopped_at]
        return out
