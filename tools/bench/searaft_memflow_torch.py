"""The PyTorch side of `cargo run --release -p motionvl-flow --example bench_searaft_memflow`.

Builds the official SEA-RAFT (S/M/L presets, full size) or MemFlow (MemFlowNet, sintel
config, full size) on seeded random weights — initialised as the parity fixtures are, so the
flows are a few pixels and comparable — saves the weights as safetensors for the Candle side,
times the official inference on the frames the Rust side wrote, saves the flows and prints one
JSON line: {"ms": [...], "unit": "pair"|"step", "threads": N, "torch": version}.

    python tools/bench/searaft_memflow_torch.py --model sea_raft_s --repo /tmp/SEA-RAFT \
        --frames F.safetensors --weights-out W.safetensors --flows-out O.safetensors --runs 3 --threads 2
    python tools/bench/searaft_memflow_torch.py --model memflow --repo /tmp/MemFlow ...

SEA-RAFT: `RAFT.forward(img1, img2, iters, test_mode=True)` on the first pair, one warm-up then
`--runs` timed calls (the model normalises and pads inside, so its whole cost is timed).
MemFlow: `inference.py`'s loop over the whole clip (`InputPadder`, `2·x/255 − 1`,
`InferenceCore.step` per pair); each step is timed, after one untimed step on the first pair.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))


def sea_raft(args, frames):
    import sea_raft as fx

    RAFT = fx.import_official(args.repo)
    gen = torch.Generator().manual_seed(args.seed)
    cfg = dict(fx.PRESET[args.model], **fx.FULL)
    model = RAFT(argparse.Namespace(**json.loads(json.dumps(cfg))))
    fx.reinit(model, gen)
    images = frames.permute(0, 3, 1, 2).float()
    fx.calibrate_batch_norms(model, images, cfg["iters"], gen)
    fx.damp(model, 0.03)
    model.eval()
    save_file({k: v.clone().contiguous() for k, v in model.state_dict().items()}, args.weights_out)
    ms = []
    with torch.inference_mode():
        for run in range(args.runs + 1):
            t = time.perf_counter()
            flow = model(images[0:1], images[1:2], iters=cfg["iters"], test_mode=True)["final"]
            if run > 0:
                ms.append((time.perf_counter() - t) * 1e3)
    save_file({"flows": flow.contiguous()}, args.flows_out)
    return ms, "pair"


def memflow(args, frames):
    import memflow as fx

    MemFlowNet, InferenceCore, InputPadder = fx.import_official(args.repo)
    gen = torch.Generator().manual_seed(args.seed)
    train_avg_length = (368 * 768 // 64) * 3 / 2
    model = MemFlowNet(fx.network_cfg(train_avg_length))
    fx.reinit(model, gen)
    images = frames.permute(0, 3, 1, 2).float()
    fx.calibrate_batch_norms(model, 2 * (images / 255.0) - 1.0, gen)
    fx.damp(model, 0.5)
    model.eval()
    save_file({k: v.clone().contiguous() for k, v in model.state_dict().items() if not k.startswith("att.pos_emb.")},
              args.weights_out)
    cfg = fx.Cfg(val_decoder_depth=args.iters or 15, train_avg_length=train_avg_length, mem_every=1, top_k=None,
                 enable_long_term=False, enable_long_term_count_usage=True, max_mid_term_frames=2, min_mid_term_frames=1)
    clip = images.unsqueeze(0)
    padder = InputPadder(clip.shape)
    clip = 2 * (padder.pad(clip) / 255.0) - 1.0
    with torch.inference_mode():
        InferenceCore(model, config=cfg).step(clip[:, 0:2], end=True)  # warm-up
        processor = InferenceCore(model, config=cfg)
        ms, flows = [], []
        for ti in range(clip.shape[1] - 1):
            t = time.perf_counter()
            _, flow_up = processor.step(clip[:, ti:ti + 2], end=(ti == clip.shape[1] - 2))
            ms.append((time.perf_counter() - t) * 1e3)
            flows.append(padder.unpad(flow_up[0]))
    save_file({"flows": torch.stack(flows).contiguous()}, args.flows_out)
    return ms, "step"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["sea_raft_s", "sea_raft_m", "sea_raft_l", "memflow"], required=True)
    ap.add_argument("--repo", required=True, help="checkout of princeton-vl/SEA-RAFT or DQiaole/MemFlow")
    ap.add_argument("--frames", required=True, help="safetensors with frames: u8 [N,H,W,3]")
    ap.add_argument("--weights-out", required=True)
    ap.add_argument("--flows-out", required=True)
    ap.add_argument("--iters", type=int, help="MemFlow's val_decoder_depth (default 15)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    frames = load_file(args.frames)["frames"]
    ms, unit = memflow(args, frames) if args.model == "memflow" else sea_raft(args, frames)
    print(json.dumps({"ms": ms, "unit": unit, "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
