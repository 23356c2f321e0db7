//! Devices and dtypes as configs and flags spell them.

use candle_core::{DType, Device};

use crate::error::{ModelError, Result};

/// `cpu`, `cuda` or `cuda:N` (case and surrounding space ignored).
pub fn parse_device(name: &str) -> Result<Device> {
    let name = name.trim().to_ascii_lowercase();
    if name == "cpu" {
        return Ok(Device::Cpu);
    }
    let ordinal = match name.strip_prefix("cuda") {
        Some("") => 0,
        Some(rest) => rest
            .strip_prefix(':')
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| ModelError::Input(format!("device `{name}`: expected cpu, cuda or cuda:N")))?,
        None => return Err(ModelError::Input(format!("device `{name}`: expected cpu, cuda or cuda:N"))),
    };
    Device::new_cuda(ordinal).map_err(|e| ModelError::Input(format!("device cuda:{ordinal}: {e} (was motionvl built with --features cuda?)")))
}

/// `f32`, `bf16` or `f16` (or `float32`, `bfloat16`, `float16`); `None` picks f32 on the CPU
/// (Candle has no fast bf16 matmul there) and bf16 on a GPU.
pub fn parse_dtype(name: Option<&str>, device: &Device) -> Result<DType> {
    match name.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None => Ok(if device.is_cpu() { DType::F32 } else { DType::BF16 }),
        Some("f32" | "float32") => Ok(DType::F32),
        Some("bf16" | "bfloat16") => Ok(DType::BF16),
        Some("f16" | "float16") => Ok(DType::F16),
        Some(other) => Err(ModelError::Input(format!("dtype `{other}`: expected f32, bf16 or f16"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_and_errors() {
        assert!(parse_device(" CPU ").is_ok_and(|d| d.is_cpu()));
        let err = parse_device("tpu").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("tpu") && err.contains("cuda:N"), "{err}");
        assert_eq!(parse_dtype(Some("BFloat16"), &Device::Cpu).ok(), Some(DType::BF16));
        assert_eq!(parse_dtype(None, &Device::Cpu).ok(), Some(DType::F32));
        let err = parse_dtype(Some("f8"), &Device::Cpu).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("f8"), "{err}");
    }
}
