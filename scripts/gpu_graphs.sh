#!/bin/bash
# The CUDA-graph checks and speed run of a short GPU lease (docs/engine.md, "CUDA graphs"), as one
# prepared script, carried and started like scripts/gpu_session.sh (its third call runs
# `bash .dev/setup.sh && bash /tmp/repo/scripts/gpu_graphs.sh`):
#
#   1. cuda_check.py, the CUDA-graph checks only: greedy decoding with specot.generate(cuda_graphs=True)
#      equals autoregressive decoding with graphs in float32 and up to near-ties in bf16, for an
#      n-gram chain, an EAGLE tree, the CPU's auto plans (2x3; 3x6, T = 0's) and an early-exit model
#      draft (its own graphs). Since session 29 EAGLE's T = 0 trees are built on the device over a
#      static cache and replayed as graphs too (drafting/eagle_static.py): each check also records
#      the draft's milliseconds per iteration (session 28, eager: 3.5-9.3).
#   2. Speed on code prompts at T = 0 and 1 with `bench speedup --cuda-graphs`: every specot row,
#      autoregressive decoding included, replays the target's passes as CUDA graphs; the HF rows
#      stay eager (they anchor this run to an eager one).
#   3. scripts/graph_step.py: one pass of 1 and 8 tokens, eager against replayed.
#   4. `make demo`'s command on the GPU with its defaults (CUDA graphs on, draft auto), at the
#      default temperature and at T = 0 (DEMO_S=0 skips it).
#   5. The n-gram drafter's γ schedule with graphs (scripts/ngram_schedule_ab.py: constant against
#      heuristic, 4 sets x T = 0 / 1; NGRAM_S=0 skips it): chat at T = 1 ran at 0.92x in session 28.
#   6. EAGLE's T = 0 trees, host construction against the static one with graphs (scripts/static_tree_ab.py,
#      code and chat, against graphed autoregressive decoding; STATIC_S=0 skips it).
# SET picks the prompt set of part 2 (default the code prompts); CHECK_S=0 / GRAPH_S=0 skip parts 1 / 3.
# Dry run on a CPU: DEVICE=cpu QUICK=1 OUT=/tmp/o bash scripts/gpu_graphs.sh
source "$(dirname "$0")/device_env.sh"
if [ -n "${QUICK:-}" ]; then N=1; TOK=8; else N=${N:-6}; TOK=64; fi

echo "== 1. CUDA-graph checks, at most ${CHECK_S:-150} s"
if [ "$DEVICE" = cpu ] || [ "${CHECK_S:-150}" = 0 ]; then echo "(skipped)"; else
timeout "${CHECK_S:-150}" $PY scripts/cuda_check.py --device "$DEVICE" --only "CUDA graphs" \
  --out "$OUT/cuda_check_graphs.json" 2>&1 | tail -12
echo "cuda_check exit $?"; fi

echo "== 2. speed with CUDA graphs, code prompts, T = 0 and 1, at most ${SPEED_S:-240} s"
timeout "${SPEED_S:-240}" $PY -m specot.cli.main bench speedup --device "$DEVICE" --dtype auto --cuda-graphs \
  --prompts "${SET:-docs/bench/prompts_code.jsonl}" --n-prompts $N --max-new-tokens $TOK --temperatures 0,1 \
  --gammas 4 --trees 2x3,3x6 --draft none --extra-drafts auto,suffix,suffix+eagle --threads 4 --no-progress \
  --no-plots --out "$OUT/speedup_graphs_$(basename "${SET:-prompts_code}" .jsonl)" 2>&1 | tail -30
echo "speedup exit $?"

[ "${GRAPH_S:-0}" = 0 ] || {
echo "== 3. one pass, eager against replayed, at most ${GRAPH_S} s"
timeout "${GRAPH_S}" $PY scripts/graph_step.py --device "$DEVICE" --out "$OUT/graph_step.json" 2>&1 | tail -3
echo "graph_step exit $?"
}

[ "${DEMO_S:-60}" = 0 ] || {
echo "== 4. make demo's command on $DEVICE, defaults, then T = 0, at most ${DEMO_S:-60} s each"
DEMO_PROMPT=$(sed -n 's/^DEMO_PROMPT *?*:*= *//p' Makefile 2>/dev/null | head -1)
for extra in "" "--temperature 0"; do
  timeout "${DEMO_S:-60}" $PY -m specot.cli.main generate --prompt "${DEMO_PROMPT:-Explain in two sentences what a Python generator is.}" \
    --device "$DEVICE" --max-new-tokens $((TOK + TOK / 2)) --baseline --repeats 5 $extra 2>&1 | tail -4
done
}
[ "${NGRAM_S:-150}" = 0 ] || {
echo "== 5. the n-gram drafter's γ schedule with graphs, at most ${NGRAM_S:-150} s"
graphs=$([ "$DEVICE" = cpu ] || echo --cuda-graphs)
timeout "${NGRAM_S:-150}" $PY scripts/ngram_schedule_ab.py --device "$DEVICE" $graphs --n-prompts $N \
  --max-new-tokens $TOK --out "$OUT/ngram_schedule_ab.json" 2>&1 | grep speedup
}
[ "${STATIC_S:-150}" = 0 ] || {
echo "== 6. EAGLE's T = 0 trees: host construction against the static one, at most ${STATIC_S:-150} s"
graphs=$([ "$DEVICE" = cpu ] || echo --cuda-graphs)
timeout "${STATIC_S:-150}" $PY scripts/static_tree_ab.py --device "$DEVICE" $graphs --n-prompts $N \
  --max-new-tokens $TOK --out "$OUT/static_tree_ab.json" 2>&1 | grep speedup
}
ls -la "$OUT" 2>/dev/null
