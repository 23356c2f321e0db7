//! Cross-crate tests of motionvl and the reference dumps they read: [`fixtures`] finds, loads and
//! compares dumps of every family; [`qwen_dump`] and [`flow_dump`] read the dumps of a family into
//! the types its tests use; [`gradients`] runs one backward pass of a dump on any device;
//! [`fuzz_readers`] runs each reader of user files on given bytes, for `tests/fuzz.rs` and `fuzz/`.

pub mod fixture_json;
pub mod fixtures;
pub mod flow_dump;
pub mod fuzz_readers;
pub mod gradients;
pub mod qwen_dump;

/// The repository's root, where `configs/` and `tests/data/` are.
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}
