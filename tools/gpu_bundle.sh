#!/usr/bin/env bash
# The GPU check's binaries, built here (no GPU, no CUDA driver: the CUDA 13.0 compiler from PyPI
# and link-only stand-ins, tools/cuda/ci_toolkit.sh) to run on a GPU machine that has no Rust:
#
#   tools/gpu_bundle.sh [OUT_DIR]        (default: gpu-bundle/, which .gitignore keeps out)
#
# Builds gpu_check (parity, forward and backward), the sft_step bench, the MOFNet bench and
# `train` in release with `cuda,nccl`, strips them, and packs them into OUT_DIR/motionvl-gpu.tar.xz (PTX is
# text and packs tightly); fails when the folder exceeds 60 MiB, what a device run may carry
# beside the working tree. On the GPU machine:
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
cargo build --release --locked --features cuda,nccl -p motionvl-tests --example gpu_check
cargo build --release --locked --features cuda,nccl -p motionvl-train --bench sft_step
cargo build --release --locked --features cuda -p motionvl-flow --example bench_mofnet
cargo build --release --locked --features cuda,nccl -p motionvl-cli --bin train

# Benches live under hashed names: the newest sft_step executable is the one just built.
step=$(find "$CARGO_TARGET_DIR/release/deps" -maxdepth 1 -type f -executable -name 'sft_step-*' -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2)
[ -n "$step" ] || { echo "the sft_step bench was not built"; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin"
cp "$CARGO_TARGET_DIR/release/examples/gpu_check" "$CARGO_TARGET_DIR/release/examples/bench_mofnet" "$CARGO_TARGET_DIR/release/train" "$stage/bin/"
cp "$step" "$stage/bin/sft_step"
strip "$stage"/bin/*
for exe in "$stage"/bin/*; do
  readelf -d "$exe" | grep -q 'libcuda.so.1' || { echo "$(basename "$exe") is not linked against CUDA"; exit 1; }
done
mkdir -p "$out"
tar -C "$stage" -cJf "$out/motionvl-gpu.tar.xz" bin
du -b "$stage"/bin/* | awk '{ printf "  %-14s %6.1f MiB unpacked\n", $2, $1 / 1048576 }' | sed "s|$stage/bin/||"
size=$(du -sb "$out" | cut -f1)
awk -v s="$size" -v o="$out" -v l="$limit_mib" 'BEGIN { printf "bundle %s: %.1f MiB (limit %d MiB)\n", o, s / 1048576, l }'
[ "$size" -le $((limit_mib * 1048576)) ] || { echo "the bundle is over $limit_mib MiB"; exit 1; }
