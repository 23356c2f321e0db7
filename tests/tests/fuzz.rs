//! Bounded fuzzing of everything that parses user files: the training-row and benchmark
//! manifest readers, the predictions reader, inline option splitting and answer extraction,
//! and the binary and configuration readers — point clouds (PLY, NPY, XYZ), DCCS instances and
//! trajectories, Parquet, TOML recipes and evaluation configs, model configs, tokenizers,
//! safetensors headers, PyTorch `.pth`/`.pt` pickles, flow-cache entries and videos.
//! Inputs are the repository's own files (or files its writers make), mutated by a seeded
//! generator (byte flips, insertions, deletions, truncations, spliced chunks, significant
//! bytes). The oracles: every reader returns `Ok` or a typed error — never a panic; no single
//! allocation above [`ALLOCATION_CAP`] (the test process aborts, naming the size, where a
//! header-driven size would have been trusted); every case within [`CASE_TIME`]; the mutants
//! reach the readers' checks (some are refused, some still read); and where a writer exists,
//! what it writes reads back equal. CI runs the default bound; set `MOTIONVL_FUZZ_ITERS` for a
//! longer pass (the seed of a failing case is printed). The readers and their oracles are
//! `motionvl_tests::fuzz_readers`, which the cargo-fuzz targets of `fuzz/` run too.

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::{Duration, Instant};

use motionvl_data::rng::SynthRng;
use motionvl_tests::fuzz_readers::{self as readers, Lab, Target, Verdict};
use motionvl_tests::repo_root;

/// The largest single allocation a reader may make of a mutated file: every seed is under
/// 1 MB, so only a size taken from a header on trust comes near it.
const ALLOCATION_CAP: usize = 1 << 30;

/// The longest one reader may take over one mutant (debug build, loaded CI machine): a
/// quadratic or header-driven loop takes far longer.
const CASE_TIME: Duration = Duration::from_secs(20);

/// The system allocator, refusing allocations over [`ALLOCATION_CAP`] (Rust then aborts with
/// "memory allocation of N bytes failed").
struct Capped;

// SAFETY: every call is forwarded to the system allocator unchanged, or refused with null.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOCATION_CAP { std::ptr::null_mut() } else { unsafe { System.alloc(layout) } }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOCATION_CAP { std::ptr::null_mut() } else { unsafe { System.alloc_zeroed(layout) } }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOCATION_CAP { std::ptr::null_mut() } else { unsafe { System.realloc(ptr, layout, new_size) } }
    }
}

#[global_allocator]
static ALLOCATOR: Capped = Capped;

fn iterations() -> u64 {
    std::env::var("MOTIONVL_FUZZ_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(300)
}

/// Uniform in `0..n` (0 for an empty range).
fn below(rng: &mut SynthRng, n: usize) -> usize {
    rng.index(n.max(1))
}

const SPECIAL: &[u8] = b"{}[]\":,\n\\ 0-.eE\xff\xc3\xa9AB()";

fn mutate(seed: &[u8], rng: &mut SynthRng) -> Vec<u8> {
    let mut out = seed.to_vec();
    for _ in 0..1 + below(rng, 8) {
        let at = below(rng, out.len() + 1);
        match below(rng, 6) {
            0 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] ^= 1 << below(rng, 8);
            }
            1 => out.insert(at, SPECIAL[below(rng, SPECIAL.len())]),
            2 if at < out.len() => {
                let end = (at + 1 + below(rng, 16)).min(out.len());
                out.drain(at..end);
            }
            3 => out.truncate(at),
            4 if !out.is_empty() => {
                let from = below(rng, out.len());
                let chunk: Vec<u8> = out[from..(from + 1 + below(rng, 64)).min(out.len())].to_vec();
                out.splice(at..at, chunk);
            }
            _ => {
                let i = at.min(out.len().saturating_sub(1));
                if let Some(b) = out.get_mut(i) {
                    *b = SPECIAL[below(rng, SPECIAL.len())];
                }
            }
        }
    }
    out
}

