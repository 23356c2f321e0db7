#!/usr/bin/env python
"""PyTorch side of the SFT-step benchmark: the mid-size Qwen2.5-VL of qwen25vl_midsize.py with
PEFT LoRA (r32, alpha 64, dropout 0.05, q/k/v/o/gate/up/down of the language model), AdamW,
f32, 2 threads. Usage: sft_step_midsize.py [--checkpointing]. Prints one JSON line: median seconds
per optimiser step (forward + backward + AdamW, one micro-batch) and peak RSS."""
import json, resource, sys, time, torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
from peft import LoraConfig, get_peft_model
torch.set_num_threads(2); torch.manual_seed(0)
ckpt = "--checkpointing" in sys.argv
cfg = Qwen2_5_VLConfig(
  vision_config=dict(depth=8, hidden_size=256, num_heads=4, intermediate_size=1024, patch_size=14, temporal_patch_size=2,
                     spatial_merge_size=2, window_size=112, fullatt_block_indexes=[3,7], out_hidden_size=512, tokens_per_second=2),
  text_config=dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2, intermediate_size=1408,
                   vocab_size=151936, rope_parameters={"rope_type":"default","rope_theta":1e6,"mrope_section":[8,12,12]}),
  image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653)
cfg._attn_implementation = "eager"
m = Qwen2_5_VLForConditionalGeneration(cfg)
lora = LoraConfig(r=32, lora_alpha=64, lora_dropout=0.05,
                  target_modules=r"^(?!.*visual).*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$")
m = get_peft_model(m, lora)
if ckpt:
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.enable_input_require_grads()
m.train()
opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-5, weight_decay=0.01)
T,H,W = 16,224,224
gt,gh,gw = T//2, H//14, W//14
npatch = gt*gh*gw; ntok = npatch//4
pix = torch.randn(npatch, 3*2*14*14)
ids = torch.tensor([[151644]+[100]*20+[151652]+[151656]*ntok+[151653]+[200]*40]); mm = (ids==151656).long()*2
labels = ids.clone(); labels[:, :-30] = -100
kw = dict(input_ids=ids, pixel_values_videos=pix, video_grid_thw=torch.tensor([[gt,gh,gw]]), second_per_grid_ts=torch.tensor([1.0]), mm_token_type_ids=mm, labels=labels)
def step():
    opt.zero_grad(set_to_none=True)
    m(**kw).loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in m.parameters() if p.requires_grad], 1.0)
    opt.step()
step(); xs=[]
for _ in range(3):
    s=time.perf_counter(); step(); xs.append(time.perf_counter()-s)
print(json.dumps({"checkpointing": ckpt, "trainable_M": sum(p.numel() for p in m.parameters() if p.requires_grad)/1e6,
  "step_s": round(sorted(xs)[1],3), "peak_rss_MiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024)}))
