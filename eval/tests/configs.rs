//! Every shipped run file (`configs/eval/*.toml`) parses, names a registered benchmark and
//! passes validation.

use std::path::Path;

use motionvl_eval::bench;
use motionvl_eval::config::{ProtocolConfig, RunConfig};

#[test]
fn shipped_run_files_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/eval");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("configs/eval exists") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let cfg = RunConfig::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
        cfg.validate().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        bench::find(&cfg.bench).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!cfg.model.checkpoint.is_empty(), "{} names a checkpoint", path.display());
        seen += 1;
    }
    assert!(seen >= 5, "one run file per benchmark");
    // The SIS-Bench file spells out the SPEC §2 protocol; it must equal the defaults.
    let sis = RunConfig::from_file(&dir.join("sisbench-3b.toml")).expect("sisbench-3b.toml");
    assert_eq!(sis.protocol, ProtocolConfig::default());
    assert_eq!(sis.generation.max_new_tokens, 128);
}