/// Whether `mutant` refused more than `seed` did: a typed error, or more rows left out.
fn refused_more(seed: &Verdict, mutant: &Verdict) -> bool {
    match (seed, mutant) {
        (Ok(_), Err(_)) => true,
        (Ok(seed), Ok(mutant)) => mutant.skipped > seed.skipped,
        (Err(_), _) => false,
    }
}

/// Runs `target`'s readers on `iterations()` mutants of each row file it is seeded with; a
/// panic fails the test with the seed that reproduces it. So that passing proves the mutants
/// reached the readers' checks: wherever a reader accepts a seed, some of its mutants must be
/// refused with a typed error, and where it reads rows from the seed, some mutants must still
/// be read; and some reader must read some seed.
fn fuzz_files(target: Target) {
    let name = target.name();
    let lab = Lab::temporary();
    let mut seeds_read = 0;
    for (s, seed_file) in readers::row_seed_files().iter().enumerate() {
        let seed = std::fs::read(seed_file).expect("seed");
        // Media resolve against the seed's folder, so media checks run too.
        let media_root = seed_file.parent().unwrap_or(Path::new("."));
        let unmutated = readers::run(&lab, target, &seed, media_root);
        let (mut refused, mut read) = (vec![0; unmutated.len()], vec![0; unmutated.len()]);
        for i in 0..iterations() {
            let case_seed = (s as u64) << 32 | i;
            let bytes = mutate(&seed, &mut SynthRng::new(case_seed));
            let Ok(outcomes) = catch_unwind(AssertUnwindSafe(|| readers::run(&lab, target, &bytes, media_root))) else {
                let kept = std::env::temp_dir().join(format!("motionvl-fuzz-crash-{name}-{s}.json"));
                let _ = std::fs::write(&kept, &bytes);
                panic!("{name} panicked on a mutant of {} (case seed {case_seed}; bytes saved in {})", seed_file.display(), kept.display());
            };
            for (r, (seed_outcome, mutant)) in unmutated.iter().zip(&outcomes).enumerate() {
                refused[r] += usize::from(refused_more(seed_outcome, mutant));
                read[r] += usize::from(matches!(mutant, Ok(items) if items.read > 0));
            }
        }
        for (r, seed_outcome) in unmutated.iter().enumerate() {
            let what = format!("{name} (reader {r}) on {}", seed_file.display());
            if seed_outcome.is_ok() {
                assert!(refused[r] > 0, "{what}: no mutant was refused: the mutants do not reach the reader's checks");
            }
            if matches!(seed_outcome, Ok(items) if items.read > 0) {
                seeds_read += 1;
                assert!(read[r] > 0, "{what}: the seed reads, none of its mutants did");
            }
        }
    }
    assert!(seeds_read > 0, "{name}: no reader read any seed file");
}

#[test]
fn training_row_readers_never_panic() {
    fuzz_files(Target::TrainingRows);
}

#[test]
fn benchmark_manifest_readers_never_panic() {
    fuzz_files(Target::BenchmarkManifests);
}

#[test]
fn the_predictions_reader_never_panics() {
    fuzz_files(Target::Predictions);
}

#[test]
fn option_splitting_and_answer_extraction_never_panic() {
    for (s, (_, seed)) in Target::AnswerExtraction.seeds().iter().enumerate() {
        for i in 0..iterations() * 4 {
            let case_seed = (s as u64) << 32 | i;
            let bytes = mutate(seed, &mut SynthRng::new(case_seed));
            let outcome = catch_unwind(AssertUnwindSafe(|| readers::answer_extraction(&bytes)));
            assert!(outcome.is_ok(), "answer extraction panicked on {:?} (case seed {case_seed})", String::from_utf8_lossy(&bytes));
        }
    }
}

/// How much of a format survives mutation.
#[derive(Clone, Copy, PartialEq)]
enum Format {
    /// Some mutants still read (text, headers with slack).
    Tolerant,
    /// Checksummed or compressed (zip, cache entries): any change may be refused.
    Checked,
}

