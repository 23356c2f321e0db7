#!/usr/bin/env python3
"""Link-only stand-ins for the CUDA libraries that cudarc's `dynamic-linking` names on the link line.

A CPU-only machine (CI) has the CUDA compiler from PyPI but no driver, cuBLAS, cuRAND, NVRTC or
NCCL, so `cargo build --features cuda` compiles and then fails to link (`-lcuda`, `-lcublas`, …).
Each stand-in defines every function cudarc's bindings declare for that library, as an empty
symbol, and carries the real library's soname: the binaries record `NEEDED libcublas.so.13` etc.
and load the real libraries on a GPU machine. Never put these on a GPU machine's library path.

Usage: link_stubs.py OUT_DIR   (run inside the workspace; finds cudarc through `cargo metadata`)
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

# cudarc module → library name on the link line → the real library's soname (CUDA 13).
LIBRARIES = [
    ("driver", "cuda", "libcuda.so.1"),
    ("nvrtc", "nvrtc", "libnvrtc.so.13"),
    ("curand", "curand", "libcurand.so.10"),
    ("cublas", "cublas", "libcublas.so.13"),
    ("cublaslt", "cublasLt", "libcublasLt.so.13"),
    ("nccl", "nccl", "libnccl.so.2"),
    ("cudnn", "cudnn", "libcudnn.so.9"),
]
FUNCTION = re.compile(r"^pub unsafe fn (\w+)\(", re.MULTILINE)


def cudarc_dir() -> pathlib.Path:
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--features", "motionvl-models/nccl,motionvl-models/cudnn"],
        check=True, capture_output=True, text=True).stdout)
    found = [p["manifest_path"] for p in meta["packages"] if p["name"] == "cudarc"]
    if not found:
        sys.exit("link_stubs: cudarc is not in Cargo.lock (is candle's `cuda` feature used?)")
    return pathlib.Path(found[0]).parent


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    src = cudarc_dir() / "src"
    with tempfile.TemporaryDirectory() as tmp:
        for module, lib, soname in LIBRARIES:
            names = sorted(set(FUNCTION.findall((src / module / "sys" / "mod.rs").read_text())))
            if not names:
                sys.exit(f"link_stubs: no functions found in cudarc's {module} bindings")
            c = pathlib.Path(tmp) / f"{lib}.c"
            c.write_text("".join(f"void {n}(void) {{}}\n" for n in names))
            subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out / f"lib{lib}.so"),
                            f"-Wl,-soname,{soname}", str(c)], check=True)
            print(f"lib{lib}.so ({soname}): {len(names)} symbols")


if __name__ == "__main__":
    main()
