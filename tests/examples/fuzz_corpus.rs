//! Fills `fuzz/corpus/<target>/` with each cargo-fuzz target's seeds: the repository's own
//! files, or what its writers make where it ships none. The corpus is not committed; run
//! `cargo run -p motionvl-tests --example fuzz_corpus` (optionally with another folder) before
//! fuzzing.

use motionvl_tests::fuzz_readers::Target;

fn main() -> anyhow::Result<()> {
    let root = std::env::args().nth(1).map_or_else(|| motionvl_tests::repo_root().join("fuzz/corpus"), std::path::PathBuf::from);
    for target in Target::ALL {
        let dir = root.join(target.name());
        std::fs::create_dir_all(&dir)?;
        let seeds = target.seeds();
        for (file, bytes) in &seeds {
            std::fs::write(dir.join(file), bytes)?;
        }
        println!("{}: {} seeds in {}", target.name(), seeds.len(), dir.display());
    }
    Ok(())
}
