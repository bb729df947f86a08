# The common start of the GPU scripts (benchmarks/gpu/checks.sh, benchmarks/gpu/graphs.sh), sourced
# by them: the repository root as working directory (or, with ENV_SH set, whatever that file sets
# up first: a virtual environment, PYTHONPATH, ...), DEVICE (default cuda), RESULTS (the folder of
# the results, default gpu-results), PY (default python3), and the GPU's name and memory in
# $RESULTS/gpu.txt.
set -uo pipefail
if [ -n "${ENV_SH:-}" ]; then source "$ENV_SH"; else cd "$(dirname "${BASH_SOURCE[0]}")/../.."; fi
DEVICE=${DEVICE:-cuda}
RESULTS=${RESULTS:-gpu-results}
mkdir -p "$RESULTS"
PY=${PY:-python3}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > "$RESULTS/gpu.txt" 2>&1 || true
