"""The GPU data-and-training job (``benchmarks/training/gpu_train_job.sh``), run on the CPU with tiny
slots: GPU time is too dear to debug a shell script on, so its control flow is checked here —
prompts dealt to the samplers, a failed sampler retried with half its batch in a new shard folder,
the training on every shard folder, the head shipped, and ``collect`` packing the head and the
samples."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "training" / "gpu_train_job.sh"
TOOLS = ("bash", "zcat", "split", "timeout", "tar")


@pytest.mark.slow
@pytest.mark.real_model
@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason="needs " + ", ".join(TOOLS))
def test_job_samples_retries_with_half_the_batch_trains_ships_and_collects(tmp_path):
    job, out = tmp_path / "job", tmp_path / "out"
    job.mkdir()
    out.mkdir()
    prompts = [f"Name {k} fruits." for k in range(2, 8)] + ["Say hi.", "What is 2 + 2?"]
    with gzip.open(job / "prompts.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"prompt": p}) + "\n" for p in prompts)
    env_sh = tmp_path / "env.sh"
    env_sh.write_text(f"export PYTHONPATH={ROOT / 'src'} HF_HUB_OFFLINE=1\ncd {ROOT}\n")
    # a python that fails (as an out-of-memory sampler would) whenever it is asked for batches of 8
    fake = tmp_path / "py.sh"
    fake.write_text(f'#!/bin/bash\ncase " $* " in *" --batch-size 8 "*) echo "CUDA out of memory" >&2; exit 1;; esac\n'
                    f'exec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    # SAMPLE_S: a sampling slot no loaded machine runs out of (the samplers end when their prompts are
    # answered; a slot that ended before would leave no shards and fail the test for the wrong reason)
    env = dict(os.environ, ENV_SH=str(env_sh), PY=str(fake), J=str(job), S=str(tmp_path / "samples"),
               HEAD_DIR=str(tmp_path / "head"), DEVICE="cpu", NPROC="2", BATCH="8", SAMPLE_S="900", MAX_NEW="4",
               STEPS="2", TRAIN_MIN="1")
    run = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-2000:]
    logs = [(job / "log" / f"sample{i}.log").read_text() for i in (0, 1)]
    assert all("batch 8 stopped with exit code 1; going on with batch 4" in log for log in logs), logs
    shards = sorted(p.parent.name for p in (tmp_path / "samples").glob("*/shard_*.pt"))
    assert {s.split("_")[0] for s in shards} == {"s0", "s1"} and all("_b4_t1" in s for s in shards), shards
    assert "8 sequences" in (job / "log" / "train.log").read_text()  # every prompt answered once, all trained on
    ship = tmp_path / "head" / "ship"
    assert (ship / "config.json").exists() and (ship / "model.safetensors").exists()
    assert (job / "log" / "trained").exists()

    got = subprocess.run(["bash", str(SCRIPT), "collect", str(out)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr[-2000:]
    with tarfile.open(out / "head.tgz") as t:
        names = t.getnames()
    assert "head/ship/model.safetensors" in names and "log/train.log" in names
    parts = sorted(out.glob("samples.tgz.*"))
    assert parts and all(p.stat().st_size <= 15 * 2**20 for p in parts)
