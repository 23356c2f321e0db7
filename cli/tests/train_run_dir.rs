//! The run-directory contract under the mistakes users make: two writers, a restart without
//! `--resume`, a resume from another run, an adapter of another shape, a merge with the wrong
//! adapter, damaged media.

use std::path::Path;

use motionvl_models::CheckpointFiles;
use motionvl_train::recipe::Recipe;
use motionvl_train::sft::{Start, StepLog, Trainer};
use serde_json::Value;

mod common;

use common::repo_root;

/// The tiny recipe, two steps with a checkpoint after each, with `extra` overrides.
fn tiny(out: &Path, extra: &[(&str, &str)]) -> Recipe {
    let mut overrides = vec![("optim.max_steps", "2"), ("checkpoint.every", "1")];
    overrides.extend_from_slice(extra);
    common::tiny(out, &overrides)
}

fn err_text<T>(r: Result<T, motionvl_train::sft::TrainError>) -> String {
    r.err().map(|e| e.to_string()).unwrap_or_default()
}

#[test]
fn a_second_writer_is_refused_naming_the_lock_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Trainer::new(&tiny(dir.path(), &[]), None).expect("first writer");
    let err = err_text(Trainer::new(&tiny(dir.path(), &[]), Some("auto")));
    assert!(err.contains(&format!("PID {}", std::process::id())) && err.contains(".lock"), "{err}");
    drop(first);
    assert!(Trainer::new(&tiny(dir.path(), &[]), Some("auto")).is_ok(), "the lock goes with its holder");

    // Another process: the train binary on the same folder while this one holds it.
    let holder = Trainer::new(&tiny(dir.path(), &[]), Some("auto")).expect("holder");
    let config = dir.path().join("recipe.toml");
    std::fs::write(&config, tiny(dir.path(), &[]).to_toml()).expect("recipe");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_train")).args(["sft", "--config"]).arg(&config).arg("--resume").output().expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("being written by another process") && stderr.contains(&format!("PID {}", std::process::id())), "{stderr}");
    drop(holder);
}

/// `MOTIONVL_HOST` names the machine in what a run writes for its host (TensorBoard's file name
/// here; temporary names and the lock's holder too): containers of one image share a kernel
/// host name across nodes.
#[test]
fn the_host_name_can_be_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("recipe.toml");
    let run = dir.path().join("run");
    std::fs::write(&config, tiny(&run, &[("optim.max_steps", "1"), ("logging.tensorboard", "true")]).to_toml()).expect("recipe");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_train"))
        .args(["sft", "--config"])
        .arg(&config)
        .env("MOTIONVL_HOST", "node-17.cluster")
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let events: Vec<String> = std::fs::read_dir(run.join("tensorboard"))
        .expect("tensorboard folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(events.len() == 1 && events[0].contains(".node-17.cluster."), "{events:?}");
}

#[test]
fn restarting_without_resume_is_refused_and_overwrite_starts_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut killed = Trainer::new(&tiny(dir.path(), &[]), None).expect("setup");
    killed.train_step().expect("a step");
    drop(killed);
    let err = err_text(Trainer::new(&tiny(dir.path(), &[]), None));
    assert!(err.contains("already holds a run") && err.contains("--resume auto") && err.contains("--overwrite"), "{err}");

    std::fs::write(dir.path().join("notes.txt"), "mine").expect("a file of the user's");
    let overwriting = Trainer::start(&tiny(dir.path(), &[]), Start::Overwrite).expect("overwrite");
    let said = overwriting.note().unwrap_or_default().to_owned();
    assert!(
        said.contains("--overwrite removed") && said.contains("checkpoint-1") && said.contains("trainer_log.jsonl") && !said.contains("notes.txt"),
        "{said}"
    );
    let logs = overwriting.run().expect("trains");
    assert_eq!(logs.len(), 2);
    assert!(dir.path().join("notes.txt").is_file(), "only the run's own files are removed");
    let log = std::fs::read_to_string(dir.path().join("trainer_log.jsonl")).expect("log");
    assert_eq!(log.lines().count(), 2, "the old run's lines are gone: {log}");
}

#[test]
fn resume_auto_without_a_checkpoint_starts_fresh_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Killed before its first checkpoint: a step logged, nothing saved.
    let mut killed = Trainer::new(&tiny(dir.path(), &[("checkpoint.every", "10")]), None).expect("setup");
    killed.train_step().expect("a step");
    drop(killed);
    let trainer = Trainer::new(&tiny(dir.path(), &[("checkpoint.every", "10")]), Some("auto")).expect("starts fresh");
    assert!(trainer.note().is_some_and(|n| n.contains("no complete checkpoint")), "{:?}", trainer.note());
    assert_eq!(trainer.run().expect("trains").len(), 2);
    let log = std::fs::read_to_string(dir.path().join("trainer_log.jsonl")).expect("log");
    assert_eq!(log.lines().count(), 2, "{log}");
}

