#!/usr/bin/env bash
# The GPU check, in one command on a machine with an NVIDIA GPU (CUDA ≥ 12 driver, a CUDA
# toolkit with nvcc, and a Python with torch + transformers + peft for the reference side):
#
#   tools/gpu_check.sh [OUT_DIR]          (default: gpu-check/)
#
# 1. every parity fixture on CUDA against the CPU results (tests/examples/gpu_check.rs);
# 2. one SFT step of a Qwen2.5-VL-3B-shaped model (random weights, the real 3B config, LoRA r32,
#    2,048 tokens holding a 16-frame video, bf16, gradient checkpointing): tokens/s and peak GPU
#    memory, beside transformers + PEFT on the same card in the same run (train/benches/sft_step.rs);
# 3. MOFNet frames/s on a 5-frame 448×448 window beside VideoFlow's official code, when
#    VIDEOFLOW names a checkout of XiaoyuShi97/VideoFlow (flow/examples/bench_mofnet.rs).
#
# The three runs take about 5 minutes on an H100/H200 after the build. Environment: PYTHON (the
# reference interpreter, default python3), VIDEOFLOW, CUDA_COMPUTE_CAP (default: from nvidia-smi),
# MOTIONVL_BIN (a folder holding prebuilt gpu_check, sft_step and bench_mofnet: skips cargo).
# Results: OUT_DIR/{parity,sft_step,mofnet}.txt and OUT_DIR/summary.md, for docs/BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-check}"
mkdir -p "$out"
export PYTHON="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

# The executable cargo built for one target (benches and examples live under hashed names).
built() {
  cargo build --release --locked --features cuda "$@" --message-format=json-render-diagnostics \
    | "$PYTHON" -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        exe = m["executable"]
print(exe)'
}
if [ -n "${MOTIONVL_BIN:-}" ]; then
  parity="$MOTIONVL_BIN/gpu_check" step="$MOTIONVL_BIN/sft_step" mofnet="$MOTIONVL_BIN/bench_mofnet"
else
  parity=$(built -p motionvl-tests --example gpu_check)
  step=$(built -p motionvl-train --bench sft_step)
  mofnet=$(built -p motionvl-flow --example bench_mofnet)
fi

status=0
echo "== parity on CUDA"
timeout 300 "$parity" 2>&1 | tee "$out/parity.txt" || status=1
echo "== SFT step, Qwen2.5-VL-3B shape, bf16, gradient checkpointing"
timeout 420 "$step" --profile 3b-gpu 2>&1 | tee "$out/sft_step.txt" || status=1
if [ -n "${VIDEOFLOW:-}" ]; then
  echo "== MOFNet, 448x448 window"
  timeout 300 "$mofnet" --device cuda --videoflow "$VIDEOFLOW" --runs 3 2>&1 | tee "$out/mofnet.txt" || status=1
else
  echo "MOFNet: skipped (set VIDEOFLOW to a checkout of XiaoyuShi97/VideoFlow)" | tee "$out/mofnet.txt"
fi

{
  echo "## GPU check ($(cut -d, -f1 "$out/gpu.txt"), $(date -u +%F))"
  echo
  echo "Parity: $(grep -E '^\{' "$out/parity.txt" | tail -n1)"
  echo
  echo '```'
  grep -E 'candle|pytorch' "$out/sft_step.txt" || true
  grep -E 'frames/s|speed-up' "$out/mofnet.txt" || true
  echo '```'
} > "$out/summary.md"
cat "$out/summary.md"
exit $status