/// Runs `target`'s reader on `iterations()` mutants of each of its seeds. A panic (a reader's,
/// or a round trip's that does not hold) or a case over [`CASE_TIME`] fails with the seed that
/// reproduces it; the seeds must read, and some mutants of each be refused (and, for a
/// [`Format::Tolerant`] one, some still read), so that passing proves the mutants reached the
/// reader's checks.
fn fuzz_bytes(target: Target, format: Format) {
    let name = target.name();
    let lab = Lab::temporary();
    let media_root = repo_root();
    let read = |bytes: &[u8]| readers::run(&lab, target, bytes, &media_root).remove(0);
    for (s, (file, seed)) in target.seeds().iter().enumerate() {
        if let Err(e) = read(seed) {
            panic!("{name}: the seed {file} does not read: {e}");
        }
        let (mut refused, mut read_ok) = (0, 0);
        for i in 0..iterations() {
            let case_seed = (s as u64) << 32 | i;
            let bytes = mutate(seed, &mut SynthRng::new(case_seed));
            let start = Instant::now();
            let Ok(outcome) = catch_unwind(AssertUnwindSafe(|| read(&bytes))) else {
                let kept = std::env::temp_dir().join(format!("motionvl-fuzz-crash-{name}-{file}"));
                let _ = std::fs::write(&kept, &bytes);
                panic!("{name} panicked on a mutant of {file} (case seed {case_seed}; bytes saved in {})", kept.display());
            };
            assert!(start.elapsed() < CASE_TIME, "{name} took {:?} on a mutant of {file} (case seed {case_seed})", start.elapsed());
            match outcome {
                Ok(_) => read_ok += 1,
                Err(_) => refused += 1,
            }
        }
        assert!(refused > 0, "{name}: no mutant of {file} was refused: the mutants do not reach the reader's checks");
        assert!(read_ok > 0 || format == Format::Checked, "{name}: no mutant of {file} still read");
    }
}

/// PLY (binary and ASCII, as written), NPY and XYZ clouds; a written cloud reads back equal.
#[test]
fn point_cloud_readers_never_panic_or_trust_counts() {
    use motionvl_construct::dccs::cloud::read_cloud;
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, seed) in Target::PlyCloud.seeds() {
        let path = dir.path().join(&file);
        std::fs::write(&path, &seed).expect("seed");
        let read = read_cloud(&path).expect("reads back");
        assert_eq!(read.points.len(), readers::seed_points().len(), "{file} round trip");
        let worst = read
            .points
            .iter()
            .zip(readers::seed_points())
            .map(|(a, b)| (a.x - b.x).abs().max((a.y - b.y).abs()).max((a.z - b.z).abs()))
            .fold(0.0, f64::max);
        assert!(worst < 1e-5, "{file}: a written point moved by {worst}");
    }
    for target in [Target::PlyCloud, Target::NpyCloud, Target::XyzCloud] {
        fuzz_bytes(target, Format::Tolerant);
    }
}

/// `valid_instances.json` and trajectories, seeded by their writers (which read back equal).
#[test]
fn dccs_instance_and_trajectory_readers_never_panic() {
    use motionvl_construct::dccs::instances::read_instances;
    use motionvl_construct::dccs::trajectory::Trajectory;
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, seed) in Target::DccsInstances.seeds() {
        let path = dir.path().join(file);
        std::fs::write(&path, seed).expect("seed");
        assert_eq!(read_instances(&path).expect("reads back"), readers::seed_landmarks(), "instances round trip");
    }
    fuzz_bytes(Target::DccsInstances, Format::Tolerant);
    for (_, seed) in Target::DccsTrajectory.seeds() {
        let parsed = Trajectory::from_json(&serde_json::from_slice(&seed).expect("json")).expect("trajectory");
        assert_eq!(Trajectory::from_json(&parsed.to_json()).expect("again").frames.len(), 12, "trajectory round trip");
    }
    fuzz_bytes(Target::DccsTrajectory, Format::Tolerant);
}

/// UrbanVideo-Bench's `MCQ.parquet` as shipped.
#[test]
fn the_parquet_reader_never_panics_or_trusts_its_footer() {
    fuzz_bytes(Target::Parquet, Format::Checked);
}

