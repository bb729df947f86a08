#!/bin/bash
# The EAGLE data-and-training job of a lent GPU, run DETACHED on the device so that it outlives the
# call that starts it (scripts/device_kit.sh ships the target, the wheels and .dev/job/prompts.jsonl.gz).
#
# Why it looks like this (docs/distillation.md, "The next lease"): the head's acceptance grows with
# the target's own answers it trains on (attempts 7, 8, 13, 16), and a 2-core CPU samples about
# 1.7 M answer tokens an hour. Session 15's H100 sampled 1.73 M tokens (prompt and answer) in
# 7 minutes with four processes of 160 prompts, each Python-bound at about 1 900 tokens/s and two
# stopped by the prefill's [B, T, V] logits. Since session 26 the sampler keeps token ids only, so
# a step's cost is mostly the per-step launches and one host read whatever the batch: batches of
# 512 should sample several times faster. Each sampler halves its batch after a failure (out of
# memory), twice at most, and goes on in a new shard directory until the sampling slot ends.
#
# A 15-minute lease (start-up and the carry calls included) leaves about 10 minutes for the job:
#   run carry=[.dev/p00]: mkdir -p /tmp/g && cp .dev/p00 /tmp/g/
#   run carry=[.dev/p01]: cp .dev/p01 /tmp/g/          (at once: an idle machine goes after 30 s)
#   run carry=[.dev/p02, .dev/whl, .dev/llm_init.py, .dev/setup.sh, .dev/specot-0.1.0.dist-info, .dev/job]:
#       bash .dev/setup.sh && mkdir -p /tmp/job && cp .dev/job/* /tmp/job/ && cd /tmp/repo && \
#       (setsid nohup bash scripts/gpu_train_job.sh > /tmp/job/job.log 2>&1 < /dev/null &) ; \
#       sleep 560; tail -n 3 /tmp/job/log/*.log
#   run: bash /tmp/repo/scripts/gpu_train_job.sh collect   (once /tmp/job/log/trained exists)
#        → $OUT/head.tgz (the head and logs) and samples.tgz.N (the answers' token ids, ≤ 15 MiB a
#        part); here: tar xzf head.tgz; cat samples.tgz.* | tar xz. Then evaluate the head on the
#        CPU (scripts/eval_q_temperature.py, bench speedup) before shipping it.
#
# Knobs (environment): SAMPLE_S (sampling slot, s), TRAIN_MIN (training slot, min), NPROC (samplers),
# BATCH (prompts per sampling batch), MAX_NEW (answer cap), STEPS (training steps at most), DEVICE, OUTDIR (the trained head),
# J (job folder: prompts*.jsonl.gz in, log/ out), S (sample shards), ENV_SH (sourced first), PY.
# The CPU smoke test: tests/lab/test_gpu_train_job.py (DEVICE=cpu, tiny slots).
set -u
source "${ENV_SH:-/tmp/env.sh}"
PY=${PY:-python3}
J=${J:-/tmp/job}; S=${S:-/tmp/samples}; OUTDIR=${OUTDIR:-/tmp/e19}; DEVICE=${DEVICE:-cuda}
NPROC=${NPROC:-2}; BATCH=${BATCH:-512}; SAMPLE_S=${SAMPLE_S:-240}; MAX_NEW=${MAX_NEW:-224}
mkdir -p "$J/log" "$S"

if [ "${1:-}" = collect ]; then  # the head + logs (small, first), then the samples in parts under 16 MiB
  OUT=${OUT:?collect writes to \$OUT}
  tar czf "$OUT/head.tgz" -C "$(dirname "$OUTDIR")" "$(basename "$OUTDIR")/ship" "$(basename "$OUTDIR")/log.jsonl" \
    -C "$J" log
  tar czf - -C "$(dirname "$S")" "$(basename "$S")" | split -b 15m -d -a 1 - "$OUT/samples.tgz."
  ls -l "$OUT"; exit 0
fi

# the prompts, dealt round-robin to the samplers
zcat "$J"/prompts*.jsonl.gz | split -n r/"$NPROC" -d -a 1 - "$J/pr"
end=$(( $(date +%s) + SAMPLE_S ))
for i in $(seq 0 $((NPROC - 1))); do
  (
    b=$BATCH; try=0
    while [ "$try" -lt 3 ] && [ "$b" -ge 1 ]; do  # the batch, then a half and a quarter of it
      left=$(( end - $(date +%s) ))
      [ "$left" -le 10 ] && break
      timeout "$left" $PY scripts/train_eagle.py --data "$S/s${i}_b${b}_t${try}" --out "$S/unused" \
        --prompts "$J/pr$i" --samples-per-prompt 1 --batch-size "$b" --max-new-tokens "$MAX_NEW" \
        --max-tokens 100000000 --dtype bfloat16 --sample-only --device "$DEVICE" --seed $((190 + 10 * i + try))
      rc=$?
      [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] && break  # done, or the slot ended
      echo "sampler $i: batch $b stopped with exit code $rc; going on with batch $((b / 2))"
      b=$((b / 2)); try=$((try + 1))
    done
  ) > "$J/log/sample$i.log" 2>&1 &
done
wait
date > "$J/log/sampled"
data=()
for d in "$S"/s*_b*_t*; do [ -e "$d/meta.json" ] && data+=(--data "$d"); done
# attempt 16's recipe (batches of 16 sequences of <= 512 tokens, lr 1.5e-4, bf16 autocast), from the shipped head
$PY scripts/train_eagle.py "${data[@]}" --skip-data --out "$OUTDIR" --steps "${STEPS:-100000}" --lr 1.5e-4 --max-len 512 \
  --dtype bfloat16 --autocast --seed 19 --init-head src/specot/data/eagle --device "$DEVICE" --train-batch-size 16 \
  --save-every 500 --time-budget-min "${TRAIN_MIN:-4.5}" > "$J/log/train.log" 2>&1
mkdir -p "$OUTDIR/ship" && cp "$OUTDIR"/head/* "$OUTDIR/ship/" && cp src/specot/data/eagle/config.json "$OUTDIR/ship/"
date > "$J/log/trained"
