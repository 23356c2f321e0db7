#!/usr/bin/env python3
"""tests/data/tiny-sft-frames: the tiny recipe's clips as PNG frame folders, for binaries built
without a usable FFmpeg (the GPU bundle's `train` on a machine without Debian 12's FFmpeg; see
tools/ffmpeg_stand_ins.py). The same rows, each `"video": "X.mp4"` now `"X"`: the folder `X/` of every
decoded frame.

Usage: tools/tiny_frames.py [SRC] [DST]   (needs opencv-python-headless)
"""
import json
import pathlib
import sys

import cv2

src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/tiny-sft")
dst = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "tests/data/tiny-sft-frames")
dst.mkdir(parents=True, exist_ok=True)
rows = [json.loads(line) for line in (src / "train.jsonl").read_text().splitlines() if line.strip()]
for row in rows:
    row["video"] = pathlib.Path(row["video"]).stem
(dst / "train.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
for video in sorted(src.glob("*.mp4")):
    folder = dst / video.stem
    folder.mkdir(exist_ok=True)
    capture = cv2.VideoCapture(str(video))
    count = 0
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        cv2.imwrite(str(folder / f"{count:05d}.png"), frame)  # BGR in, BGR out: RGB on disk
        count += 1
    if count == 0:
        sys.exit(f"{video}: no frame decoded")
    print(f"{folder}: {count} frames")