#[test]
fn another_runs_checkpoint_is_refused() {
    let (a, b) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    Trainer::new(&tiny(a.path(), &[("optim.lr", "0.02")]), None).expect("run a").run().expect("a trains");
    let checkpoint = a.path().join("checkpoint-2");
    let err = err_text(Trainer::new(&tiny(b.path(), &[]), Some(&checkpoint.display().to_string())));
    assert!(err.contains("another recipe") && err.contains("optim.lr"), "{err}");
}

#[test]
fn an_adapter_of_another_shape_names_tensor_and_file_and_merge_blames_the_adapter() {
    let (dir, other) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    Trainer::new(&tiny(dir.path(), &[]), None).expect("run").run().expect("trains");
    Trainer::new(&tiny(other.path(), &[("lora.rank", "4")]), None).expect("run").run().expect("trains");
    // The rank-4 adapter put where the rank-8 run keeps its own.
    let adapter = dir.path().join("checkpoint-2/adapter_model.safetensors");
    std::fs::copy(other.path().join("checkpoint-2/adapter_model.safetensors"), &adapter).expect("swap");
    let err = err_text(Trainer::new(&tiny(dir.path(), &[("optim.max_steps", "3")]), Some("auto")));
    assert!(err.contains("adapter_model.safetensors") && err.contains("lora_A") && err.contains("[4,") && err.contains("[8,"), "{err}");

    // A merge of an adapter trained on another model says the adapter is the wrong side.
    let wide = tempfile::tempdir().expect("tempdir");
    let config = wide.path().join("wide.json");
    let json = std::fs::read_to_string(repo_root().join("configs/models/tiny.json"))
        .expect("config")
        .replace("\"intermediate_size\": 192", "\"intermediate_size\": 256");
    std::fs::write(&config, json).expect("wide config");
    let run = wide.path().join("run");
    Trainer::new(&tiny(&run, &[("model.init_config", &format!("{:?}", config.display().to_string()))]), None)
        .expect("wide run")
        .run()
        .expect("trains");
    let base = CheckpointFiles::from_dir(&other.path().join("base-model")).expect("base");
    let err = motionvl_train::merge::merge(&base, &run.join("checkpoint-2"), &wide.path().join("merged"), 1 << 30)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("the adapter does not fit the base model") && err.contains("trained on another model"), "{err}");
}

