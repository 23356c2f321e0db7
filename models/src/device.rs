//! Devices and dtypes as configs and flags name them: typed, and written back as the same
//! strings.

use std::fmt;
use std::str::FromStr;

use candle_core::{DType, Device};

use crate::error::{ModelError, Result};

/// Where a model runs, as recipes and flags name it: `cpu`, `cuda` (the first GPU, or a
/// launched rank's own) or `cuda:N`; parsed ignoring case and surrounding space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceName {
    #[default]
    Cpu,
    /// `cuda` (no ordinal) or `cuda:N`.
    Cuda(Option<usize>),
}

impl DeviceName {
    pub fn is_cpu(self) -> bool {
        self == DeviceName::Cpu
    }

    /// The device itself (`cuda` is GPU 0); an error where this build or machine has no GPU.
    pub fn open(self) -> Result<Device> {
        match self {
            DeviceName::Cpu => Ok(Device::Cpu),
            DeviceName::Cuda(ordinal) => {
                let ordinal = ordinal.unwrap_or(0);
                Device::new_cuda(ordinal).map_err(|e| ModelError::NoDevice { device: format!("cuda:{ordinal}"), reason: e.to_string() })
            }
        }
    }
}

impl FromStr for DeviceName {
    type Err = ModelError;
    fn from_str(name: &str) -> Result<Self> {
        let name = name.trim().to_ascii_lowercase();
        let invalid = || ModelError::UnknownName { what: "device", name: name.clone(), expected: "cpu, cuda or cuda:N" };
        match name.as_str() {
            "cpu" => Ok(DeviceName::Cpu),
            "cuda" => Ok(DeviceName::Cuda(None)),
            _ => name.strip_prefix("cuda:").and_then(|n| n.parse().ok()).map(|n| DeviceName::Cuda(Some(n))).ok_or_else(invalid),
        }
    }
}

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceName::Cpu => f.write_str("cpu"),
            DeviceName::Cuda(None) => f.write_str("cuda"),
            DeviceName::Cuda(Some(n)) => write!(f, "cuda:{n}"),
        }
    }
}

/// A weight dtype as configs name it: `f32`, `bf16` or `f16` (or `float32`, `bfloat16`,
/// `float16`, as transformers spells them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DTypeName {
    #[default]
    F32,
    Bf16,
    F16,
}

impl DTypeName {
    pub fn dtype(self) -> DType {
        match self {
            DTypeName::F32 => DType::F32,
            DTypeName::Bf16 => DType::BF16,
            DTypeName::F16 => DType::F16,
        }
    }

    /// `name`, or where none is given f32 on the CPU (Candle has no fast bf16 matmul there)
    /// and bf16 on a GPU.
    pub fn or_default_for(name: Option<DTypeName>, device: &Device) -> DType {
        name.map_or(if device.is_cpu() { DType::F32 } else { DType::BF16 }, DTypeName::dtype)
    }
}

impl FromStr for DTypeName {
    type Err = ModelError;
    fn from_str(name: &str) -> Result<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(DTypeName::F32),
            "bf16" | "bfloat16" => Ok(DTypeName::Bf16),
            "f16" | "float16" => Ok(DTypeName::F16),
            other => Err(ModelError::UnknownName { what: "dtype", name: other.to_string(), expected: "f32, bf16 or f16" }),
        }
    }
}

impl fmt::Display for DTypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DTypeName::F32 => "f32",
            DTypeName::Bf16 => "bf16",
            DTypeName::F16 => "f16",
        })
    }
}

// Both names are written as their strings in recipes, configs and records.
motionvl_util::serde_as_string!(DeviceName, DTypeName);

/// `cpu`, `cuda` or `cuda:N` (case and surrounding space ignored), opened.
pub fn parse_device(name: &str) -> Result<Device> {
    name.parse::<DeviceName>()?.open()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_and_errors() {
        assert!(parse_device(" CPU ").is_ok_and(|d| d.is_cpu()));
        let err = parse_device("tpu").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("tpu") && err.contains("cuda:N"), "{err}");
        for (text, name) in [("cuda", DeviceName::Cuda(None)), (" Cuda:3", DeviceName::Cuda(Some(3))), ("cpu", DeviceName::Cpu)] {
            assert_eq!(text.parse::<DeviceName>().ok(), Some(name));
            assert_eq!(name.to_string().parse::<DeviceName>().ok(), Some(name), "{name} reads back");
        }
        assert!("cuda:x".parse::<DeviceName>().is_err());
        assert_eq!("BFloat16".parse::<DTypeName>().ok(), Some(DTypeName::Bf16));
        assert_eq!(DTypeName::or_default_for(None, &Device::Cpu), DType::F32);
        assert_eq!(DTypeName::or_default_for(Some(DTypeName::F16), &Device::Cpu), DType::F16);
        let err = "f8".parse::<DTypeName>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("f8"), "{err}");
        let json: Vec<DeviceName> = serde_json::from_str(r#"["cuda:1", "cpu"]"#).expect("reads");
        assert_eq!(serde_json::to_string(&json).expect("writes"), r#"["cuda:1","cpu"]"#);
    }
}
