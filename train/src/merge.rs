//! `train merge`: fold a LoRA adapter into its base weights and write a checkpoint in the hub
//! layout (sharded safetensors, index, config and the tokenizer/processor files), which the
//! loader — and transformers — read like any other.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{Device, Tensor};
use motionvl_models::lora::LoraWeights;
use motionvl_models::{CheckpointFiles, CheckpointWeights};

use crate::checkpoint as ckpt;
use crate::sft::TrainError;

/// Files copied from the base checkpoint when present: what transformers' tokenizer,
/// processor and generation read beside the weights.
const SIDE_FILES: [&str; 11] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    "chat_template.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
];

#[derive(Debug, Clone, PartialEq)]
pub struct MergeSummary {
    pub shards: usize,
    pub tensors: usize,
    pub merged_modules: usize,
    pub bytes: usize,
}

/// Whether `name` is a file `train merge` writes: what a previous merge left in `--out`.
fn is_merge_output(name: &str) -> bool {
    let shard = name.starts_with("model") && (name.ends_with(".safetensors") || name == "model.safetensors.index.json");
    let motion = [motionvl_models::motion::MOTION_META_FILE, motionvl_models::motion::MOTION_WEIGHTS_FILE].contains(&name);
    shard || motion || SIDE_FILES.contains(&name)
}

/// Merges `adapter` into `base` and writes the result to `out` (created atomically). `out` must
/// be absent, empty or a previous merge's output.
pub fn merge(base: &CheckpointFiles, adapter: &Path, out: &Path, max_shard_bytes: usize) -> Result<MergeSummary, TrainError> {
    let tmp = crate::output_dir::prepare(out, "merge", is_merge_output)?;
    let device = Device::Cpu;
    let weights = CheckpointWeights::open(&base.weights)?;
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    for name in weights.names() {
        tensors.insert(name.to_owned(), weights.load_stored(name, &device)?);
    }
    let adapter = crate::hf_layout::adapter_dir(adapter)
        .ok_or_else(|| TrainError::NoAdapter { dir: adapter.to_path_buf(), hint: "; pass a run's checkpoint-N, its root, or a PEFT folder" })?;
    let lora = LoraWeights::load_peft(&adapter, &device)?;
    lora.merge_into(&mut tensors)?;

    // Fill shards in name order up to the size limit, as save_pretrained does.
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut shards: Vec<Vec<&String>> = vec![vec![]];
    let mut current = 0usize;
    for name in names {
        let bytes = tensors[name].elem_count() * tensors[name].dtype().size_in_bytes();
        if current > 0 && current + bytes > max_shard_bytes {
            shards.push(vec![]);
            current = 0;
        }
        current += bytes;
        if let Some(s) = shards.last_mut() {
            s.push(name)
        }
    }
    let count = shards.len();
    let mut weight_map = BTreeMap::new();
    let mut total = 0usize;
    for (i, shard) in shards.iter().enumerate() {
        let file = if count == 1 { "model.safetensors".to_owned() } else { format!("model-{:05}-of-{count:05}.safetensors", i + 1) };
        let part: HashMap<String, Tensor> = shard.iter().map(|n| ((*n).clone(), tensors[*n].clone())).collect();
        total += part.values().map(|t| t.elem_count() * t.dtype().size_in_bytes()).sum::<usize>();
        ckpt::save_tensors(tmp.join(&file), &part)?;
        for name in shard {
            weight_map.insert((*name).clone(), file.clone());
        }
    }
    if count > 1 {
        let index = serde_json::json!({ "metadata": { "total_size": total }, "weight_map": weight_map });
        ckpt::save_json(tmp.join("model.safetensors.index.json"), &index)?;
    }
    for file in SIDE_FILES {
        let src = base.dir.join(file);
        if src.is_file() {
            std::fs::copy(&src, tmp.join(file)).map_err(|source| TrainError::Io { path: src.clone(), source })?;
        }
    }
    // A motion-aware adapter's connector cannot be folded into the language model: it travels
    // beside the merged weights, where evaluation finds it.
    let run_checkpoint = crate::hf_layout::checkpoint_of_adapter(&adapter);
    for file in [motionvl_models::motion::MOTION_META_FILE, motionvl_models::motion::MOTION_WEIGHTS_FILE] {
        let src = run_checkpoint.join(file);
        if src.is_file() {
            std::fs::copy(&src, tmp.join(file)).map_err(|source| TrainError::Io { path: src.clone(), source })?;
        }
    }
    crate::output_dir::replace(&tmp, out)?;
    Ok(MergeSummary { shards: count, tensors: tensors.len(), merged_modules: lora.modules.len(), bytes: total })
}
