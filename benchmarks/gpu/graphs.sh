#!/bin/bash
# The CUDA-graph checks and speed run of specot on a machine with an NVIDIA GPU (docs/engine.md,
# "CUDA graphs"), in one script of about ten minutes; run it like benchmarks/gpu/checks.sh
# (`bash benchmarks/gpu/graphs.sh`, results in $RESULTS, default gpu-results/):
#
#   1. cuda_check.py, the CUDA-graph checks only: greedy decoding with specot.generate(cuda_graphs=True)
#      equals autoregressive decoding with graphs in float32 and up to near-ties in bf16, for an
#      n-gram chain, an EAGLE tree, the CPU's auto plans (2x3; 3x6, T = 0's) and an early-exit model
#      draft (its own graphs). EAGLE's T = 0 trees are built on the device over a static cache and
#      replayed as graphs too (drafting/eagle/static_tree.py): each check also records the draft's
#      milliseconds per iteration.
#   2. Speed on code prompts at T = 0 and 1 with `bench speedup --cuda-graphs`: every specot row,
#      autoregressive decoding included, replays the target's passes as CUDA graphs; the HF rows
#      stay eager (they anchor this run to an eager one).
#   3. benchmarks/gpu/graph_step.py: one pass of 1 and 8 tokens, eager against replayed (GRAPH_S
#      seconds; off by default).
#   4. `make demo`'s command on the GPU with its defaults (CUDA graphs on, draft auto), at the
#      default temperature and at T = 0 (DEMO_S=0 skips it).
# SET picks the prompt set of part 2 (default code); CHECK_S=0 skips part 1.
# Dry run on a CPU: DEVICE=cpu QUICK=1 RESULTS=/tmp/gpu-dry bash benchmarks/gpu/graphs.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if [ -n "${QUICK:-}" ]; then N=1; TOK=8; else N=${N:-6}; TOK=64; fi

echo "== 1. CUDA-graph checks, at most ${CHECK_S:-150} s"
if [ "$DEVICE" = cpu ] || [ "${CHECK_S:-150}" = 0 ]; then echo "(skipped)"; else
timeout "${CHECK_S:-150}" $PY benchmarks/gpu/cuda_check.py --device "$DEVICE" --only "CUDA graphs" \
  --out "$RESULTS/cuda_check_graphs.json" 2>&1 | tail -12
echo "cuda_check exit $?"; fi

echo "== 2. speed with CUDA graphs, ${SET:-code} prompts, T = 0 and 1, at most ${SPEED_S:-240} s"
timeout "${SPEED_S:-240}" $PY -m specot.cli.main bench speedup --device "$DEVICE" --dtype auto --cuda-graphs \
  --prompts "${SET:-code}" --n-prompts $N --max-new-tokens $TOK --temperatures 0,1 \
  --gammas 4 --trees 2x3,3x6 --draft none --extra-drafts auto,suffix,suffix+eagle --threads 4 --no-progress \
  --no-plots --out "$RESULTS/speedup_graphs_$(basename "${SET:-code}" .jsonl)" 2>&1 | tail -30
echo "speedup exit $?"

[ "${GRAPH_S:-0}" = 0 ] || {
echo "== 3. one pass, eager against replayed, at most ${GRAPH_S} s"
timeout "${GRAPH_S}" $PY benchmarks/gpu/graph_step.py --device "$DEVICE" --out "$RESULTS/graph_step.json" 2>&1 | tail -3
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
ls -la "$RESULTS" 2>/dev/null
