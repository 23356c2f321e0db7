#!/usr/bin/env bash
# The GPU check, in one command on a machine with an NVIDIA GPU (CUDA >= 13.0 driver, and a Python
# with torch + transformers + peft for the reference side):
#
#   tools/gpu_check.sh [OUT_DIR]                  builds here (a CUDA toolkit with nvcc, and Rust)
#   tools/gpu_check.sh --bundle DIR [OUT_DIR]     runs tools/gpu_bundle.sh's binaries: no compiler
#   tools/gpu_check.sh --cpu [OUT_DIR]            the same sequence on the CPU build, against itself:
#                                                 a test of this script, not of a GPU
#
# 1. every parity fixture on the device against the CPU: forward (flows, vision features, logits,
#    loss, greedy tokens) and backward (the gradient of every LoRA and connector tensor, gradient
#    checkpointing off and on) (tests/examples/gpu_check.rs); the tiny recipe trained on the
#    device against the CPU step by step, its exact resume, and `evaluate run` of what it trained
#    on the device against the CPU (greedy answers and option likelihoods);
# 2. one SFT step of a Qwen2.5-VL-3B-shaped model (random weights, the real 3B config, LoRA r32,
#    2,048 tokens holding a 16-frame video, bf16, gradient checkpointing): tokens/s and peak GPU
#    memory, beside transformers + PEFT on the same card in the same run (train/benches/sft_step.rs;
#    the mid-size CPU profile under --cpu);
# 3. MOFNet frames/s on a 5-frame 448x448 window beside VideoFlow's official code, when
#    VIDEOFLOW names a checkout of XiaoyuShi97/VideoFlow (flow/examples/bench_mofnet.rs).
#
# The runs take about 5 minutes on an H100/H200. Environment: PYTHON (the reference
# interpreter, default python3), VIDEOFLOW, CUDA_COMPUTE_CAP (default: from nvidia-smi).
# Results: OUT_DIR/{parity,sft_step,mofnet}.txt and OUT_DIR/summary.md, for docs/BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=build bundle=""
case "${1:-}" in
  --bundle) mode=bundle bundle="${2:?--bundle needs the folder tools/gpu_bundle.sh wrote}"; shift 2 ;;
  --cpu) mode=cpu; shift ;;
esac
out="${1:-gpu-check}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHON="${PYTHON:-python3}"
# Fixtures, configs and reference scripts: this checkout's, wherever the binaries were built.
export MOTIONVL_REPO="$PWD"

# The five executables of the check, built by one cargo invocation: one feature resolution for the
# four packages, the one CI's release tests use, so nothing they built is compiled again (a build
# per package would resolve `motionvl-train` alone, without `csv`'s `serde_core/default`, and
# rebuild every crate above serde). Prints their paths: gpu_check, sft_step, bench_mofnet, train,
# evaluate.
built() {
  cargo build --release --locked -p motionvl-tests --example gpu_check -p motionvl-train --bench sft_step \
    -p motionvl-flow --example bench_mofnet -p motionvl-cli --bin train --bin evaluate "$@" --message-format=json-render-diagnostics \
    | "$PYTHON" -c 'import json, sys
exes = {}
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        exes[m["target"]["name"]] = m["executable"]
print(" ".join(exes[name] for name in ("gpu_check", "sft_step", "bench_mofnet", "train", "evaluate")))'
}
case "$mode" in
  bundle)
    bin=$(mktemp -d)
    trap 'rm -rf "$bin"' EXIT
    tar -C "$bin" -xJf "$bundle/motionvl-gpu.tar.xz"
    parity="$bin/bin/gpu_check" step="$bin/bin/sft_step" mofnet="$bin/bin/bench_mofnet" train="$bin/bin/train" evaluate="$bin/bin/evaluate"
    device=cuda:0 profile=3b-gpu flow_device=cuda
    # cuBLAS, cuRAND, the runtime and NCCL from the Python side's CUDA wheels (PyTorch's), the
    # driver from the system; FFmpeg's stand-ins from the bundle.
    cuda_libs=$("$PYTHON" - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("nvidia")
roots = spec.submodule_search_locations if spec else []
print(":".join(sorted({str(lib.parent) for root in roots for lib in pathlib.Path(root).rglob("lib*.so.*")})))
PY
)
    export LD_LIBRARY_PATH="$bin/lib${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    ;;
  build)
    exes=$(built --features motionvl-tests/cuda,motionvl-train/cuda,motionvl-flow/cuda,motionvl-cli/cuda)
    read -r parity step mofnet train evaluate <<< "$exes"
    device=cuda:0 profile=3b-gpu flow_device=cuda
    ;;
  cpu)
    exes=$(built)
    read -r parity step mofnet train evaluate <<< "$exes"
    device=cpu profile=midsize-cpu flow_device=cpu
    # What the bundle does: `train` runs with FFmpeg's stand-ins, so the check needs no FFmpeg.
    python3 tools/ffmpeg_stand_ins.py "$out/ffmpeg-stand-ins" "$train" "$evaluate"
    export LD_LIBRARY_PATH="$out/ffmpeg-stand-ins${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    ;;
