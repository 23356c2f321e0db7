//! The `flow` binary end to end on a folder of PNG frames with a known motion.

use std::process::Command;

use motionvl_flow::synthetic::{Motion, synthetic_pair};

#[test]
fn extract_and_viz_on_a_frame_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let frames_dir = dir.path().join("seq");
    std::fs::create_dir_all(&frames_dir).expect("mkdir");
    let pair = synthetic_pair(64, 96, Motion::Translation { dx: 2.0, dy: -1.0 }, 5);
    for t in 0..2 {
        let img = image::RgbImage::from_fn(96, 64, |x, y| image::Rgb([0, 1, 2].map(|c| pair.frames[[t, y as usize, x as usize, c]])));
        img.save(frames_dir.join(format!("{}.png", t + 1))).expect("png");
    }
    let out = dir.path().join("out");
    let status = Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(["extract", "--frames"])
        .arg(&frames_dir)
        .args(["--plan", "all", "--motion", "classic", "--out"])
        .arg(&out)
        .status()
        .expect("runs");
    assert!(status.success());
    let bytes = std::fs::read(out.join("seq.safetensors")).expect("output written");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let flows = st.tensor("flows").expect("flows");
    assert_eq!(flows.shape(), &[1, 2, 64, 96]);
    let values: Vec<f32> = flows.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let (u, v) = (values[..64 * 96].iter().sum::<f32>() / 6144.0, values[64 * 96..].iter().sum::<f32>() / 6144.0);
    assert!((u - 2.0).abs() < 0.2 && (v + 1.0).abs() < 0.2, "mean flow ({u}, {v})");

    let viz = dir.path().join("viz");
    let status = Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(["viz", "--frames"])
        .arg(&frames_dir)
        .args(["--plan", "all", "--out"])
        .arg(&viz)
        .status()
        .expect("runs");
    assert!(status.success());
    assert!(viz.join("seq/flow_0000.png").is_file() && viz.join("seq/strip.png").is_file());

    let status = Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(["extract", "--frames"])
        .arg(&frames_dir)
        .args(["--motion", "raft-small", "--out"])
        .arg(&out)
        .output()
        .expect("runs");
    assert!(!status.status.success());
    assert!(String::from_utf8_lossy(&status.stderr).contains("--weights"));
}

#[test]
fn extract_reads_every_video_of_a_manifest_and_fills_the_cache() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tiny-sft/train.jsonl");
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, cache) = (dir.path().join("out"), dir.path().join("cache"));
    let status = Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(["extract", "--manifest"])
        .arg(&data)
        .args(["--motion", "dis", "--out"])
        .arg(&out)
        .arg("--cache")
        .arg(&cache)
        .status()
        .expect("runs");
    assert!(status.success());
    assert_eq!(std::fs::read_dir(&out).expect("out").count(), 8, "one flow file per video of the manifest");
    let cached = walk(&cache);
    assert_eq!(cached, 8, "one cache entry per video");
}

/// Two machines filling one shared cache at the same time (`MOTIONVL_HOST` names the second
/// node, as the kernel would there): both finish, every entry is whole and read back by a third
/// run, and no temporary file is left behind.
#[test]
fn two_hosts_filling_one_cache_at_once_leave_whole_entries() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tiny-sft/train.jsonl");
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let extract = |host: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flow"));
        cmd.args(["extract", "--manifest"]).arg(&data).args(["--motion", "dis", "--cache"]).arg(&cache);
        cmd.env("MOTIONVL_HOST", host).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
        cmd.spawn().expect("flow extract starts")
    };
    // The same eight videos from both: every entry is written by both, in either order.
    let runs = [extract("node-a"), extract("node-b")];
    for run in runs {
        let out = run.wait_with_output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(walk(&cache), 8, "one entry per video");
    let temporary = |p: &std::path::Path| p.file_name().is_some_and(|n| n.to_string_lossy().contains(motionvl_data::files::TEMP_MARK));
    let leftovers: Vec<_> = walk_files(&cache).into_iter().filter(|p| temporary(p)).collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    let check = extract("node-c").wait_with_output().expect("runs");
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success() && stderr.contains("computed 0, already cached 8, repaired 0"), "{stderr}");
}

/// Every file under `dir`.
fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Flow entries in a cache folder.
fn walk(dir: &std::path::Path) -> usize {
    motionvl_flow::FlowCache::new(dir).and_then(|c| c.entry_count()).unwrap_or(0)
}

