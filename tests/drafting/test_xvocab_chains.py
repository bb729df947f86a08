"""Cross-vocabulary chains through the one chain loop: the committed text's UTF-8 cut in one decode,
and what a priced SLEM chain teaches its calibration (draft tokens judged by the accepted bytes)."""

from __future__ import annotations

import codecs
import functools
import random

from specot.drafting.base import DraftOutcome, DraftTree
from specot.drafting.pricing import PricedChains, pass_cost
from specot.drafting.xvocab import TokenizerView, XVocabDrafter, _utf8_prefix


def _reference_prefix(data: bytes) -> str:
    """The rule as a byte-at-a-time incremental decoder states it: stop at the first invalid byte."""
    dec, out = codecs.getincrementaldecoder("utf-8")(errors="strict"), []
    for i in range(len(data)):
        try:
            out.append(dec.decode(data[i:i + 1]))
        except UnicodeDecodeError:
            break
    return "".join(out)


def test_utf8_prefix_is_the_incremental_decoders():
    rng = random.Random(0)
    pieces = ["a", "é", "€", "日本", "😀", " x"]
    cases = [b"", b"abc", "café".encode()[:-1], b"ok\xe2\x82", b"a\xffb", b"\xe2\x82A", b"\x80", "😀".encode()[:3]]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6))).encode()
        cut = rng.randint(0, len(text))
        junk = bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 2)))
        cases.append(text[:cut] + junk + text[cut:])
    for data in cases:
        assert _utf8_prefix(data) == _reference_prefix(data), data


def _views():
    target_pieces = (b"a", b"b", b"ab", b"c", b"<eos>")
    draft_pieces = (b"a", b"b", b"c", b"ca", b"<s>")

    def enc(pieces):
        def encode(text):  # greedy longest match: enough for the check
            out, i, data = [], 0, text.encode()
            while i < len(data):
                j = max((k for k, p in enumerate(pieces[:-1]) if data.startswith(p, i)), key=lambda k: len(pieces[k]))
                out.append(j)
                i += len(pieces[j])
            return out
        return encode
    return (TokenizerView("t", target_pieces, frozenset({4}), enc(target_pieces)),
            TokenizerView("d", draft_pieces, frozenset({4}), enc(draft_pieces)))


class _NoModel:
    name = "none"

    def reset(self):
        pass


def test_a_priced_slem_chain_teaches_its_calibration_by_accepted_bytes():
    target_view, draft_view = _views()
    pricing = PricedChains(functools.partial(pass_cost, curve=lambda b: 1.0), 0.0)
    drafter = XVocabDrafter(_NoModel(), draft_view, target_view, "slem", pricing=pricing)
    # draft tokens "a", "b", "ca" (bytes a|b|ca) re-encoded as target "ab", "c", "a"
    drafter._slem_spans = [(0, 1), (1, 2), (2, 4)]
    tree = DraftTree.chain(3, [2, 3, 0])
    drafter._last_tree = tree
    pricing.note([0.9, 0.8, 0.7])
    # "ab" accepted, "c" rejected: the draft tokens "a" and "b" accepted, "ca" verified and rejected
    drafter.update(DraftOutcome(tree=tree, path=(1,), tokens=(2, 0), context_len=5))
    cal = pricing.calibration
    assert sum(cal.verified) == 3 and sum(cal.accepted) == 2
    assert cal.accepted[cal.bucket(0.7)] == 0 and cal.verified[cal.bucket(0.7)] == 1
    # nothing accepted: only the first draft token was verified
    pricing.note([0.9, 0.8, 0.7])
    drafter.update(DraftOutcome(tree=tree, path=(), tokens=(1,), context_len=5))
    assert sum(cal.verified) == 4 and sum(cal.accepted) == 2
