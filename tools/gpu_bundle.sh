#!/usr/bin/env bash
# The GPU check's binaries, built here (no GPU, no CUDA driver: the CUDA 13.0 compiler from PyPI
# and link-only stand-ins, tools/cuda/ci_toolkit.sh) to run on a GPU machine that has no Rust:
#
#   tools/gpu_bundle.sh [OUT_DIR]        (default: gpu-bundle/, which .gitignore keeps out)
#
# Builds gpu_check (parity, forward and backward), the sft_step bench, the MOFNet bench and every
# command-line binary (`train` and `evaluate` among them) in release with `cuda,nccl`, strips the
# five the check runs, and packs them with stand-ins for FFmpeg (tools/ffmpeg_stand_ins.py) into
# OUT_DIR/motionvl-gpu.tar.xz; fails when the folder exceeds 60 MiB (a device run carries 64 MiB
# in all, the working tree included: tools/device_tree.sh). On the GPU machine:
#
#   tools/gpu_check.sh --bundle OUT_DIR RESULTS_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-bundle}"
limit_mib=60

# Its argument is the toolkit venv: pass it, or `source` hands it this script's own arguments.
source tools/cuda/ci_toolkit.sh "$PWD/.cuda-venv"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/cuda}"
nvcc --version | tail -n 1
# One invocation, one feature set: every crate (candle with `cuda` and `nccl`) is compiled once.
cargo build --release --locked \
  -p motionvl-tests --example gpu_check -p motionvl-train --bench sft_step \
  -p motionvl-flow --example bench_mofnet -p motionvl-cli --bins \
  --features motionvl-tests/nccl,motionvl-train/nccl,motionvl-flow/cuda,motionvl-cli/nccl

# Benches live under hashed names: the newest sft_step executable is the one just built.
step=$(find "$CARGO_TARGET_DIR/release/deps" -maxdepth 1 -type f -executable -name 'sft_step-*' -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2)
[ -n "$step" ] || { echo "the sft_step bench was not built"; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin"
cp "$CARGO_TARGET_DIR/release/examples/gpu_check" "$CARGO_TARGET_DIR/release/examples/bench_mofnet" "$CARGO_TARGET_DIR/release/train" \
  "$CARGO_TARGET_DIR/release/evaluate" "$stage/bin/"
cp "$step" "$stage/bin/sft_step"
strip "$stage"/bin/*
for exe in "$stage"/bin/*; do
  readelf -d "$exe" | grep -q 'libcuda.so.1' || { echo "$(basename "$exe") is not linked against CUDA"; exit 1; }
done
# `train` and `evaluate` name Debian 12's FFmpeg, which GPU images lack; the check reads frame folders.
python3 tools/ffmpeg_stand_ins.py "$stage/lib" "$stage"/bin/*
mkdir -p "$out"
# The binaries share tens of MiB (candle's PTX, the libraries): a window of 256 MiB spans all of
# them, so each repeat packs to almost nothing (28 MiB with xz's default 8 MiB window, 11 with this).
tar -C "$stage" -cf - bin lib | xz -T0 --lzma2=preset=6,dict=256MiB > "$out/motionvl-gpu.tar.xz"
du -b "$stage"/bin/* | awk '{ printf "  %-14s %6.1f MiB unpacked\n", $2, $1 / 1048576 }' | sed "s|$stage/bin/||"
size=$(du -sb "$out" | cut -f1)
awk -v s="$size" -v o="$out" -v l="$limit_mib" 'BEGIN { printf "bundle %s: %.1f MiB (limit %d MiB)\n", o, s / 1048576, l }'
[ "$size" -le $((limit_mib * 1048576)) ] || { echo "the bundle is over $limit_mib MiB"; exit 1; }
