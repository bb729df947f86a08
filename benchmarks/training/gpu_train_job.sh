#!/bin/bash
# The EAGLE data-and-training job for a machine with an NVIDIA GPU: the target samples its own
# answers to a prompt set for SAMPLE_S seconds, then the shipped head trains on them for TRAIN_MIN
# minutes (docs/distillation.md, "Training an EAGLE head"). Start it detached, so that it outlives
# the shell that starts it, from a checkout with specot installed and the embedded target available:
#
#   mkdir -p /tmp/job && cp prompts*.jsonl.gz /tmp/job/      # JSONL lines {"prompt": ...}, gzipped
#   (setsid nohup bash benchmarks/training/gpu_train_job.sh > /tmp/job/job.log 2>&1 < /dev/null &)
#   tail -n 3 /tmp/job/log/*.log                            # progress; done once /tmp/job/log/trained exists
#   bash benchmarks/training/gpu_train_job.sh collect DIR   # DIR/head.tgz (the head and logs) and
#                                                           # DIR/samples.tgz.N (token ids, <= 15 MiB a part)
#
# Then evaluate the head on the CPU (benchmarks/eval_q_temperature.py, specot bench speedup
# --extra-drafts eagle:DIR) before shipping it. Why it looks like this: the head's acceptance grows
# with the volume of the target's own answers it trains on (docs/distillation.md, "Head variants"),
# and a 2-core CPU samples about 1.7 M answer tokens an hour, an H100 about that in 7 minutes. The
# sampler keeps token ids only, so a step's cost is mostly its kernel launches and one host read
# whatever the batch: batches of 512 sample several times faster than 160. Each sampler halves its
# batch after a failure (out of memory), twice at most, and goes on in a new shard directory until
# the sampling slot ends.
#
# Knobs (environment): SAMPLE_S (sampling slot, s), TRAIN_MIN (training slot, min), NPROC (samplers),
# BATCH (prompts per sampling batch), MAX_NEW (answer cap), STEPS (training steps at most), DEVICE, HEAD_DIR (the trained head),
# J (job folder: prompts*.jsonl.gz in, log/ out), S (sample shards), ENV_SH (a file sourced first: a virtual
# environment, PYTHONPATH, ...; without it the job runs from the repository root), PY.
# The CPU smoke test: tests/lab/test_gpu_train_job.py (DEVICE=cpu, tiny slots).
set -u
if [ -n "${ENV_SH:-}" ]; then source "$ENV_SH"; else cd "$(dirname "${BASH_SOURCE[0]}")/../.."; fi
PY=${PY:-python3}
J=${J:-/tmp/job}; S=${S:-/tmp/samples}; HEAD_DIR=${HEAD_DIR:-/tmp/head}; DEVICE=${DEVICE:-cuda}
NPROC=${NPROC:-2}; BATCH=${BATCH:-512}; SAMPLE_S=${SAMPLE_S:-240}; MAX_NEW=${MAX_NEW:-224}
mkdir -p "$J/log" "$S"

if [ "${1:-}" = collect ]; then  # the head + logs (small, first), then the samples in parts under 16 MiB
  DEST=${2:?usage: gpu_train_job.sh collect DIR}
  mkdir -p "$DEST"
  tar czf "$DEST/head.tgz" -C "$(dirname "$HEAD_DIR")" "$(basename "$HEAD_DIR")/ship" "$(basename "$HEAD_DIR")/log.jsonl" \
    -C "$J" log
  tar czf - -C "$(dirname "$S")" "$(basename "$S")" | split -b 15m -d -a 1 - "$DEST/samples.tgz."
  ls -l "$DEST"; exit 0
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
      timeout "$left" $PY benchmarks/training/train_eagle.py --data "$S/s${i}_b${b}_t${try}" --out "$S/unused" \
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
# the shipped head's recipe (batches of 16 sequences of <= 512 tokens, lr 1.5e-4, bf16 autocast), from the shipped head
$PY benchmarks/training/train_eagle.py "${data[@]}" --skip-data --out "$HEAD_DIR" --steps "${STEPS:-100000}" --lr 1.5e-4 --max-len 512 \
  --dtype bfloat16 --autocast --seed 19 --init-head src/specot/data/eagle --device "$DEVICE" --train-batch-size 16 \
  --save-every 500 --time-budget-min "${TRAIN_MIN:-4.5}" > "$J/log/train.log" 2>&1
mkdir -p "$HEAD_DIR/ship" && cp "$HEAD_DIR"/head/* "$HEAD_DIR/ship/" && cp src/specot/data/eagle/config.json "$HEAD_DIR/ship/"
date > "$J/log/trained"