/// transformers' field kinds per class, from tools/fixtures/transformers_fields.py.
fn transformers_fields(class: &str) -> serde_json::Map<String, Value> {
    let path = repo_root().join("tests/fixtures/transformers_fields/fields.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    json["classes"][class].as_object().unwrap_or_else(|| panic!("{} has no class {class}", path.display())).clone()
}

/// Every key of `json` that `classes` declare has a JSON kind their validators accept: an int
/// field refuses `2.0`, a float field refuses `2` (huggingface_hub's `@strict`).
fn assert_kinds(what: &str, json: &Value, classes: &[&str]) {
    let fields: Vec<_> = classes.iter().map(|c| transformers_fields(c)).collect();
    let object = json.as_object().unwrap_or_else(|| panic!("{what} is not an object"));
    for (key, value) in object {
        let Some(kinds) = fields.iter().find_map(|f| f.get(key)) else { continue };
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(n) if n.is_f64() => "float",
            Value::Number(_) => "int",
            Value::String(_) => "str",
            Value::Array(_) => "list",
            Value::Object(_) => "dict",
        };
        let allowed: Vec<&str> = kinds.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        assert!(allowed.contains(&kind) || allowed.contains(&"any"), "{what}: `{key}` is {kind} ({value}); transformers accepts {allowed:?}");
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn step_logs(dir: &Path) -> Vec<StepLog> {
    let text = std::fs::read_to_string(dir.join("trainer_log.jsonl")).expect("trainer_log.jsonl");
    text.lines().map(|l| serde_json::from_str(l).expect("a step log line")).collect()
}

#[test]
fn checkpoints_and_the_run_root_hold_what_hf_trainer_peft_and_llama_factory_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run");
    Trainer::new(&tiny(&run, &[("optim.max_steps", "3"), ("checkpoint.every", "2"), ("checkpoint.keep", "0")]), None)
        .expect("run")
        .run()
        .expect("trains");
    let logs = step_logs(&run);
    assert_eq!(logs.iter().map(|l| l.step).collect::<Vec<_>>(), [1, 2, 3]);

    for (step, checkpoint) in [(2, run.join("checkpoint-2")), (3, run.join("checkpoint-3"))] {
        for file in
            ["adapter_model.safetensors", "adapter_config.json", "trainer_state.json", "motionvl_state.json", "optimizer.safetensors", "config.toml"]
        {
            assert!(checkpoint.join(file).is_file(), "{} lacks {file}", checkpoint.display());
        }
        assert!(!checkpoint.join("adapter").exists(), "the adapter sits in the checkpoint itself");
        let state = read_json(&checkpoint.join("trainer_state.json"));
        // TrainerState.load_from_json passes every key to the dataclass: the set must be exact.
        let keys: std::collections::BTreeSet<&String> = state.as_object().expect("object").keys().collect();
        let hf = transformers_fields("TrainerState");
        assert_eq!(keys, hf.keys().collect(), "{}", checkpoint.display());
        assert_kinds("trainer_state.json", &state, &["TrainerState"]);
        assert_eq!((state["global_step"].as_u64(), state["max_steps"].as_u64(), state["save_steps"].as_u64()), (Some(step), Some(3), Some(2)));
        let history = state["log_history"].as_array().expect("log_history");
        assert_eq!(history.len(), step as usize);
        for (entry, log) in history.iter().zip(&logs) {
            assert_eq!(entry["step"].as_u64(), Some(log.step as u64));
            assert_eq!(
                (entry["loss"].as_f64(), entry["learning_rate"].as_f64(), entry["grad_norm"].as_f64()),
                (Some(log.loss), Some(log.lr), Some(log.grad_norm))
            );
        }
        assert_eq!(state["epoch"].as_f64(), Some(logs[step as usize - 1].epoch));
    }
    // The final adapter and state at the root, as Trainer.save_model() + save_state() leave them.
    for file in ["adapter_model.safetensors", "adapter_config.json", "trainer_state.json"] {
        assert_eq!(
            std::fs::read(run.join(file)).expect("root file"),
            std::fs::read(run.join("checkpoint-3").join(file)).expect("checkpoint file"),
            "{file}"
        );
    }
    let adapter = read_json(&run.join("adapter_config.json"));
    assert_eq!(adapter["base_model_name_or_path"].as_str(), Some(run.join("base-model").display().to_string().as_str()));

    // LLaMA-Factory's LogCallback keys, beside ours.
    let text = std::fs::read_to_string(run.join("trainer_log.jsonl")).expect("log");
    for (line, log) in text.lines().zip(&logs) {
        let json: Value = serde_json::from_str(line).expect("line");
        assert_eq!((json["current_steps"].as_u64(), json["total_steps"].as_u64()), (Some(log.step as u64), Some(3)), "{line}");
        assert_eq!(json["percentage"].as_f64(), Some([33.33, 66.67, 100.0][log.step - 1]), "{line}");
        for key in ["elapsed_time", "remaining_time"] {
            let t = json[key].as_str().unwrap_or_default();
            let parts: Vec<&str> = t.split(':').collect();
            assert!(parts.len() == 3 && parts[1].len() == 2 && parts[2].len() == 2 && parts.iter().all(|p| p.parse::<u32>().is_ok()), "{key} {t:?}");
        }
        for key in ["loss", "lr", "epoch", "step", "grad_norm"] {
            assert!(json[key].is_number(), "{key} in {line}");
        }
    }
    // Fractional epochs: tiny.toml's 8 clips, 2 per step.
    assert_eq!(logs.iter().map(|l| l.epoch).collect::<Vec<_>>(), [0.25, 0.5, 0.75]);

    let scalars = motionvl_train::tensorboard::read_scalars(run.join("tensorboard")).expect("events");
    for tag in ["train/loss", "train/learning_rate", "train/epoch", "train/grad_norm"] {
        let steps: Vec<i64> = scalars.iter().filter(|s| s.tag == tag).map(|s| s.step).collect();
        assert_eq!(steps, [1, 2, 3], "{tag}");
    }

    // Hub-layout model folders: the fresh base model and a merge of the final adapter.
    let merged = dir.path().join("merged");
    // A hub tokenizer's merges.txt travels with a merge too.
    std::fs::write(run.join("base-model/merges.txt"), "#version: 0.2\n").expect("merges.txt");
    let base = CheckpointFiles::from_dir(&run.join("base-model")).expect("base");
    motionvl_train::merge::merge(&base, &run, &merged, 1 << 30).expect("merge from the run root");
    for model in [run.join("base-model"), merged] {
        let config = read_json(&model.join("config.json"));
        assert_kinds("config.json", &config, &["Qwen2_5_VLConfig", "Qwen2_5_VLTextConfig"]);
        assert_kinds("config.json vision_config", &config["vision_config"], &["Qwen2_5_VLVisionConfig"]);
        for key in ["bos_token_id", "pad_token_id", "eos_token_id"] {
            assert!(!config[key].is_null(), "{}: no {key}", model.display());
        }
        for file in [
            "tokenizer.json",
            "tokenizer_config.json",
            "chat_template.json",
            "preprocessor_config.json",
            "video_preprocessor_config.json",
            "generation_config.json",
            "merges.txt",
        ] {
            assert!(model.join(file).is_file(), "{} lacks {file}", model.display());
        }
        let tokenizer_config = read_json(&model.join("tokenizer_config.json"));
        assert_eq!(tokenizer_config["chat_template"].as_str(), Some(motionvl_data::hub_files::QWEN25VL_CHAT_TEMPLATE));
        let pixels = read_json(&model.join("video_preprocessor_config.json"));
        assert_eq!((pixels["min_pixels"].as_u64(), pixels["max_pixels"].as_u64()), (Some(3136), Some(3136)), "tiny.toml's bounds");
    }
}

#[test]
fn a_resume_restarts_tensorboard_and_the_logs_at_its_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let recipe = tiny(dir.path(), &[("optim.max_steps", "4"), ("checkpoint.every", "2")]);
    let mut killed = Trainer::new(&recipe, None).expect("setup");
    for _ in 0..3 {
        killed.train_step().expect("a step");
    }
    drop(killed);
    Trainer::new(&recipe, Some("auto")).expect("resume").run().expect("trains on");
    let logs = step_logs(dir.path());
    assert_eq!(logs.iter().map(|l| l.step).collect::<Vec<_>>(), [1, 2, 3, 4]);
    // The killed run's step 3 is in the first event file; the START at step 3 drops it.
    let scalars = motionvl_train::tensorboard::read_scalars(dir.path().join("tensorboard")).expect("events");
    let losses: Vec<(i64, f32)> = scalars.iter().filter(|s| s.tag == "train/loss").map(|s| (s.step, s.value)).collect();
    assert_eq!(losses, logs.iter().map(|l| (l.step as i64, l.loss as f32)).collect::<Vec<_>>());
    let state = read_json(&dir.path().join("checkpoint-4/trainer_state.json"));
    let steps: Vec<u64> = state["log_history"].as_array().expect("history").iter().filter_map(|e| e["step"].as_u64()).collect();
    assert_eq!(steps, [1, 2, 3, 4], "the history carries the steps before the resume");
}

