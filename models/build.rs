//! With the `cuda` feature, compiles the fused ops' kernels (`kernels/fused.cu`) to PTX with the
//! toolkit's nvcc; the crate embeds it (`src/fused/cuda.rs`) and the driver compiles it for the
//! card at first use. Without the feature there is nothing to build.

use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = "kernels/fused.cu";

fn main() {
    println!("cargo::rerun-if-changed={SOURCE}");
    println!("cargo::rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo::rerun-if-env-changed=CUDA_HOME");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("fused.ptx");
    let nvcc = std::env::var_os("CUDA_HOME").map_or_else(|| PathBuf::from("nvcc"), |home| PathBuf::from(home).join("bin").join("nvcc"));
    // PTX for a virtual architecture runs on that compute capability and every later one. The
    // default, 8.0, is the oldest card with the bf16 the rest of the CUDA path uses.
    let cap = std::env::var("CUDA_COMPUTE_CAP").ok().and_then(|c| c.trim().replace('.', "").parse::<u32>().ok()).unwrap_or(80);
    // No fused multiply-add: each product and sum rounds as the CPU kernels' do.
    let status = Command::new(&nvcc)
        .args(["--ptx", "-O3", "-std=c++17", "--fmad=false"])
        .arg(format!("--gpu-architecture=compute_{cap}"))
        .arg("-o")
        .arg(&out)
        .arg(SOURCE)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{} {SOURCE} failed ({s}): the fused CUDA kernels did not compile", nvcc.display()),
        Err(e) => panic!("{} could not be started ({e}): the `cuda` feature needs the CUDA compiler (set CUDA_HOME)", nvcc.display()),
    }
}
