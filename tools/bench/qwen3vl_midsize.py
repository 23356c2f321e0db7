#!/usr/bin/env python
"""PyTorch side of the mid-size Qwen3-VL benchmark (`cargo bench -p motionvl-models --bench
qwen3vl_midsize`): the same config (configs/models/midsize-qwen3vl.json), prompt layout (a
timestamp and a vision block per temporal step), inputs and thread count as the Candle side,
random f32 weights, attention as users run it (transformers' default SDPA; `ATTN=eager` for the
eager path).

Usage: qwen3vl_midsize.py --mode prefill|train
Prints one JSON line: the mode's median seconds, peak RSS, and what ran it."""
import argparse, json, os, pathlib, resource, time
import torch
import transformers
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

ap = argparse.ArgumentParser()
ap.add_argument("--mode", required=True, choices=["prefill", "train"])
ap.add_argument("--threads", type=int, default=int(os.environ.get("RAYON_NUM_THREADS", "2")))
ap.add_argument("--runs", type=int, default=3)
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
attn = os.environ.get("ATTN", "sdpa")

def median(f, n=args.runs):
    f(); xs = []
    for _ in range(n):
        s = time.perf_counter(); f(); xs.append(time.perf_counter() - s)
    return sorted(xs)[len(xs) // 2]

cfg = Qwen3VLConfig(**json.loads((pathlib.Path(__file__).resolve().parents[2] / "configs/models/midsize-qwen3vl.json").read_text()))
cfg._attn_implementation = attn
m = Qwen3VLForConditionalGeneration(cfg).eval()
gt, gh, gw = 8, 16, 16
pix = torch.randn(gt * gh * gw, 3 * 2 * 16 * 16)
ids = [151644] + [100] * 20
for _ in range(gt):
    ids += [27, 15, 13, 17, 6] + [151652] + [151656] * (gh * gw // 4) + [151653]
ids = torch.tensor([ids + [200] * 40])
mm = (ids == 151656).long() * 2
labels = ids.clone(); labels[:, :-30] = -100
kw = dict(input_ids=ids, pixel_values_videos=pix, video_grid_thw=torch.tensor([[gt, gh, gw]]), mm_token_type_ids=mm)
out = {"mode": args.mode, "torch": torch.__version__, "transformers": transformers.__version__,
       "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
       "attention": m.config._attn_implementation, "tokens": ids.shape[1]}
if args.mode == "prefill":
    with torch.no_grad():
        out["seconds"] = round(median(lambda: m(**kw)), 3)
else:
    for p in m.model.visual.parameters():
        p.requires_grad_(False)
    def step():
        m.zero_grad(set_to_none=True)
        m(**kw, labels=labels).loss.backward()
    out["seconds"] = round(median(step), 3)
out["peak_rss_MiB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(out))
