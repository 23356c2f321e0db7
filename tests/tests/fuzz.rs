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
//! longer pass (the seed of a failing case is printed).

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use motionvl_data::manifest::{AnswerOption, Benchmark, read_manifest, split_inline_options};
use motionvl_data::rng::SynthRng;
use motionvl_data::samples::{ReadOptions, ReadOutcome, read_training_samples};
use motionvl_eval::extract::{extract_choice, extract_choices, extract_number, extract_timestamp, extract_yes_no, parse_json_lenient};
use motionvl_eval::predictions::read_predictions;
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

fn corpus() -> Vec<PathBuf> {
    let root = repo_root();
    let files: Vec<PathBuf> = [
        "data/tests/data/dualcog.json",
        "data/tests/data/lf.jsonl",
        "data/tests/data/links2bench.jsonl",
        "data/tests/data/llava.json",
        "data/tests/data/sisbench.json",
        "tests/data/tiny-sft/train.jsonl",
        "tests/data/fuzz/predictions.jsonl",
    ]
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
    let seeds = [
        "The answer is B. turn left",
        "A. up\nB. down\nC) left (D) right",
        "{\"answer\": \"C\", \"time\": \"00:12\"}",
        "Yes, 12.5 meters at 1:02.5",
        "B and D",
    ];
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

/// How much of a format survives mutation.
#[derive(Clone, Copy, PartialEq)]
enum Format {
    /// Some mutants still read (text, headers with slack).
    Tolerant,
    /// Checksummed or compressed (zip, cache entries): any change may be refused.
    Checked,
}

/// Runs `read` on `iterations()` mutants of each `(file name, bytes)` seed, written under a
/// folder of its own (the name keeps the extension readers dispatch on). A panic or a case over
/// [`CASE_TIME`] fails with the seed that reproduces it; the seeds must read, and some mutants
/// of each be refused (and, for a [`Format::Tolerant`] one, some still read), so that passing
/// proves the mutants reached the reader's checks.
fn fuzz_bytes(name: &str, format: Format, seeds: &[(&str, Vec<u8>)], read: impl Fn(&Path) -> Result<(), String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (s, (file, seed)) in seeds.iter().enumerate() {
        let path = dir.path().join(file);
        std::fs::write(&path, seed).expect("write seed");
        if let Err(e) = read(&path) {
            panic!("{name}: the seed {file} does not read: {e}");
        }
        let (mut refused, mut read_ok) = (0, 0);
        for i in 0..iterations() {
            let case_seed = (s as u64) << 32 | i;
            let bytes = mutate(seed, &mut SynthRng::new(case_seed));
            std::fs::write(&path, &bytes).expect("write mutant");
            let start = Instant::now();
            let Ok(outcome) = catch_unwind(AssertUnwindSafe(|| read(&path))) else {
                let kept = std::env::temp_dir().join(format!("motionvl-fuzz-crash-{name}-{file}"));
                let _ = std::fs::write(&kept, &bytes);
                panic!("{name} panicked on a mutant of {file} (case seed {case_seed}; bytes saved in {})", kept.display());
            };
            assert!(start.elapsed() < CASE_TIME, "{name} took {:?} on a mutant of {file} (case seed {case_seed})", start.elapsed());
            match outcome {
                Ok(()) => read_ok += 1,
                Err(_) => refused += 1,
            }
        }
        assert!(refused > 0, "{name}: no mutant of {file} was refused: the mutants do not reach the reader's checks");
        assert!(read_ok > 0 || format == Format::Checked, "{name}: no mutant of {file} still read");
    }
}

fn points() -> Vec<motionvl_construct::dccs::geom::V3> {
    (0..40).map(|i| motionvl_construct::dccs::geom::V3::new(i as f64 * 0.5, (i * i % 7) as f64 - 3.0, 10.0 + (i % 5) as f64)).collect()
}

/// PLY (binary and ASCII, as written), NPY and XYZ clouds; a written cloud reads back equal.
#[test]
fn point_cloud_readers_never_panic_or_trust_counts() {
    use motionvl_construct::dccs::cloud::{read_cloud, write_ply};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut seeds = Vec::new();
    for (file, binary) in [("cloud.ply", true), ("ascii.ply", false)] {
        let path = dir.path().join(file);
        write_ply(&path, &points(), binary).expect("ply");
        let read = read_cloud(&path).expect("reads back");
        assert_eq!(read.points.len(), points().len(), "{file} round trip");
        let worst =
            read.points.iter().zip(points()).map(|(a, b)| (a.x - b.x).abs().max((a.y - b.y).abs()).max((a.z - b.z).abs())).fold(0.0, f64::max);
        assert!(worst < 1e-5, "{file}: a written point moved by {worst}");
        seeds.push((file, std::fs::read(&path).expect("seed")));
    }
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (40, 3), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend((header.len() as u16).to_le_bytes());
    npy.extend(header.as_bytes());
    npy.extend(points().iter().flat_map(|p| [p.x as f32, p.y as f32, p.z as f32]).flat_map(f32::to_le_bytes));
    seeds.push(("cloud.npy", npy));
    seeds.push(("cloud.xyz", points().iter().map(|p| format!("{} {} {}\n", p.x, p.y, p.z)).collect::<String>().into_bytes()));
    fuzz_bytes("point clouds", Format::Tolerant, &seeds, |p| read_cloud(p).map(|_| ()).map_err(|e| e.to_string()));
}

/// `valid_instances.json` and trajectories, seeded by their writers (which read back equal).
#[test]
fn dccs_instance_and_trajectory_readers_never_panic() {
    use motionvl_construct::dccs::geom::V3;
    use motionvl_construct::dccs::instances::{Category, Landmark, OrientedBox, read_instances, write_instances};
    use motionvl_construct::dccs::trajectory::Trajectory;
    let dir = tempfile::tempdir().expect("tempdir");
    let landmarks = vec![
        Landmark {
            id: "silo_1".into(),
            category: Category::IndustrialInfrastructure,
            subcategory: "silo".into(),
            description: "a red grain silo".into(),
            bbox: OrientedBox { center: V3::new(3.0, -2.0, 9.0), size: V3::new(6.0, 5.0, 18.0), yaw_deg: 20.0 },
            support_points: vec![V3::new(3.0, 0.0, 5.0), V3::new(0.0, 2.0, 17.0)],
        },
        Landmark {
            id: "tower_2".into(),
            category: Category::Building,
            subcategory: String::new(),
            description: "a glass tower".into(),
            bbox: OrientedBox { center: V3::new(-20.0, 14.0, 30.0), size: V3::new(10.0, 12.0, 60.0), yaw_deg: -5.0 },
            support_points: vec![V3::new(-20.0, 14.0, 59.0)],
        },
    ];
    let path = dir.path().join("valid_instances.json");
    write_instances(&path, &landmarks).expect("write");
    assert_eq!(read_instances(&path).expect("reads back"), landmarks, "instances round trip");
    let seed = std::fs::read(&path).expect("seed");
    fuzz_bytes("dccs instances", Format::Tolerant, &[("valid_instances.json", seed)], |p| read_instances(p).map(|_| ()).map_err(|e| e.to_string()));

    let trajectory = serde_json::json!({"fps": 5.0, "frames": (0..12).map(|i| serde_json::json!({"t": i as f64 / 5.0, "x": i as f64, "y": 2.0 * i as f64, "z": 30.0, "yaw": 15.0 * i as f64, "pitch": -30.0})).collect::<Vec<_>>()});
    let parsed = Trajectory::from_json(&trajectory).expect("trajectory");
    assert_eq!(Trajectory::from_json(&parsed.to_json()).expect("again").frames.len(), 12, "trajectory round trip");
    fuzz_bytes("dccs trajectories", Format::Tolerant, &[("trajectory.json", parsed.to_json().to_string().into_bytes())], |p| {
        let text = std::fs::read_to_string(p).map_err(|e| e.to_string())?;
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        Trajectory::from_json(&value).map(|_| ())
    });
}

/// UrbanVideo-Bench's `MCQ.parquet` as shipped.
#[test]
fn the_parquet_reader_never_panics_or_trusts_its_footer() {
    let seed = std::fs::read(repo_root().join("data/tests/data/urbanvideo/MCQ.parquet")).expect("seed");
    fuzz_bytes("parquet", Format::Checked, &[("MCQ.parquet", seed)], |p| {
        motionvl_data::parquet_rows::read_parquet_rows(p).map(|_| ()).map_err(|e| e.to_string())
    });
}

/// Training recipes (SFT and CVAA) and evaluation configs, as the repository ships them; a
/// recipe written back reads equal.
#[test]
fn toml_recipe_and_config_readers_never_panic() {
    let root = repo_root();
    let sft = std::fs::read(root.join("configs/sft/sis-motion-7b.toml")).expect("seed");
    let recipe = motionvl_train::recipe::Recipe::load(&root.join("configs/sft/sis-motion-7b.toml"), &[]).expect("recipe");
    let dir = tempfile::tempdir().expect("tempdir");
    let again = dir.path().join("again.toml");
    std::fs::write(&again, recipe.to_toml()).expect("write");
    assert_eq!(motionvl_train::recipe::Recipe::load(&again, &[]).expect("reads back"), recipe, "recipe round trip");
    fuzz_bytes("sft recipes", Format::Tolerant, &[("recipe.toml", sft)], |p| {
        motionvl_train::recipe::Recipe::load(p, &[]).map(|_| ()).map_err(|e| e.to_string())
    });
    let cvaa = std::fs::read(root.join("configs/cvaa/synth.toml")).expect("seed");
    fuzz_bytes("cvaa recipes", Format::Tolerant, &[("cvaa.toml", cvaa)], |p| {
        motionvl_train::cvaa::CvaaRecipe::load(p, &[]).map(|_| ()).map_err(|e| e.to_string())
    });
    let eval = std::fs::read(root.join("configs/eval/sisbench-official-3b.toml")).expect("seed");
    fuzz_bytes("evaluation configs", Format::Tolerant, &[("eval.toml", eval)], |p| {
        motionvl_eval::config::RunConfig::from_file(p).map(|_| ()).map_err(|e| e.to_string())
    });
}

/// A model's `config.json` and `tokenizer.json`, from the Qwen2.5-VL fixtures.
#[test]
fn model_config_and_tokenizer_readers_never_panic() {
    let root = repo_root();
    let config = std::fs::read(root.join("tests/fixtures/qwen2_5_vl/tiny-a/config.json")).expect("seed");
    fuzz_bytes("model configs", Format::Tolerant, &[("config.json", config)], |p| {
        motionvl_models::Qwen25VlConfig::from_file(p).map(|_| ()).map_err(|e| e.to_string())
    });
    let tokenizer = std::fs::read(root.join("tests/fixtures/chat_template/tokenizer.json")).expect("seed");
    fuzz_bytes("tokenizers", Format::Tolerant, &[("tokenizer.json", tokenizer)], |p| {
        motionvl_data::text::QwenTokenizer::from_file(p).map(|_| ()).map_err(|e| e.to_string())
    });
}

/// Safetensors files (weights, adapters, flow files): header and every tensor.
#[test]
fn the_safetensors_reader_never_panics_or_trusts_its_header() {
    let seed = std::fs::read(repo_root().join("tests/fixtures/sis_motion_pickle/expected.safetensors")).expect("seed");
    fuzz_bytes("safetensors", Format::Tolerant, &[("weights.safetensors", seed)], |p| {
        let weights = motionvl_models::CheckpointWeights::open(&[p.to_path_buf()]).map_err(|e| e.to_string())?;
        let names: Vec<String> = weights.names().map(str::to_owned).collect();
        for name in names {
            weights.load_stored(&name, &candle_core::Device::Cpu).map_err(|e| e.to_string())?;
        }
        Ok(())
    });
}

/// PyTorch zip pickles: a MOFNet checkpoint and a SIS-Motion connector as torch saved them.
#[test]
fn pytorch_pickle_readers_never_panic() {
    let root = repo_root();
    let pth = std::fs::read(root.join("tests/fixtures/flow/mofnet/tiny/checkpoint_sample.pth")).expect("seed");
    fuzz_bytes("pth checkpoints", Format::Checked, &[("checkpoint.pth", pth)], |p| {
        motionvl_flow::state_dict::read_pth(p).map(|_| ()).map_err(|e| e.to_string())
    });
    let connector = std::fs::read(root.join("tests/fixtures/sis_motion_pickle/torch_connector.pt")).expect("seed");
    // The connector's width d, from its LayerNorm as torch saved it.
    let saved = candle_core::pickle::read_all(root.join("tests/fixtures/sis_motion_pickle/torch_connector.pt")).expect("torch's own file reads");
    let width = saved.iter().find(|(n, _)| n == "ln.weight").map(|(_, t)| t.dims()[0]).expect("ln.weight");
    fuzz_bytes("torch connectors", Format::Checked, &[("connector_weights.pt", connector)], |p| {
        motionvl_models::sis_package::read_connector(p, width, &candle_core::Device::Cpu).map(|_| ()).map_err(|e| e.to_string())
    });
}

/// Flow-cache entries as the cache writes them: a mutated entry is a miss or a corrupt entry,
/// and the header check agrees with the full read.
#[test]
fn flow_cache_entries_never_panic() {
    use motionvl_flow::cache::{CacheKey, FlowCache, Precision};
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = FlowCache::new(dir.path()).expect("cache");
    let estimator = motionvl_flow::estimator_by_name("zero", None, &candle_core::Device::Cpu).expect("zero");
    let frames = ndarray::Array4::from_shape_fn((3, 8, 12, 3), |(t, y, x, c)| (t * 40 + y * 9 + x * 5 + c * 3) as u8);
    let key = CacheKey::new(frames.view(), "fuzz", estimator.as_ref());
    let flows = ndarray::Array4::from_shape_fn((2, 2, 8, 12), |(t, c, y, x)| t as f32 - 0.5 * c as f32 + 0.25 * y as f32 - x as f32 / 16.0);
    cache.put(&key, &flows, "zero", Precision::Single).expect("put");
    assert_eq!(cache.get(&key).expect("get"), Some(flows), "entry round trip");
    let entry = cache.path_of(&key);
    let seed = std::fs::read(&entry).expect("seed");
    let root = dir.path().to_path_buf();
    fuzz_bytes("flow cache entries", Format::Checked, &[("entry.safetensors", seed)], |p| {
        std::fs::copy(p, &entry).map_err(|e| e.to_string())?;
        let cache = FlowCache::new(&root).map_err(|e| e.to_string())?;
        let header = cache.has_entry(key.as_str());
        match cache.get(&key) {
            Ok(Some(_)) => {
                assert!(header.is_ok(), "the full read accepts an entry the header check refuses: {header:?}");
                Ok(())
            }
            Ok(None) => Err("missing".into()),
            Err(e) => Err(e.to_string()),
        }
    });
}

/// Videos: container headers and every frame of a short clip.
#[test]
fn the_video_reader_never_panics_or_trusts_its_header() {
    use motionvl_data::video::{EncodeSettings, VideoWriter, decode_all, probe_video};
    let dir = tempfile::tempdir().expect("tempdir");
    let clip = dir.path().join("clip.mp4");
    let mut writer = VideoWriter::create(&clip, 32, 24, &EncodeSettings { frame_rate: (10, 1), ..EncodeSettings::default() }).expect("writer");
    for t in 0..6u8 {
        let frame = ndarray::Array3::from_shape_fn((24, 32, 3), |(y, x, c)| (t as usize * 30 + y * 7 + x * 3 + c * 50) as u8);
        writer.push(frame.view()).expect("frame");
    }
    writer.finish().expect("video");
    let seed = std::fs::read(&clip).expect("seed");
    fuzz_bytes("videos", Format::Tolerant, &[("clip.mp4", seed)], |p| {
        probe_video(p).map_err(|e| e.to_string())?;
        decode_all(p).map(|_| ()).map_err(|e| e.to_string())
    });
}