esac
if [ "$mode" = cpu ]; then
  echo "CPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))" | tee "$out/gpu.txt"
else
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  for exe in "$parity" "$step" "$mofnet" "$train" "$evaluate"; do
    ldd "$exe" | grep -E 'not found' && { echo "$exe: libraries missing (LD_LIBRARY_PATH?)"; exit 1; }
  done
fi

status=0
echo "== parity on $device against the CPU"
timeout 300 "$parity" --device "$device" 2>&1 | tee "$out/parity.txt" || status=1
echo "== the tiny recipe trained on $device against the CPU, step by step, and its exact resume"
# LoRA dropout on (the recipe's 0.05): the CPU and CUDA draw the same masks, a hash of each
# element's index. One LR schedule of 4 steps, so that 2 steps and a resume to 4 are the 4 steps.
# The clips as frame folders: no FFmpeg.
tiny() {
  "$train" sft --config configs/sft/tiny.toml --data.train '"tests/data/tiny-sft-frames/train.jsonl"' --output-dir "$1" \
    --overwrite --logging.progress_bar false --logging.tensorboard false --checkpoint.every 2 \
    --optim.schedule_steps 4 --model.device "\"$2\"" "${@:3}"
}
{
  tiny "$out/tiny-cpu" cpu --optim.max_steps 4 &&
  tiny "$out/tiny-device" "$device" --optim.max_steps 4 &&
  tiny "$out/tiny-resumed" "$device" --optim.max_steps 2 &&
  "$train" sft --config "$out/tiny-resumed/config.toml" --resume auto --optim.max_steps 4 &&
  "$PYTHON" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
losses = lambda run: [json.loads(l)["loss"] for l in (out / run / "trainer_log.jsonl").read_text().splitlines()]
cpu, device, resumed = losses("tiny-cpu"), losses("tiny-device"), losses("tiny-resumed")
worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(cpu, device))
print(f"losses cpu {cpu}\nlosses device {device}\nresumed {resumed}\nworst relative loss difference {worst:.2e}")
assert len(cpu) == len(device) == 4 and worst <= 1e-3, "the device's steps are not the CPU's"
assert resumed == device, "a resumed run is not the uninterrupted one"
print("tiny training: ok")
PY
} 2>&1 | tee "$out/tiny_train.txt" || status=1
echo "== evaluate run on $device against the CPU, of what the device trained"
# The tiny recipe's questions as SIS-Bench rows over the same frame folders; f32 on both sides (the
# device's default is bf16). Greedy answers under the official protocol (no motion branch: the
# tiny recipe has none) and option likelihoods under the paper's.
frames="$PWD/tests/data/tiny-sft-frames"
evaluated() {
  "$evaluate" run --bench sisbench --checkpoint "$out/tiny-device/base-model" --adapter "$out/tiny-device" --no-motion \
    --manifest "$out/tiny-eval.jsonl" --media-root "$frames" --out "$1" --device "$2" --dtype f32 \
    --min-pixels 3136 --max-pixels 3136 --max-frames 4 --quiet "${@:3}" > /dev/null
}
{
  "$PYTHON" - "$frames/train.jsonl" "$out/tiny-eval.jsonl" <<'PY' &&
import json, sys
rows = []
for line in open(sys.argv[1]):
    row = json.loads(line)
    question, *options = row["conversations"][0]["value"].removeprefix("<video>\n").split("\n")[:-1]
    rows.append({"question_id": row["id"], "task_type": row["task"], "video_path": row["video"], "question": question,
                 "options": {o[0]: o[3:] for o in options}, "answer": row["conversations"][1]["value"][0]})
open(sys.argv[2], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
  evaluated "$out/eval-greedy-cpu" cpu --max-new-tokens 4 &&
  evaluated "$out/eval-greedy-device" "$device" --max-new-tokens 4 &&
  evaluated "$out/eval-likelihood-cpu" cpu --protocol paper --answer likelihood &&
  evaluated "$out/eval-likelihood-device" "$device" --protocol paper --answer likelihood &&
  "$PYTHON" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = lambda run: {r["question_id"]: r for r in map(json.loads, (out / run / "predictions.jsonl").read_text().splitlines())}
cpu, device = rows("eval-greedy-cpu"), rows("eval-greedy-device")
assert len(cpu) == 8 and cpu.keys() == device.keys(), "the runs answered different questions"
differ = [q for q in cpu if cpu[q]["output_ids"] != device[q]["output_ids"]]
print(f"greedy: {len(cpu) - len(differ)} of {len(cpu)} answers token for token the CPU's")
cpu, device = rows("eval-likelihood-cpu"), rows("eval-likelihood-device")
worst = max(abs(s - device[q]["option_scores"][o]) for q in cpu for o, s in cpu[q]["option_scores"].items())
print(f"likelihood: worst option score difference {worst:.2e}")
assert not differ, f"greedy answers differ from the CPU's: {differ}"
assert worst <= 1e-3, "the device's option likelihoods are not the CPU's"
print("evaluate run: ok")
PY
} 2>&1 | tee "$out/evaluate.txt" || status=1
# Two ranks as torchrun/srun start them (`cuda` is each rank's LOCAL_RANK GPU; on the CPU, two
# processes summing over TCP) against one rank with doubled accumulation: the same adapter
# (dropout off: this compares the gradient exchange alone).
ranks=2
[ "$mode" != cpu ] && ranks=$(nvidia-smi --list-gpus | wc -l)
if [ "$ranks" -ge 2 ]; then
  echo "== two ranks on $device against one with doubled accumulation"
  {
    port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    tiny "$out/ranks-1" "$device" --optim.max_steps 3 --optim.lr 1e-3 --optim.grad_accum 2 --lora.dropout 0 &&
    launched=() &&
    for rank in 0 1; do
      RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port MOTIONVL_RDZV_TOKEN="gpu-check-$port" \
        tiny "$out/ranks-2" "${device%%:*}" --optim.max_steps 3 --optim.lr 1e-3 --optim.grad_accum 1 --lora.dropout 0 &
      launched+=($!)
    done &&
    wait "${launched[0]}" && wait "${launched[1]}" &&
    "$PYTHON" - "$out/ranks-1/adapter_model.safetensors" "$out/ranks-2/adapter_model.safetensors" <<'PY'
import array, json, struct, sys
def tensors(path):  # safetensors, f32 only: the adapter's dtype
    data = open(path, "rb").read()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    header.pop("__metadata__", None)
    return {name: array.array("f", data[8 + size + t["data_offsets"][0]:8 + size + t["data_offsets"][1]]) for name, t in header.items()}
one, two = (tensors(p) for p in sys.argv[1:])
assert one.keys() == two.keys() and one, "the adapters hold different tensors"
# PEFT starts every lora_B at zero: a nonzero one shows the runs trained (equal is not untouched).
assert any(v != 0.0 for name in one if "lora_B" in name for v in one[name]), "lora_B is still zero: nothing trained"
worst = max(abs(a - b) for name in one for a, b in zip(one[name], two[name]))
print(f"adapters of 1 rank x grad_accum 2 and 2 ranks x 1: max |delta| {worst:.2e}")
assert worst <= 1e-5, "two ranks did not train what one rank does"
print("two ranks: ok")
PY
  } 2>&1 | tee "$out/ranks.txt" || status=1
else
  echo "two ranks: skipped (one GPU)" | tee "$out/ranks.txt"
fi
echo "== SFT step, profile $profile"
timeout 420 "$step" --profile "$profile" 2>&1 | tee "$out/sft_step.txt" || status=1
if [ -n "${VIDEOFLOW:-}" ]; then
  echo "== MOFNet, 448x448 window"
  timeout 300 "$mofnet" --device "$flow_device" --videoflow "$VIDEOFLOW" --runs 3 2>&1 | tee "$out/mofnet.txt" || status=1
else
  echo "MOFNet: skipped (set VIDEOFLOW to a checkout of XiaoyuShi97/VideoFlow)" | tee "$out/mofnet.txt"
fi

{
  echo "## GPU check ($(cut -d, -f1 "$out/gpu.txt"), $(date -u +%F))"
  echo
  echo "Parity: $(grep -E '^\{' "$out/parity.txt" | tail -n1)"
  echo
  echo "Tiny recipe on the device: $(grep -E '^worst|^tiny training' "$out/tiny_train.txt" | paste -sd' ')"
  echo
  echo "Evaluation on the device: $(grep -E '^greedy|^likelihood|^evaluate run' "$out/evaluate.txt" | paste -sd' ')"
  echo
  echo "Two ranks: $(grep -E '^adapters|^two ranks' "$out/ranks.txt" | paste -sd' ')"
  echo
  echo '```'
  grep -E 'candle|pytorch' "$out/sft_step.txt" || true
  grep -E 'frames/s|speed-up' "$out/mofnet.txt" || true
  echo '```'
} > "$out/summary.md"
cat "$out/summary.md"
exit $status
