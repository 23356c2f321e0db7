"""OpenCV side of `cargo bench -p motionvl-flow --bench dis_vs_opencv`.

Reads the synthetic pairs the Rust side wrote (safetensors: `frames_<motion>` u8 [2,H,W,3] RGB,
`flow_<motion>` f32 [2,H,W] exact forward flow), runs cv2.DISOpticalFlow presets on the same
grey images, and prints one JSON line: {preset: {motion: {"epe": .., "ms": ..}}}.
Optional: RAFT timing with torchvision (`--raft`), random weights, 12 iterations.
"""
import argparse
import json
import sys
import time

import cv2
import numpy as np
from safetensors.numpy import load_file


def median_ms(fn, runs):
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pairs")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="cv2/torch threads (0: library default)")
    ap.add_argument("--raft", action="store_true", help="also time torchvision raft_small/raft_large")
    ap.add_argument("--raft-runs", type=int, default=3)
    args = ap.parse_args()
    if args.threads > 0:
        cv2.setNumThreads(args.threads)
    data = load_file(args.pairs)
    motions = sorted(k[len("frames_"):] for k in data if k.startswith("frames_"))
    out = {"opencv": cv2.__version__, "threads": cv2.getNumThreads()}
    presets = {"fast": cv2.DISOPTICAL_FLOW_PRESET_FAST, "medium": cv2.DISOPTICAL_FLOW_PRESET_MEDIUM,
               "ultrafast": cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST}
    for name, preset in presets.items():
        dis = cv2.DISOpticalFlow_create(preset)
        res = {}
        for m in motions:
            frames = data[f"frames_{m}"]
            truth = data[f"flow_{m}"]
            g0 = cv2.cvtColor(frames[0], cv2.COLOR_RGB2GRAY)
            g1 = cv2.cvtColor(frames[1], cv2.COLOR_RGB2GRAY)
            flow = dis.calc(g0, g1, None)
            epe = float(np.mean(np.sqrt(((flow.transpose(2, 0, 1) - truth) ** 2).sum(0))))
            ms = median_ms(lambda: dis.calc(g0, g1, None), args.runs)
            res[m] = {"epe": epe, "ms": ms}
        out[f"opencv-dis-{name}"] = res
    if args.raft:
        import torch
        from torchvision.models.optical_flow import raft_large, raft_small
        if args.threads > 0:
            torch.set_num_threads(args.threads)
        torch.manual_seed(0)
        m = motions[0]
        frames = torch.from_numpy(data[f"frames_{m}"]).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        for name, ctor in (("raft_small", raft_small), ("raft_large", raft_large)):
            model = ctor(weights=None).eval()
            with torch.inference_mode():
                ms = median_ms(lambda: model(frames[:1], frames[1:], num_flow_updates=12), args.raft_runs)
            out[f"torchvision-{name}"] = {"ms": ms}
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
