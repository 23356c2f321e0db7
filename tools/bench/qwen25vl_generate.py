#!/usr/bin/env python
"""PyTorch side of the generation benchmark (`cargo bench -p motionvl-models --bench
qwen25vl_generate`): transformers' `generate` on the mid-size Qwen2.5-VL (random f32 weights,
SDPA attention unless ATTN=eager), greedy, a left-padded batch of SIS-Bench-shaped prompts (a
16-frame 224x224 video, then a multiple-choice question of 40 + 6*row tokens), every row forced
to the same number of new tokens (min_new_tokens = max_new_tokens).

Usage: qwen25vl_generate.py [--rows 4] [--new-tokens 32] [--threads 2]
Prints one JSON line: median seconds of a whole generate call with --new-tokens and with one new
token (prefill), new tokens/s, peak RSS."""
import argparse, json, os, pathlib, resource, time
import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

ap = argparse.ArgumentParser()
ap.add_argument("--rows", type=int, default=4)
ap.add_argument("--new-tokens", type=int, default=32)
ap.add_argument("--threads", type=int, default=int(os.environ.get("RAYON_NUM_THREADS", "2")))
ap.add_argument("--runs", type=int, default=3)
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
cfg = Qwen2_5_VLConfig(**json.loads((pathlib.Path(__file__).resolve().parents[2] / "configs/models/midsize.json").read_text()))
cfg._attn_implementation = os.environ.get("ATTN", "sdpa")
m = Qwen2_5_VLForConditionalGeneration(cfg).eval()
gt, gh, gw = 8, 16, 16
ntok = gt * gh * gw // 4
pad = 151643
rows = [[151644] + [100] * 20 + [151652] + [151656] * ntok + [151653] + [200 + r] * (40 + 6 * r) for r in range(args.rows)]
width = max(len(r) for r in rows)
ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
kw = dict(input_ids=ids, attention_mask=attention_mask, mm_token_type_ids=(ids == 151656).long() * 2,
          pixel_values_videos=torch.randn(args.rows * gt * gh * gw, 3 * 2 * 14 * 14),
          video_grid_thw=torch.tensor([[gt, gh, gw]] * args.rows), second_per_grid_ts=torch.tensor([1.0] * args.rows))

def median(new):
    run = lambda: m.generate(**kw, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=pad)
    out = run(); xs = []
    assert out.shape[1] == width + new, out.shape
    for _ in range(args.runs):
        s = time.perf_counter(); run(); xs.append(time.perf_counter() - s)
    return sorted(xs)[len(xs) // 2]

with torch.no_grad():
    full, prefill = median(args.new_tokens), median(1)
print(json.dumps({"rows": args.rows, "new_tokens": args.new_tokens, "prompt_tokens": width, "attention": m.config._attn_implementation,
                  "generate_s": round(full, 3), "prefill_s": round(prefill, 3),
                  "tokens_per_s": round(args.rows * args.new_tokens / full, 2),
                  "decode_tokens_per_s": round(args.rows * (args.new_tokens - 1) / (full - prefill), 2),
                  "peak_rss_MiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
