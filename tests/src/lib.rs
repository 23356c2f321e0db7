//! Shared helpers for the cross-crate tests: fixture discovery and tensor comparison.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};

/// `tests/fixtures/<family>`.
pub fn fixture_root(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(family)
}

/// Every reference dump of a family, so adding a dump needs no code.
pub fn fixture_dirs(family: &str) -> Vec<PathBuf> {
    let root = fixture_root(family);
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", root.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no fixtures under {}", root.display());
    dirs
}

pub struct Tensors {
    path: PathBuf,
    map: HashMap<String, Tensor>,
}

impl Tensors {
    pub fn load(path: &Path) -> Result<Self> {
        let map = candle_core::safetensors::load(path, &Device::Cpu).with_context(|| format!("reading {}", path.display()))?;
        Ok(Self { path: path.to_path_buf(), map })
    }

    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.map.get(name).with_context(|| format!("{} has no tensor `{name}`", self.path.display()))
    }

    pub fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.map.keys()
    }

    pub fn i64_rows(&self, name: &str) -> Result<Vec<Vec<i64>>> {
        Ok(self.get(name)?.to_dtype(DType::I64)?.to_vec2()?)
    }

    pub fn i64_flat(&self, name: &str) -> Result<Vec<i64>> {
        Ok(self.get(name)?.to_dtype(DType::I64)?.flatten_all()?.to_vec1()?)
    }
}

/// Largest absolute difference between two tensors of the same shape.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    anyhow::ensure!(a.dims() == b.dims(), "shapes differ: {:?} vs {:?}", a.dims(), b.dims());
    let d = (a.to_dtype(DType::F32)? - b.to_dtype(DType::F32)?)?.abs()?.flatten_all()?.max(0)?;
    Ok(d.to_scalar::<f32>()?)
}

/// Max absolute difference relative to the reference's largest magnitude.
pub fn max_rel_diff(actual: &Tensor, reference: &Tensor) -> Result<f32> {
    let scale = reference.to_dtype(DType::F32)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
    Ok(max_abs_diff(actual, reference)? / scale.max(1e-12))
}

pub fn assert_close(what: &str, actual: &Tensor, reference: &Tensor, tolerance: f32) {
    let diff = max_abs_diff(actual, reference).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(diff <= tolerance, "{what}: max abs diff {diff:e} > {tolerance:e}");
}
