"""The PyTorch side of `cargo run --release -p motionvl-flow --example bench_mofnet`.

Builds VideoFlow's MOFNet with the sintel config (full size, 13.4 M parameters) on seeded
random weights, saves them as safetensors for the Candle side, times one 5-frame window
(`--iters` updates) on the frames the Rust side wrote, saves the flows for the comparison and
prints one JSON line: {"ms": [...], "cpu_ms": [...], "threads": N, "torch": version} (wall
and process CPU time per run).

    python tools/bench/mofnet_torch.py --videoflow /tmp/videoflow --frames F.safetensors \
        --weights-out W.safetensors --flows-out O.safetensors --iters 12 --runs 2 --threads 2
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from mofnet import build, randomise  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--videoflow", required=True)
    ap.add_argument("--frames", required=True, help="safetensors with frames: u8 [5,H,W,3]")
    ap.add_argument("--weights-out", required=True)
    ap.add_argument("--flows-out", required=True)
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=9)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model, _ = build(args.videoflow, "full", args.iters)
    randomise(model, torch.Generator().manual_seed(args.seed))
    state = {f"module.{k}": t.contiguous() for k, t in model.state_dict().items() if "velocity_update_block" not in k and "pos_emb" not in k}
    save_file(state, args.weights_out)

    frames = load_file(args.frames)["frames"]
    images = frames.permute(0, 3, 1, 2).float()[None].to(args.device)
    model = model.to(args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    times, cpu = [], []
    with torch.inference_mode():
        out, _ = model(images, {})  # warm-up (allocator, oneDNN kernels)
        for _ in range(args.runs):
            t0, c0 = time.perf_counter(), time.process_time()
            out, _ = model(images, {})
            sync()
            times.append((time.perf_counter() - t0) * 1000.0)
            cpu.append((time.process_time() - c0) * 1000.0)
    save_file({"window": out[0].float().cpu().contiguous()}, args.flows_out)
    print(json.dumps({"ms": times, "cpu_ms": cpu, "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
