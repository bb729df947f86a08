"""A loaded target (and drafter) shared between threads: a generation holds the target's and the
drafter's generation locks for its whole run (``specot.engine.decode``), so concurrent calls run
one after the other and each returns exactly what it returns alone: tokens and statistics.

The choreographed tests pause one generation in its streaming callback until another thread's
generation on the same objects has finished (or 0.5 s have passed): without the lock the other
generation runs inside the pause and resets the shared caches, counters and drafter state, so the
paused one's result differs from its sequential run; with it, the other waits."""

from __future__ import annotations

import threading

import pytest
import torch

import specot
from specot.drafting import ModelDrafter, NGramDrafter
from specot.engine import GenerationConfig, loop, speculative_generate
from specot.models import load_model
from specot.sampling import SamplingConfig

from model_helpers import tiny_lm

PROMPTS = ["the cat sat on the mat", "a big dog ran to the park", "the red cat and the blue dog",
           "small cat sat on a big mat"]


def _key(report) -> tuple:
    """What must not change between a sequential and a concurrent run (everything but times)."""
    result = getattr(report, "result", report)
    st = result.stats
    return (result.tokens, st.new_tokens, st.target_calls, st.draft_calls, st.iterations, st.drafted, st.accepted,
            list(st.accepted_at), list(st.tried_at), list(st.accepted_lengths))


@pytest.fixture(scope="module")
def shared_target(tiny_model_dir):
    return load_model(tiny_model_dir, dtype="float32")


def _gen(target, prompt, *, draft="ngram", on_text=None, temperature=0.0, seed=0):
    return specot.generate(prompt, target=target, draft=draft, ngram_corpus=None, chat=False, temperature=temperature,
                           seed=seed, max_new_tokens=48, on_text=on_text)


def _run_threads(jobs) -> list:
    """Run each ``job()`` in its own thread, all started together; their results (or exceptions)."""
    out: list = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def work(i, job):
        start.wait()
        try:
            out[i] = job()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion
            out[i] = exc
    threads = [threading.Thread(target=work, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    return out


def _paused_while_another_runs(first, second) -> tuple:
    """Run ``first(on_text)``; at its first streamed text it waits (0.5 s at most) for ``second()``,
    started in another thread at that moment, to finish. Returns both results."""
    done = threading.Event()
    other: list = []

    def run_second():
        try:
            other.append(second())
        finally:
            done.set()

    worker = threading.Thread(target=run_second)

    def on_text(piece: str) -> None:
        if not worker.is_alive() and not done.is_set():
            worker.start()
            done.wait(0.5)  # with the lock the second generation waits for this one: a timeout
    result = first(on_text)
    worker.join(120)
    return result, other[0]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_threads_sharing_a_target_get_their_sequential_results(shared_target, temperature):
    alone = [_key(_gen(shared_target, p, temperature=temperature, seed=i)) for i, p in enumerate(PROMPTS)]
    jobs = [lambda p=p, i=i: _gen(shared_target, p, temperature=temperature, seed=i) for i, p in enumerate(PROMPTS)]
    for _ in range(2):
        together = _run_threads(jobs)
        assert [r if isinstance(r, Exception) else _key(r) for r in together] == alone


def test_a_generation_is_not_interleaved_with_another_on_the_same_target(shared_target):
    a, b = PROMPTS[0], PROMPTS[1]
    alone = (_key(_gen(shared_target, a)), _key(_gen(shared_target, b)))
    got = _paused_while_another_runs(lambda on_text: _gen(shared_target, a, on_text=on_text),
                                     lambda: _gen(shared_target, b))
    assert (_key(got[0]), _key(got[1])) == alone


def test_a_shared_drafter_is_held_for_a_whole_generation(tiny_model_dir):
    targets = [load_model(tiny_model_dir, dtype="float32") for _ in range(2)]
    drafter = NGramDrafter(n=2)  # one drafter object, two targets: the drafter's own lock
    a, b = PROMPTS[2], PROMPTS[3]
    alone = (_key(_gen(targets[0], a, draft=drafter)), _key(_gen(targets[1], b, draft=drafter)))
    got = _paused_while_another_runs(lambda on_text: _gen(targets[0], a, draft=drafter, on_text=on_text),
                                     lambda: _gen(targets[1], b, draft=drafter))
    assert (_key(got[0]), _key(got[1])) == alone


def test_a_draft_model_shared_by_several_drafters_is_held_too():
    targets = [tiny_lm(i, dtype=torch.float32) for i in (0, 2, 3, 4)]
    draft = tiny_lm(1, dtype=torch.float32)  # one draft model, a fresh ModelDrafter per generation
    cfg = GenerationConfig(max_new_tokens=40, gamma=3, sampling=SamplingConfig(1.0), seed=5)
    prompts = ([1, 5, 3, 7], [2, 4, 6, 8, 10], [9, 9, 1], [3, 1, 4, 1, 5, 9, 2, 6])

    def run(i):
        return speculative_generate(targets[i], ModelDrafter(draft), prompts[i], cfg)
    alone = [_key(run(i)) for i in range(4)]
    for _ in range(2):
        together = _run_threads([lambda i=i: run(i) for i in range(4)])
        assert [r if isinstance(r, Exception) else _key(r) for r in together] == alone


def test_locks_are_taken_in_one_global_order_and_once_each(tiny_target, tiny_draft):
    drafter = ModelDrafter(tiny_draft)
    locks = loop._locks_for(tiny_target, drafter)
    assert len(locks) == 3 and [id(x) for x in locks] == sorted(id(x) for x in locks)
    assert tiny_target.generation_lock in locks and tiny_draft.generation_lock in locks
    assert loop.generation_lock(drafter) in locks and loop.generation_lock(drafter) is loop.generation_lock(drafter)
    # a model that is one generation's target and another's draft: the same order, no deadlock
    assert set(map(id, loop._locks_for(tiny_draft, ModelDrafter(tiny_target)))) >= \
        {id(tiny_target.generation_lock), id(tiny_draft.generation_lock)}
    assert loop._locks_for(tiny_target, None) == [tiny_target.generation_lock]


def test_two_models_crossing_roles_do_not_deadlock():
    x, y = tiny_lm(0, dtype=torch.float32), tiny_lm(1, dtype=torch.float32)
    cfg = GenerationConfig(max_new_tokens=24, gamma=3, sampling=SamplingConfig(1.0), seed=1)
    alone = (_key(speculative_generate(x, ModelDrafter(y), [1, 2, 3], cfg)),
             _key(speculative_generate(y, ModelDrafter(x), [3, 2, 1], cfg)))
    got = _run_threads([lambda: speculative_generate(x, ModelDrafter(y), [1, 2, 3], cfg),
                        lambda: speculative_generate(y, ModelDrafter(x), [3, 2, 1], cfg)])
    assert tuple(_key(r) for r in got) == alone


@pytest.mark.slow
@pytest.mark.real_model
def test_threads_sharing_the_embedded_target():
    tgt = specot.load_target(None, dtype="float32")
    prompts = ["Write a Python function that reverses a list.", "Name three colours."]
    alone = [_key(specot.generate(p, target=tgt, draft="ngram", temperature=0, max_new_tokens=48)) for p in prompts]
    together = _run_threads([lambda p=p: specot.generate(p, target=tgt, draft="ngram", temperature=0,
                                                         max_new_tokens=48) for p in prompts])
    assert [r if isinstance(r, Exception) else _key(r) for r in together] == alone
