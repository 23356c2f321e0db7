"""transformers side of `cargo bench -p motionvl-models --bench cvaa_windows`.

    cvaa_windows.py CHECKPOINT WINDOWS BATCH

Builds transformers' Dinov2Model from a `train cvaa` checkpoint (`cvaa.json`'s `backbone`,
`model.safetensors`' `backbone.*` tensors under the hub names) and times the backbone on WINDOWS
random satellite windows in batches of BATCH, with torch's threads as many as RAYON_NUM_THREADS
(else all cores); every backbone tensor must load (the Candle side also runs the satellite head,
a projector and a residual MLP: a few thousandths of the backbone's work). Prints one JSON line.
"""
import json
import os
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import Dinov2Config, Dinov2Model

ckpt, windows, batch = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
threads = int(os.environ.get("RAYON_NUM_THREADS", os.cpu_count()))
torch.set_num_threads(threads)
cfg = json.loads((ckpt / "cvaa.json").read_text())
# Dinov2Config types mlp_ratio as an int; cvaa.json writes 4.0.
backbone = {k: int(v) if isinstance(v, float) and v.is_integer() and k == "mlp_ratio" else v for k, v in cfg["backbone"].items()}
model = Dinov2Model(Dinov2Config(**backbone)).eval()
renames = {".attention.attention.query.": ".attention.q_proj.", ".attention.attention.key.": ".attention.k_proj.",
           ".attention.attention.value.": ".attention.v_proj.", ".attention.output.dense.": ".attention.o_proj."}
state = {}
for name, tensor in load_file(ckpt / "model.safetensors").items():
    if not name.startswith("backbone."):
        continue
    name = name[len("backbone."):]
    for old, new in renames.items():
        name = name.replace(old, new)
    state[name] = tensor
missing, unexpected = model.load_state_dict(state, strict=False)
assert not [m for m in missing if m != "embeddings.mask_token"] and not unexpected, (missing, unexpected)
s = cfg["satellite_size"]
pixels = torch.randn(batch, 3, s, s)
with torch.no_grad():
    model(pixel_values=pixels)  # warm-up
    start = time.perf_counter()
    done = 0
    while done < windows:
        n = min(batch, windows - done)
        model(pixel_values=pixels[:n]).pooler_output.sum().item()
        done += n
    seconds = time.perf_counter() - start
print(json.dumps({"windows_per_s": round(windows / seconds, 1), "threads": threads}))