/// `flow extract --config RECIPE --shard I/N` fills exactly the entries the recipe's run looks
/// up (`train sft`'s own `motion_media`), under the recipe's frame plan (here the official
/// floor-linspace, which replaces `fps`/`min_frames`/`max_frames`) and length policy; the shards
/// are disjoint and together complete (a shard also taken from torchrun's or srun's environment,
/// one per rank), and a rerun computes nothing.
#[test]
fn extract_with_a_recipe_fills_the_keys_training_looks_up_shard_by_shard() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let data = root.join("tests/data/tiny-sft/train.jsonl");
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let recipe = dir.path().join("recipe.toml");
    let text = format!(
        "output_dir = {:?}\n[model]\ninit_config = {:?}\n[data]\ntrain = {:?}\nmax_seq_len = 256\nmax_seq_len_policy = \"none\"\nmin_frames = 4\nmax_frames = 4\nframes = {{ kind = \"official\", max_frames = 6 }}\nmin_pixels = 3136\nmax_pixels = 3136\n[motion]\nestimator = \"dis\"\ncache_dir = {:?}\n",
        dir.path().join("run").display().to_string(),
        root.join("configs/models/tiny.json").display().to_string(),
        data.display().to_string(),
        cache.display().to_string()
    );
    std::fs::write(&recipe, text).expect("recipe");
    let training = motionvl_train::recipe::Recipe::load(&recipe, &[]).expect("recipe reads");
    let media = motionvl_train::sft::motion_media(
        &training,
        &motionvl_train::sft::recipe_processor(&training).expect("processor"),
        &candle_core::Device::Cpu,
    )
    .expect("media")
    .expect("motion-aware");
    assert!(matches!(media.qwen.video_policy, motionvl_data::frames::FramePolicy::Official { max_frames: 6 }));
    let videos = motionvl_flow::extract::manifest_videos(&data).expect("videos");
    assert!(!media.is_cached(&videos[0]).expect("key"), "nothing is cached before the extraction");
    let run_as = |shard: Option<&str>, launch: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flow"));
        cmd.args(["extract", "--config"]).arg(&recipe).arg("--manifest").arg(&data).envs(launch.iter().copied());
        if let Some(shard) = shard {
            cmd.args(["--shard", shard]);
        }
        let output = cmd.output().expect("runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let run = |shard: &str| run_as(Some(shard), &[]);
    let first = run("0/3");
    assert!(first.contains("shard 0/3: 3 of 8 flows; computed 3, already cached 0"), "{first}");
    assert_eq!(walk(&cache), 3);
    // srun's variables inside a job step; no MASTER_ADDR: extraction needs no rendezvous.
    let rank1 = run_as(None, &[("SLURM_PROCID", "1"), ("SLURM_LOCALID", "0"), ("SLURM_NTASKS", "3"), ("SLURM_STEP_ID", "0")]);
    assert!(rank1.contains("shard 1/3: 3 of 8 flows; computed 3"), "rank 1 of 3 takes shard 1/3: {rank1}");
    run("2/3");
    assert_eq!(walk(&cache), 8, "the shards together cover every video once");
    let again = run("0/1");
    assert!(again.contains("computed 0, already cached 8"), "{again}");

    for video in &videos {
        assert!(media.is_cached(video).expect("key"), "{} is not where training looks", video.display());
    }

    // A cache-only start keys unchanged videos from the index extraction left: only the
    // verified sample is decoded. A video whose file changed is keyed again; a missing entry
    // is named.
    use motionvl_flow::key_index::check_cached;
    let jobs: Vec<_> = videos.iter().map(|v| (v.clone(), media.clone())).collect();
    let quick = check_cached(&jobs, 2, &|| {}).expect("check");
    assert_eq!((quick.videos, quick.decoded, quick.missing.len()), (8, 2, 0));
    let touched = std::fs::File::options().write(true).open(&videos[3]).expect("video");
    touched.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60)).expect("mtime");
    let entry = media.cache.as_ref().expect("cache").path_of(&media.flow_input(&videos[5]).expect("key").key);
    std::fs::remove_file(&entry).expect("entry removed");
    let after = check_cached(&jobs, 2, &|| {}).expect("check");
    assert_eq!(after.decoded, 3, "the sample and the changed video");
    assert_eq!(after.missing.len(), 1);
    assert!(
        after.missing[0].to_string().contains("no cached flow for") && after.missing[0].to_string().contains(&videos[5].display().to_string()),
        "{}",
        after.missing[0]
    );

    let bad = Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(["extract", "--config"])
        .arg(&recipe)
        .arg("--manifest")
        .arg(&data)
        .args(["--shard", "3/3"])
        .output()
        .expect("runs");
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("0 <= I < N"));
}

/// Two checkpoints with the same file name and size but different bytes never share flows.
#[test]
fn renamed_but_different_weights_miss_the_cache() {
    use motionvl_flow::cache::CacheKey;
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow/raft_small/tiny");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut keys = Vec::new();
    for (name, flip) in [("a", false), ("b", true)] {
        let folder = dir.path().join(name);
        std::fs::create_dir_all(&folder).expect("mkdir");
        std::fs::copy(fixture.join("config.json"), folder.join("config.json")).expect("config");
        let mut bytes = std::fs::read(fixture.join("model.safetensors")).expect("weights");
        if flip {
            // The lowest mantissa bit of the last f32 in the file: same size, still loads.
            let last = bytes.len() - 4;
            bytes[last] ^= 1;
        }
        std::fs::write(folder.join("model.safetensors"), bytes).expect("write");
        let (cfg, _) =
            motionvl_flow::raft::RaftConfig::from_json(&std::fs::read_to_string(folder.join("config.json")).expect("config")).expect("config");
        let estimator =
            motionvl_flow::raft::RaftEstimator::from_checkpoint(&folder.join("model.safetensors"), cfg, 2, &candle_core::Device::Cpu).expect("loads");
        let frames = ndarray::Array4::<u8>::zeros((2, 32, 32, 3));
        keys.push(CacheKey::new(frames.view(), "plan", &estimator));
    }
    assert_ne!(keys[0], keys[1]);
}

/// `--device` names where a network estimator runs; a name that is no device is refused
/// before any video is read.
#[test]
fn an_unknown_device_is_refused_by_name() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = tempfile::tempdir().expect("tempdir");
    let run = Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(["extract", "--video"])
        .arg(root.join("tests/data/tiny-sft/up-red.mp4"))
        .args(["--motion", "dis", "--device", "gpu7", "--out"])
        .arg(out.path())
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success() && stderr.contains("--device") && stderr.contains("gpu7") && stderr.contains("expected cpu, cuda or cuda:N"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(out.path()).expect("out").count(), 0, "nothing was extracted");
}