/// Rewrites `checkpoint` into the layout motionvl wrote before the hub layout: the adapter in
/// `adapter/`, the resume state as `trainer_state.json`.
fn to_legacy_layout(checkpoint: &Path) {
    std::fs::create_dir(checkpoint.join("adapter")).expect("adapter/");
    for file in ["adapter_model.safetensors", "adapter_config.json"] {
        std::fs::rename(checkpoint.join(file), checkpoint.join("adapter").join(file)).expect("move");
    }
    std::fs::rename(checkpoint.join("motionvl_state.json"), checkpoint.join("trainer_state.json")).expect("state");
}

#[test]
fn runs_in_the_older_layout_still_resume_and_merge() {
    let (fresh, old) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let uninterrupted = Trainer::new(&tiny(fresh.path(), &[]), None).expect("run").run().expect("trains");

    let recipe = tiny(old.path(), &[]);
    let mut killed = Trainer::new(&recipe, None).expect("setup");
    killed.train_step().expect("step 1");
    drop(killed);
    to_legacy_layout(&old.path().join("checkpoint-1"));
    let legacy_state = read_json(&old.path().join("checkpoint-1/trainer_state.json"));
    assert_eq!(legacy_state["step"].as_u64(), Some(1), "the old schema: {legacy_state}");
    let resumed = Trainer::new(&recipe, Some("auto")).expect("resumes an old checkpoint").run().expect("trains on");
    assert_eq!(resumed.iter().map(|l| l.loss).collect::<Vec<_>>(), [uninterrupted[1].loss], "the resumed step equals the uninterrupted one");

    // Merge reads the old layout given the checkpoint or its adapter/ folder.
    to_legacy_layout(&old.path().join("checkpoint-2"));
    let base = CheckpointFiles::from_dir(&old.path().join("base-model")).expect("base");
    let a = old.path().join("merged-a");
    let b = old.path().join("merged-b");
    motionvl_train::merge::merge(&base, &old.path().join("checkpoint-2"), &a, 1 << 30).expect("merge a checkpoint");
    motionvl_train::merge::merge(&base, &old.path().join("checkpoint-2/adapter"), &b, 1 << 30).expect("merge its adapter/");
    assert_eq!(std::fs::read(a.join("model.safetensors")).expect("a"), std::fs::read(b.join("model.safetensors")).expect("b"));
}

#[test]
fn known_flags_may_follow_overrides() {
    // `--output-dir` and `--check-data` after an override are still the binary's flags.
    let out = tempfile::tempdir().expect("tempdir");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_train"))
        .current_dir(repo_root())
        .args(["sft", "--config", "configs/sft/tiny.toml", "--data.workers", "1", "--output-dir"])
        .arg(out.path())
        .arg("--check-data")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("\"samples\":8"), "{stdout}");
}
