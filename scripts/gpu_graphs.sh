#!/bin/bash
# The CUDA-graph checks and speed run of a short GPU lease (docs/engine.md, "CUDA graphs"), as one
# prepared script, carried and started like scripts/gpu_session.sh (its third call runs
# `bash .dev/setup.sh && bash /tmp/repo/scripts/gpu_graphs.sh`):
#
#   1. cuda_check.py, the CUDA-graph checks only: greedy decoding with specot.generate(cuda_graphs=True)
#      equals autoregressive decoding with graphs in float32 and up to near-ties in bf16, for an
#      n-gram chain, an EAGLE tree, the CPU's auto plan and an early-exit model draft (its own graphs).
#   2. Speed on code prompts at T = 0 and 1 with `bench speedup --cuda-graphs`: every specot row,
#      autoregressive decoding included, replays the target's passes as CUDA graphs; the HF rows
#      stay eager (they anchor this run to an eager one).
#   3. scripts/graph_step.py: one pass of 1 and 8 tokens, eager against replayed.
# Dry run on a CPU: DEVICE=cpu QUICK=1 OUT=/tmp/o bash scripts/gpu_graphs.sh
set -uo pipefail
if [ -f /tmp/env.sh ]; then source /tmp/env.sh; else cd "$(dirname "$0")/.."; fi
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PY=${PY:-python3}
if [ -n "${QUICK:-}" ]; then N=1; TOK=8; else N=${N:-6}; TOK=64; fi
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > "$OUT/gpu.txt" 2>&1 || true

echo "== 1. CUDA-graph checks, at most ${CHECK_S:-150} s"
if [ "$DEVICE" = cpu ]; then echo "(skipped on a CPU: cuda_check runs graphs on CUDA only)"; else
timeout "${CHECK_S:-150}" $PY scripts/cuda_check.py --device "$DEVICE" --only "CUDA graphs" \
  --out "$OUT/cuda_check_graphs.json" 2>&1 | tail -12
echo "cuda_check exit $?"; fi

echo "== 2. speed with CUDA graphs, code prompts, T = 0 and 1, at most ${SPEED_S:-240} s"
timeout "${SPEED_S:-240}" $PY -m specot.cli.main bench speedup --device "$DEVICE" --dtype auto --cuda-graphs \
  --prompts docs/bench/prompts_code.jsonl --n-prompts $N --max-new-tokens $TOK --temperatures 0,1 \
  --gammas 4 --trees 2x3,3x6 --draft none --extra-drafts auto,suffix,suffix+eagle --threads 4 --no-progress \
  --no-plots --out "$OUT/speedup_code_graphs" 2>&1 | tail -30
echo "speedup exit $?"

echo "== 3. one pass, eager against replayed, at most ${GRAPH_S:-60} s"
timeout "${GRAPH_S:-60}" $PY scripts/graph_step.py --device "$DEVICE" --out "$OUT/graph_step.json" 2>&1 | tail -3
echo "graph_step exit $?"
ls -la "$OUT" 2>/dev/null
