#!/usr/bin/env python
"""Python side of the loader-throughput benchmark: qwen-vl-utils (decord backend) decodes and
samples the video with the SIS-Motion training plan (2 FPS, 8-32 frames, 128-512 x 28^2 pixels),
then transformers' Qwen2-VL video processor resizes, normalises and patchifies. Tokenisation is
left out (no tokenizer can be downloaded here; it costs well under a millisecond).
Usage: loader_throughput.py VIDEO RUNS. Prints one JSON line."""
import json, os, sys, time
os.environ.setdefault("FORCE_QWENVL_VIDEO_READER", "decord")
import torch
torch.set_num_threads(2)
from qwen_vl_utils import process_vision_info
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
video, runs = sys.argv[1], int(sys.argv[2])
proc = Qwen2VLVideoProcessor(min_pixels=128 * 28 * 28, max_pixels=512 * 28 * 28)
msg = [{"role": "user", "content": [{"type": "video", "video": video, "fps": 2.0, "min_frames": 8, "max_frames": 32,
        "min_pixels": 128 * 28 * 28, "max_pixels": 512 * 28 * 28}, {"type": "text", "text": "?"}]}]
def one():
    _, videos = process_vision_info(msg)
    out = proc(videos=videos, return_tensors="pt", do_sample_frames=False)
    return out["pixel_values_videos"].shape
one()
times = []
for _ in range(runs):
    s = time.perf_counter(); shape = one(); times.append(time.perf_counter() - s)
times.sort()
print(json.dumps({"seconds_per_sample": round(times[len(times) // 2], 3), "samples_per_s": round(1 / times[len(times) // 2], 2), "patches": list(shape)}))
