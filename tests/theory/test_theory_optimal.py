"""α* by subset selection vs the exact OTM LP, the brute-force minimum over subsets, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from theory_helpers import law_tuples, lp_alpha, lp_alpha_and_violation, random_pair, softmax_case, support

from specot.theory import (
    JointDraftLaw,
    optimal_acceptance,
    optimal_acceptance_all_laws,
    optimal_acceptance_bruteforce,
    set_probability,
)
from specot.theory.optimal import scan_order

LAWS = ("iid", "wor", "cps", "greedy", "spechub")


def _applicable(law: str, n: int, q: np.ndarray) -> bool:
    if law == "spechub" and n > 2:
        return False
    return law == "iid" or n == 1 or support(q) >= n


def test_subset_selection_equals_lp_on_500_random_cases() -> None:
    """The ground truth: ≥ 500 cases, V ≤ 6, n ≤ 3, degenerate ones included, every law, 1e-9."""
    rng = np.random.default_rng(20260)
    worst = {law: 0.0 for law in LAWS}
    checked = {law: 0 for law in LAWS}
    lp_off = 0  # cases where HiGHS's own tolerance (see lp_alpha_and_violation) exceeds 1e-9
    for _ in range(520):
        V = int(rng.integers(2, 7))
        n = int(rng.integers(1, 4))
        p, q = random_pair(rng, V)
        for law in LAWS:
            if not _applicable(law, n, q):
                continue
            r = optimal_acceptance(p, q, n, law)
            lp, viol = lp_alpha_and_violation(p, q, n, law)
            err = abs(r.alpha - lp)
            if err > 1e-9:  # only allowed where the LP solution itself violates its constraints
                assert err <= 1e-9 + viol, (law, p, q, n, r.alpha, lp, viol)
                lp_off += 1
                err = 0.0
            worst[law] = max(worst[law], err)
            checked[law] += 1
            # the returned H* attains the optimum
            mask = np.zeros(V, bool)
            mask[r.H] = True
            val = 1.0 + p[mask].sum() - set_probability(q, mask, n, law)
            assert abs(val - r.alpha) < 1e-9, (law, p, q, n)
    for law in LAWS:
        assert worst[law] < 1e-9, (law, worst[law])
    assert min(checked.values()) >= 200 and checked["iid"] >= 500
    assert lp_off <= 3, lp_off


def test_joint_law_bruteforce_equals_lp() -> None:
    rng = np.random.default_rng(7)
    for _ in range(60):
        V = int(rng.integers(2, 7))
        n = int(rng.integers(1, 4))
        p, q = random_pair(rng, V)
        law = ["iid", "wor", "cps"][int(rng.integers(3))]
        if not _applicable(law, n, q):
            continue
        tuples, probs = law_tuples(q, n, law)
        j = optimal_acceptance(p, None, n, JointDraftLaw(tuples, probs))
        assert j.law == "joint" and j.method == "brute-force"
        assert abs(j.alpha - lp_alpha(p, q, n, law)) < 1e-9
        # a random arbitrary joint law (not from any q)
        M = int(rng.integers(1, 8))
        t = rng.integers(0, V, (M, n))
        w = rng.dirichlet(np.ones(M))
        from specot.verifiers.otm import draft_sets, solve_otm_lp

        masks, masses = draft_sets(t, w, V)
        assert abs(optimal_acceptance(p, None, n, JointDraftLaw(t, w)).alpha - solve_otm_lp(p, masks, masses).value) < 1e-9


@pytest.mark.parametrize("law", ["iid", "wor", "cps"])
def test_prefix_scan_matches_bruteforce_over_all_subsets(law: str) -> None:
    """The sorted-prefix scan is only a theorem for q-convex Q: check it against all 2^V subsets,
    with ties in q/p (grid-valued p, q) and random tie orders (tokens shuffled)."""
    rng = np.random.default_rng({"iid": 1, "wor": 2, "cps": 3}[law])
    for _ in range(150):
        V = int(rng.integers(2, 10))
        n = int(rng.integers(2, 5))
        if rng.random() < 0.5:
            p = rng.integers(0, 3, V).astype(float)
            q = rng.integers(0, 3, V).astype(float)
            p[0] += 1
            q[-1] += 1
            p, q = p / p.sum(), q / q.sum()
        else:
            p, q = random_pair(rng, V)
        if not _applicable(law, n, q):
            continue
        perm = rng.permutation(V)
        p, q = p[perm], q[perm]
        scan = optimal_acceptance(p, q, n, law)
        brute = optimal_acceptance_bruteforce(p, q, n, law)
        assert abs(scan.alpha - brute.alpha) < 1e-9, (law, p, q, n)


def test_scan_order_puts_p_zero_first_and_q_zero_last() -> None:
    p = np.array([0.0, 0.5, 0.5, 0.0])
    q = np.array([0.5, 0.25, 0.0, 0.25])
    order = scan_order(p, q).tolist()
    assert set(order[:2]) == {0, 3} and order[-1] == 2


def test_n1_and_laws_coincide() -> None:
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(50)), rng.dirichlet(np.ones(50))
    tv = 1 - np.abs(p - q).sum() / 2
    for law in LAWS:
        assert abs(optimal_acceptance(p, q, 1, law).alpha - tv) < 1e-12


def test_greedy_closed_form_theorem7() -> None:
    p = np.array([0.1, 0.2, 0.3, 0.4])
    q = np.array([0.4, 0.3, 0.2, 0.1])
    # top-1 of q is token 0; q¬Top = (0, .5, 1/3, 1/6)
    expect = 0.1 + min(0.2, 0.5) + min(0.3, 1 / 3) + min(0.4, 1 / 6)
    r = optimal_acceptance(p, q, 2, "greedy")
    assert abs(r.alpha - expect) < 1e-15 and r.method == "closed-form"
    assert abs(optimal_acceptance(p, q, 2, "spechub").alpha - expect) < 1e-15


def test_identical_distributions_give_one_and_result_fields() -> None:
    rng = np.random.default_rng(4)
    p = rng.dirichlet(np.ones(300))
    for law in ("iid", "wor", "cps", "greedy"):
        r = optimal_acceptance(p, p.copy(), 3, law)
        if law == "greedy":
            assert r.alpha <= 1.0
        else:
            assert r.alpha == pytest.approx(1.0, abs=1e-12)
        assert r.law == law and r.n == 3 and r.H.dtype == np.int64 and r.law_description


def test_laws_ordering_on_realistic_distribution() -> None:
    rng = np.random.default_rng(5)
    p, q = softmax_case(rng, 3000, 0.7)
    res = optimal_acceptance_all_laws(p, q, 4)
    assert set(res) == {"iid", "wor", "cps", "greedy"}
    assert res["wor"].alpha >= res["iid"].alpha - 1e-12  # without replacement never worse (Hu et al.)


def test_torch_and_batch_inputs() -> None:
    rng = np.random.default_rng(6)
    P = rng.dirichlet(np.ones(40), size=3)
    Q = rng.dirichlet(np.ones(40), size=3)
    batch = optimal_acceptance(torch.from_numpy(P).float(), torch.from_numpy(Q).float(), 3, "wor")
    assert isinstance(batch, list) and len(batch) == 3
    for b in range(3):
        single = optimal_acceptance(P[b], Q[b], 3, "wor")
        assert abs(batch[b].alpha - single.alpha) < 1e-5  # float32 inputs


@pytest.mark.parametrize(
    "p, q, n, law, exc, match",
    [
        (np.array([0.5, 0.6]), np.array([0.5, 0.5]), 2, "iid", ValueError, "sum to 1"),
        (np.array([1.2, -0.2]), np.array([0.5, 0.5]), 2, "iid", ValueError, "negative"),
        (np.array([np.nan, 1.0]), np.array([0.5, 0.5]), 2, "iid", ValueError, "NaN"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 0, "iid", ValueError, "n \\(number of drafts\\) must be >= 1"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2.0, "iid", TypeError, "must be an int"),
        (np.array([0.5, 0.5]), np.array([0.5, 0.5]), 2, "bogus", ValueError, "unknown draft law"),
        (np.array([0.5, 0.5]), np.array([1.0, 0.0]), 2, "wor", ValueError, "at least n=2 tokens"),
        (np.array([0.3, 0.3, 0.4]), np.array([0.3, 0.3, 0.4]), 3, "spechub", ValueError, "n <= 2"),
        (np.array([0.5, 0.5]), np.array([0.2, 0.3, 0.5]), 2, "iid", ValueError, "vocabulary mismatch"),
        (np.array([1, 0]), np.array([0.5, 0.5]), 2, "iid", TypeError, "floating"),
        ("abc", np.array([0.5, 0.5]), 2, "iid", TypeError, "torch.Tensor or numpy"),
    ],
)
def test_bad_input_raises_clear_errors(p, q, n, law, exc, match) -> None:  # noqa: ANN001
    with pytest.raises(exc, match=match):
        optimal_acceptance(p, q, n, law)


def test_bruteforce_laws_reject_large_vocabularies() -> None:
    p = np.full(30, 1 / 30)
    with pytest.raises(ValueError, match="MAX_BRUTE_FORCE_VOCAB"):
        optimal_acceptance_bruteforce(p, p, 2, "wor")
    with pytest.raises(ValueError, match="MAX_BRUTE_FORCE_VOCAB"):
        optimal_acceptance(p, None, 2, JointDraftLaw(np.array([[0, 1]]), np.array([1.0])))
    with pytest.raises(ValueError, match="sum to 1"):
        JointDraftLaw(np.array([[0, 1]]), np.array([0.5]))
    with pytest.raises(ValueError, match="disagrees"):
        optimal_acceptance(p[:4] * 30 / 4, None, 3, JointDraftLaw(np.array([[0, 1]]), np.array([1.0])))
