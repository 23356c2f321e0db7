#!/usr/bin/env python
"""PyTorch side of the SFT-step benchmark (`cargo bench -p motionvl-train --bench sft_step`):
Qwen2.5-VL from a config file on random weights with PEFT LoRA (r32, alpha 64, dropout 0.05,
q/k/v/o/gate/up/down of the language model), AdamW, one micro-batch holding one video.

Defaults: the mid-size config of qwen25vl_midsize.py, f32, 2 CPU threads, a 16-frame 224x224
video (575 tokens), transformers' default SDPA attention (`ATTN=eager` for the eager path). With
`--device cuda --dtype bf16` (the `3b-gpu` profile): weights in bf16, adapters in f32 (PEFT's
default), forward under bf16 autocast.

Usage: sft_step_midsize.py [--config JSON] [--grid T,H,W] [--suffix N] [--device cpu|cuda]
                           [--dtype f32|bf16] [--checkpointing]
Prints one JSON line: median seconds per optimiser step (forward + backward + clipping + AdamW),
tokens/s, peak RSS and, on CUDA, PyTorch's peak allocated and reserved GPU memory."""
import argparse, json, os, pathlib, resource, time, torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
from peft import LoraConfig, get_peft_model

ap = argparse.ArgumentParser()
ap.add_argument("--config", default=str(pathlib.Path(__file__).resolve().parents[2] / "configs/models/midsize.json"))
ap.add_argument("--grid", default="8,16,16", help="video grid in patches (t,h,w)")
ap.add_argument("--suffix", type=int, default=40, help="text tokens after the video")
ap.add_argument("--device", default="cpu")
ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
ap.add_argument("--checkpointing", action="store_true")
ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
args = ap.parse_args()
cuda = args.device.startswith("cuda")
if not cuda:
    torch.set_num_threads(2)
torch.manual_seed(0)
cfg = Qwen2_5_VLConfig(**json.loads(pathlib.Path(args.config).read_text()))
cfg._attn_implementation = os.environ.get("ATTN", "sdpa")
m = Qwen2_5_VLForConditionalGeneration(cfg)
bf16 = args.dtype == "bf16"
if bf16:
    m = m.to(torch.bfloat16)
m = m.to(args.device)
lora = LoraConfig(r=32, lora_alpha=64, lora_dropout=0.05,
                  target_modules=r"^(?!.*visual).*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$")
m = get_peft_model(m, lora)
if args.checkpointing:
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.enable_input_require_grads()
m.train()
trainable = [p for p in m.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.01)
gt, gh, gw = (int(g) for g in args.grid.split(","))
npatch = gt * gh * gw; ntok = npatch // 4
pix = torch.randn(npatch, 3 * 2 * 14 * 14).to(args.device, torch.bfloat16 if bf16 else torch.float32)
ids = torch.tensor([[151644] + [100] * 20 + [151652] + [151656] * ntok + [151653] + [200] * args.suffix], device=args.device)
mm = (ids == 151656).long() * 2
labels = ids.clone(); labels[:, :-30] = -100
kw = dict(input_ids=ids, pixel_values_videos=pix, video_grid_thw=torch.tensor([[gt, gh, gw]], device=args.device),
          second_per_grid_ts=torch.tensor([1.0], device=args.device), mm_token_type_ids=mm, labels=labels)

before = [p.detach().clone() for p in trainable]

def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = m(**kw).loss
    loss.float().backward()
    # Timed only with its proof that it trained: every adapter got a gradient, the norm is not 0.
    missing = [i for i, p in enumerate(trainable) if p.grad is None]
    assert not missing, f"{len(missing)} of {len(trainable)} adapter tensors got no gradient"
    norm = torch.nn.utils.clip_grad_norm_(trainable, 1.0).item()
    assert norm > 0, "zero gradient norm"
    opt.step()
    if cuda:
        torch.cuda.synchronize()
    return norm

norms = [step()]; xs = []
for _ in range(args.steps):
    s = time.perf_counter(); norms.append(step()); xs.append(time.perf_counter() - s)
unchanged = sum(torch.equal(b, p.detach()) for b, p in zip(before, trainable))
assert unchanged == 0, f"{unchanged} of {len(trainable)} adapter tensors did not change"
median = sorted(xs)[len(xs) // 2]
out = {"checkpointing": args.checkpointing, "attention": m.config._attn_implementation, "threads": torch.get_num_threads(), "trainable_M": sum(p.numel() for p in trainable) / 1e6, "tokens": ids.shape[1], "grad_norms": [round(n, 4) for n in norms],
       "step_s": round(median, 3), "tokens_per_s": round(ids.shape[1] / median),
       "peak_rss_MiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
if cuda:
    out["torch_max_allocated_MiB"] = round(torch.cuda.max_memory_allocated() / 2**20)
    out["torch_max_reserved_MiB"] = round(torch.cuda.max_memory_reserved() / 2**20)
print(json.dumps(out))