/// Training recipes (SFT and CVAA) and evaluation configs, as the repository ships them; a
/// recipe written back reads equal.
#[test]
fn toml_recipe_and_config_readers_never_panic() {
    let root = repo_root();
    let recipe = motionvl_train::recipe::Recipe::load(&root.join("configs/sft/sis-motion-7b.toml"), &[]).expect("recipe");
    let dir = tempfile::tempdir().expect("tempdir");
    let again = dir.path().join("again.toml");
    std::fs::write(&again, recipe.to_toml()).expect("write");
    assert_eq!(motionvl_train::recipe::Recipe::load(&again, &[]).expect("reads back"), recipe, "recipe round trip");
    fuzz_bytes(Target::SftRecipe, Format::Tolerant);
    fuzz_bytes(Target::CvaaRecipe, Format::Tolerant);
    fuzz_bytes(Target::EvalConfig, Format::Tolerant);
}

/// A model's `config.json` and `tokenizer.json` from the Qwen2.5-VL fixtures, and a PEFT
/// adapter's `adapter_config.json`.
#[test]
fn model_adapter_config_and_tokenizer_readers_never_panic() {
    fuzz_bytes(Target::ModelConfig, Format::Tolerant);
    fuzz_bytes(Target::AdapterConfig, Format::Tolerant);
    fuzz_bytes(Target::Tokenizer, Format::Tolerant);
}

/// Safetensors files (weights, adapters, flow files): header and every tensor.
#[test]
fn the_safetensors_reader_never_panics_or_trusts_its_header() {
    fuzz_bytes(Target::Safetensors, Format::Tolerant);
}

/// PyTorch zip pickles: a MOFNet checkpoint and a SIS-Motion connector as torch saved them.
#[test]
fn pytorch_pickle_readers_never_panic() {
    fuzz_bytes(Target::PthCheckpoint, Format::Checked);
    fuzz_bytes(Target::TorchConnector, Format::Checked);
}

/// Flow-cache entries as the cache writes them: a mutated entry is a miss or a corrupt entry,
/// and the header check agrees with the full read.
#[test]
fn flow_cache_entries_never_panic() {
    fuzz_bytes(Target::FlowCacheEntry, Format::Checked);
}

/// Videos: container headers and every frame of a short clip.
#[test]
fn the_video_reader_never_panics_or_trusts_its_header() {
    fuzz_bytes(Target::Video, Format::Tolerant);
}

/// A checkpoint's `motionvl_state.json`: read as a resume reads it, and saved back equal.
#[test]
fn the_resume_state_reader_never_panics() {
    fuzz_bytes(Target::ResumeState, Format::Tolerant);
}

/// Each reader fuzzed here has its cargo-fuzz target in `fuzz/fuzz_targets/`.
#[test]
fn every_target_has_a_cargo_fuzz_file() {
    for target in Target::ALL {
        let file = repo_root().join("fuzz/fuzz_targets").join(format!("{}.rs", target.name()));
        assert!(file.is_file(), "{} has no {}", target.name(), file.display());
    }
}

/// What cargo-fuzz found (`tests/data/fuzz/regressions/<target>/`, one folder per target): each
/// input read again passes the oracles under the allocation cap, and the damaged files are
/// refused (pickles declaring 4 GB strings, parquet pages and tokenizers the libraries panic on).
/// The video input still decodes; LeakSanitizer's 3.6 kB leak on it was the decoder's packet
/// reuse, fixed and measured in `data/tests/video.rs` (fuzz/README.md).
#[test]
fn what_cargo_fuzz_found_is_refused() {
    let root = repo_root().join("tests/data/fuzz/regressions");
    let lab = Lab::temporary();
    let mut replayed = 0;
    for target in Target::ALL {
        let Ok(entries) = std::fs::read_dir(root.join(target.name())) else { continue };
        for entry in entries {
            let path = entry.expect("regression entry").path();
            let bytes = std::fs::read(&path).expect("regression input");
            for verdict in readers::run(&lab, target, &bytes, &repo_root().join("data/tests/data")) {
                assert!(target == Target::Video || verdict.is_err(), "{}: read as {verdict:?}, a damaged file", path.display());
            }
            replayed += 1;
        }
    }
    assert!(replayed >= 5, "only {replayed} regression inputs under {}", root.display());
}
