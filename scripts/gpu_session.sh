#!/bin/bash
# The checks of a SHORT GPU lease (15 minutes of device time, start-up included), as one prepared
# script (docs/engine.md, "What the H200 showed in sessions 27 and 28": it ran there in 260 s and
# 160 s, all checks passing). scripts/gpu_graphs.sh is its companion for the CUDA-graph path, which
# specot.generate takes by default on CUDA since session 28.
#
#   1. cuda_check.py: bf16 greedy and T = 1 sampling with a CUDA generator for every plan, the
#      refusal of a CPU generator, the verifiers on CUDA, the attention kernels (no cuDNN), and bf16
#      greedy with CUDA graphs (the float32 greedy checks passed in sessions 15 and 28). The checks
#      pass cuda_graphs=False except the graph ones.
#   2. Speed on code prompts at T = 0 and 1, eager (no graphs), one run: autoregressive decoding, `auto`
#      (n-gram on CUDA), `suffix` trees and `suffix+eagle` trees (the CPU's plan), and Hugging
#      Face's prompt lookup, on 6 prompts; EAGLE trees of 2 x 3 and 3 x 6 (on the launch-bound H200 a
#      pass of 7 tokens cost what one of 5 did; the run's cost curve measures 19). Which plan `auto`
#      should pick on CUDA follows from it.
#   3. What CUDA graphs would buy: one target pass of 1 and 8 tokens, eager against a captured
#      torch.cuda.CUDAGraph over a StaticCache (scripts/graph_step.py).
#   4. How fast the EAGLE data sampler runs on the GPU (scripts/sampling_speed.py, 64 prompts of
#      about 300 tokens, 128 new tokens, with labels and ids only): it sizes the next training lease
#      (SAMPLE_S=0 skips it).
#
# With scripts/device_kit.sh (here, once: `build`, then `slim` so the tree fits the carry):
#   run carry=[.dev/p00]  : mkdir -p /tmp/g && cp .dev/p00 /tmp/g/
#   run carry=[.dev/p01]  : cp .dev/p01 /tmp/g/                        (at once: the machine idles out)
#   run carry=[.dev/p02, .dev/whl, .dev/llm_init.py, .dev/setup.sh, .dev/specot-0.1.0.dist-info]
#                         : bash .dev/setup.sh && bash /tmp/repo/scripts/gpu_session.sh   (timeout_s 600)
#   then `scripts/device_kit.sh unslim` here; the JSON comes back under $OUT.
# Each part has its own time limit, so a slow part cannot eat the next one's; every result is
# written as it is made. Dry run on a CPU: DEVICE=cpu QUICK=1 OUT=/tmp/o bash scripts/gpu_session.sh
source "$(dirname "$0")/device_env.sh"
if [ -n "${QUICK:-}" ]; then N=1; TOK=8; SAMPLE_B=${SAMPLE_B:-4}; CHECK_ONLY="refused,sampling T=1 bf16: ngram,no cuDNN"; else N=${N:-6}; TOK=64; CHECK_ONLY=""; fi

echo "== 1. CUDA checks (bf16, sampling, verifiers), at most ${CHECK_S:-200} s"
timeout "${CHECK_S:-200}" $PY scripts/cuda_check.py --device "$DEVICE" \
  --only "${CHECK_ONLY:-bfloat16,bf16,refused,verifier}" --out "$OUT/cuda_check.json" 2>&1 | tail -40
echo "cuda_check exit $?"

echo "== 2. speed on code prompts, T = 0 and 1, at most ${SPEED_S:-260} s"
timeout "${SPEED_S:-260}" $PY -m specot.cli.main bench speedup --device "$DEVICE" --dtype auto \
  --prompts docs/bench/prompts_code.jsonl --n-prompts $N --max-new-tokens $TOK --temperatures 0,1 \
  --gammas 4 --trees 2x3,3x6 --draft none --extra-drafts auto,suffix,suffix+eagle --threads 4 --no-progress \
  --no-plots --out "$OUT/speedup_code" 2>&1 | tail -30
echo "speedup exit $?"

echo "== 3. what CUDA graphs would buy a target pass, at most ${GRAPH_S:-90} s"
timeout "${GRAPH_S:-90}" $PY scripts/graph_step.py --device "$DEVICE" --out "$OUT/graph_step.json" 2>&1 | tail -5
echo "graph_step exit $?"

[ "${SAMPLE_S:-90}" = 0 ] || {
echo "== 4. the EAGLE data sampler on the GPU, at most ${SAMPLE_S:-90} s"
timeout "${SAMPLE_S:-90}" $PY scripts/sampling_speed.py --device "$DEVICE" --batch-size ${SAMPLE_B:-64} \
  --max-new-tokens $((TOK * 2)) --out "$OUT/sampling_speed.json" 2>&1 | tail -5
echo "sampling exit $?"
}
ls -la "$OUT" "$OUT/speedup_code" 2>/dev/null
