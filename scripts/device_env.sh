# The common start of the prepared GPU scripts (scripts/gpu_session.sh, scripts/gpu_graphs.sh),
# sourced by them: the device's environment (or the repository root on a dry run), DEVICE, OUT, PY,
# and the GPU's name and memory in $OUT/gpu.txt.
set -uo pipefail
if [ -f /tmp/env.sh ]; then source /tmp/env.sh; else cd "$(dirname "$0")/.."; fi
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PY=${PY:-python3}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > "$OUT/gpu.txt" 2>&1 || true
