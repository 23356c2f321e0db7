//! Bounded fuzzing of everything that parses user files: the training-row and benchmark
//! manifest readers, the predictions reader, inline option splitting and answer extraction.
//! Inputs are the repository's own data files, mutated by a seeded generator (byte flips,
//! insertions, deletions, truncations, spliced chunks, JSON-significant bytes); every reader
//! must return `Ok` or a typed error — never panic. CI runs the default bound; set
//! `MOTIONVL_FUZZ_ITERS` for a longer pass (the seed of a failing case is printed).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use motionvl_data::rng::SynthRng;
use motionvl_data::manifest::{AnswerOption, Benchmark, read_manifest, split_inline_options};
use motionvl_data::samples::{ReadOptions, ReadOutcome, read_training_samples};
use motionvl_eval::extract::{extract_choice, extract_choices, extract_number, extract_timestamp, extract_yes_no, parse_json_lenient};
use motionvl_eval::predictions::read_predictions;

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

fn corpus() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files: Vec<PathBuf> = ["data/tests/data/dualcog.json", "data/tests/data/lf.jsonl", "data/tests/data/links2bench.jsonl", "data/tests/data/llava.json", "data/tests/data/sisbench.json", "tests/data/tiny-sft/train.jsonl", "tests/data/fuzz/predictions.jsonl"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    for f in &files {
        assert!(f.is_file(), "fuzz seed {} is missing", f.display());
    }
    files
}

/// What a reader made of a file: the rows it read and the rows `skip_bad` left out, or a typed
/// error for the whole file.
type Outcome = Result<(usize, usize), ()>;

fn outcome<T, E>(read: &Result<ReadOutcome<T>, E>) -> Outcome {
    read.as_ref().map(|o| (o.items.len(), o.skipped.len())).map_err(|_| ())
}

/// Whether `mutant` refused more than `seed` did: a typed error, or more rows left out.
fn refused_more(seed: Outcome, mutant: Outcome) -> bool {
    match (seed, mutant) {
        (Ok(_), Err(())) => true,
        (Ok((_, seed_left)), Ok((_, left))) => left > seed_left,
        (Err(()), _) => false,
    }
}

/// Runs `check` on `iterations()` mutants of each seed file written under `dir`; a panic
/// fails the test with the seed that reproduces it. `check` returns one outcome per reader it
/// calls. So that passing proves the mutants reached the readers' checks: wherever a reader
/// accepts a seed, some of its mutants must be refused with a typed error, and where it reads
/// rows from the seed, some mutants must still be read; and some reader must read some seed.
fn fuzz_files(name: &str, check: impl Fn(&Path, &Path) -> Vec<Outcome>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut seeds_read = 0;
    for (s, seed_file) in corpus().iter().enumerate() {
        let seed = std::fs::read(seed_file).expect("seed");
        // Media resolve against the seed's folder, so media checks run too.
        let media_root = seed_file.parent().unwrap_or(dir.path());
        let path = dir.path().join(format!("{name}-{s}.json"));
        std::fs::write(&path, &seed).expect("write seed");
        let unmutated = check(&path, media_root);
        let (mut refused, mut read) = (vec![0; unmutated.len()], vec![0; unmutated.len()]);
        for i in 0..iterations() {
            let case_seed = (s as u64) << 32 | i;
            let bytes = mutate(&seed, &mut SynthRng::new(case_seed));
            std::fs::write(&path, &bytes).expect("write mutant");
            let Ok(outcomes) = catch_unwind(AssertUnwindSafe(|| check(&path, media_root))) else {
                let kept = dir.path().join("crash.json");
                let _ = std::fs::write(&kept, &bytes);
                panic!("{name} panicked on a mutant of {} (case seed {case_seed}; bytes saved in {})", seed_file.display(), kept.display());
            };
            for (r, (seed_outcome, mutant)) in unmutated.iter().zip(outcomes).enumerate() {
                refused[r] += usize::from(refused_more(*seed_outcome, mutant));
                read[r] += usize::from(matches!(mutant, Ok((rows, _)) if rows > 0));
            }
        }
        for (r, seed_outcome) in unmutated.iter().enumerate() {
            let what = format!("{name} (reader {r}) on {}", seed_file.display());
            if seed_outcome.is_ok() {
                assert!(refused[r] > 0, "{what}: no mutant was refused: the mutants do not reach the reader's checks");
            }
            if matches!(seed_outcome, Ok((rows, _)) if *rows > 0) {
                seeds_read += 1;
                assert!(read[r] > 0, "{what}: the seed reads, none of its mutants did");
            }
        }
    }
    assert!(seeds_read > 0, "{name}: no reader read any seed file");
}

#[test]
fn training_row_readers_never_panic() {
    for skip_bad in [false, true] {
        fuzz_files("training", |p, media_root| {
            vec![outcome(&read_training_samples(p, &ReadOptions { skip_bad, media_root: Some(media_root.to_path_buf()), ..ReadOptions::default() }))]
        });
    }
}

#[test]
fn benchmark_manifest_readers_never_panic() {
    fuzz_files("manifest", |p, media_root| {
        let opts = ReadOptions { skip_bad: true, media_root: Some(media_root.to_path_buf()), ..ReadOptions::default() };
        Benchmark::ALL.iter().map(|b| outcome(&read_manifest(*b, p, &opts))).collect()
    });
}

#[test]
fn the_predictions_reader_never_panics() {
    fuzz_files("predictions", |p, _| {
        let resumed = motionvl_eval::predictions::PredictionWriter::resume(p).map(|(_, rows)| (rows.len(), 0)).map_err(|_| ());
        vec![read_predictions(p).map(|rows| (rows.len(), 0)).map_err(|_| ()), resumed]
    });
}

#[test]
fn option_splitting_and_answer_extraction_never_panic() {
    let options = AnswerOption::lettered(&["move forward", "turn left", "ascend", "3.5 m"]);
    let seeds = ["The answer is B. turn left", "A. up\nB. down\nC) left (D) right", "{\"answer\": \"C\", \"time\": \"00:12\"}", "Yes, 12.5 meters at 1:02.5", "B and D"];
    for (s, seed) in seeds.iter().enumerate() {
        for i in 0..iterations() * 4 {
            let case_seed = (s as u64) << 32 | i;
            let text = String::from_utf8_lossy(&mutate(seed.as_bytes(), &mut SynthRng::new(case_seed))).into_owned();
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let _ = split_inline_options(&text);
                let _ = extract_choice(&text, &options);
                let _ = extract_choices(&text, &options);
                let _ = extract_yes_no(&text);
                let _ = extract_number(&text);
                let _ = extract_timestamp(&text);
                let _ = parse_json_lenient(&text);
            }));
            assert!(outcome.is_ok(), "answer extraction panicked on {text:?} (case seed {case_seed})");
        }
    }
}
