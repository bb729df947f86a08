#!/bin/bash
# The EAGLE data-and-training job of a lent GPU (session 15, attempt 16), run DETACHED on the device
# so that it outlives the call that starts it (scripts/device_kit.sh ships the target and wheels):
#
#   run: bash .dev/setup.sh && cp -r .dev/job /tmp/job && cd /tmp/repo && \
#        SAMPLE_S=240 TRAIN_MIN=4 setsid nohup bash scripts/gpu_train_job.sh > /tmp/job/job.log 2>&1 < /dev/null &
#   run (at once, to keep the machine warm): sleep 500; tail /tmp/job/log/*.log
#   (Session 15 had 30 minutes and ran SAMPLE_S=420 TRAIN_MIN=9. A lease is now 15 minutes of device
#   time, start-up and the three carry calls included, so about 10 minutes remain for the job and its
#   collection: 4 of sampling, 4 of training. The samplers keep token ids only since session 26, so
#   the prefill holds no [B, T, V] logits and batches of 160 are far from the memory limit.)
#   run: once /tmp/job/log/trained exists: bash /tmp/repo/scripts/gpu_train_job.sh collect  (the head, logs and
#        samples into $OUT in parts under 16 MiB; here: cat job.tgz.* | tar xz). Session 15 left the
#        samples behind, so no CPU session could train on them again.
#
# .dev/job holds the prompts split in four (pr0..pr3, from scripts/build_eagle_prompts.py).
# Four sampling processes share the GPU: one is Python-bound at about 1 900 tokens/s. Then the head
# in src/specot/data/eagle is continued with attempt 13's recipe (batches of 16, lr 1.5e-4).
source /tmp/env.sh
J=/tmp/job; OUTDIR=${OUTDIR:-/tmp/e16}; mkdir -p $J/log
if [ "${1:-}" = collect ]; then  # in the last call: the head, the logs and the samples, in parts under 16 MiB
  cd /tmp && tar czf - "${OUTDIR#/tmp/}/ship" "${OUTDIR#/tmp/}/log.jsonl" job/log samples_* | split -b 15m -d -a 1 - "$OUT/job.tgz."
  ls -l "$OUT"; exit 0
fi
for i in 0 1 2 3; do
  timeout ${SAMPLE_S:-240} python3 scripts/train_eagle.py --data /tmp/samples_$i --out /tmp/sampler_$i --prompts $J/pr$i \
    --samples-per-prompt 1 --batch-size 160 --max-new-tokens 224 --max-tokens 3000000 --dtype bfloat16 \
    --sample-only --device cuda --seed 16$i > $J/log/sample$i.log 2>&1 &
done
wait
date > $J/log/sampled
python3 scripts/train_eagle.py --data /tmp/samples_0 --data /tmp/samples_1 --data /tmp/samples_2 --data /tmp/samples_3 \
  --skip-data --out $OUTDIR --steps 100000 --lr 1.5e-4 --max-len 512 --dtype bfloat16 --autocast --seed 16 \
  --init-head src/specot/data/eagle --device cuda --train-batch-size 16 --save-every 500 \
  --time-budget-min ${TRAIN_MIN:-4} > $J/log/train.log 2>&1
mkdir -p $OUTDIR/ship && cp $OUTDIR/head/* $OUTDIR/ship/ && cp src/specot/data/eagle/config.json $OUTDIR/ship/
date > $J/log/trained
