//! The video settings of the config files users already have — a training recipe's `[data]`
//! section and an evaluation config's `[protocol]` section — and the [`QwenMedia`] they mean.
//!
//! Training, evaluation and `flow extract --config` all build their media from these, so flows
//! extracted ahead of time are computed on exactly the frames the vision tower will see.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::frames::{EvalProtocol, FramePolicy, TrainingPlan};
use crate::loader::QwenMedia;
use crate::preprocess::PreprocessConfig;
use crate::sampling::Sampling;

/// The video keys of a training recipe's `[data]` section (SPEC §1 defaults: 2 FPS, 8–32
/// frames, 128–512 × 28² pixels per frame).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainingVideo {
    pub fps: f64,
    pub min_frames: usize,
    pub max_frames: usize,
    pub min_pixels: usize,
    pub max_pixels: usize,
    pub sampling: Sampling,
}

impl Default for TrainingVideo {
    fn default() -> Self {
        let plan = TrainingPlan::default();
        let pixels = PreprocessConfig::sis_motion_training();
        TrainingVideo {
            fps: plan.fps,
            min_frames: plan.min_frames,
            max_frames: plan.max_frames,
            min_pixels: pixels.min_pixels,
            max_pixels: pixels.max_pixels,
            sampling: plan.sampling,
        }
    }
}

impl TrainingVideo {
    /// Videos and images of a training run (Qwen2.5-VL's patch sizes and normalisation).
    pub fn media(&self) -> QwenMedia {
        let plan = TrainingPlan { fps: self.fps, min_frames: self.min_frames, max_frames: self.max_frames, sampling: self.sampling };
        let pixels = PreprocessConfig { min_pixels: self.min_pixels, max_pixels: self.max_pixels, ..PreprocessConfig::default() };
        QwenMedia { video_policy: FramePolicy::Training(plan), video_config: pixels.clone(), image_config: pixels, ..QwenMedia::default() }
    }
}

/// Frame plan and pixel bounds of an evaluation. The frame keys are those of
/// [`EvalProtocol`], spelled out so that a misspelt key is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProtocolConfig {
    /// Clips shorter than this (seconds) are sampled at `short_fps`.
    pub short_below_s: f64,
    pub short_fps: f64,
    /// Clips up to this length (seconds) are sampled at `medium_fps`; longer ones get
    /// `max_frames` frames spread evenly.
    pub medium_up_to_s: f64,
    pub medium_fps: f64,
    /// Cap on the frames of any clip.
    pub max_frames: usize,
    /// Lower bound on height × width per frame or image.
    pub min_pixels: usize,
    /// Upper bound on height × width per frame or image.
    pub max_pixels: usize,
    /// `qwen-vl-utils` (default), `transformers` or `rate-exact`: see [`Sampling`].
    pub sampling: Sampling,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        let frames = EvalProtocol::default();
        let pixels = PreprocessConfig::sisbench_eval();
        Self {
            short_below_s: frames.short_below_s,
            short_fps: frames.short_fps,
            medium_up_to_s: frames.medium_up_to_s,
            medium_fps: frames.medium_fps,
            max_frames: frames.max_frames,
            min_pixels: pixels.min_pixels,
            max_pixels: pixels.max_pixels,
            sampling: frames.sampling,
        }
    }
}

impl ProtocolConfig {
    pub fn frames(&self) -> EvalProtocol {
        EvalProtocol {
            short_below_s: self.short_below_s,
            short_fps: self.short_fps,
            medium_up_to_s: self.medium_up_to_s,
            medium_fps: self.medium_fps,
            max_frames: self.max_frames,
            sampling: self.sampling,
        }
    }

    pub fn frame_policy(&self) -> FramePolicy {
        FramePolicy::SisbenchEval(self.frames())
    }

    /// The checkpoint's preprocessing (patch size, normalisation) with the protocol's pixel
    /// bounds.
    pub fn preprocess(&self, base: &PreprocessConfig) -> PreprocessConfig {
        PreprocessConfig { min_pixels: self.min_pixels, max_pixels: self.max_pixels, ..base.clone() }
    }

    /// Videos and images of an evaluation with the checkpoint's preprocessing `base`.
    pub fn media(&self, base: &PreprocessConfig) -> QwenMedia {
        let pixels = self.preprocess(base);
        QwenMedia { video_policy: self.frame_policy(), video_config: pixels.clone(), image_config: pixels, ..QwenMedia::default() }
    }
}

/// What a recipe or an evaluation config says about video and flow.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigMedia {
    /// `training recipe` or `evaluation config`, for messages.
    pub kind: &'static str,
    pub media: QwenMedia,
    /// `[motion] estimator`, `weights` and `cache_dir` as written (none when absent).
    pub estimator: Option<String>,
    pub weights: Option<PathBuf>,
    pub cache_dir: Option<PathBuf>,
    /// Where the run writes: the recipe's `output_dir` or the evaluation's `out`.
    pub run_dir: Option<PathBuf>,
    /// A recipe's `[data] max_seq_len`, which training fits long samples to (evaluation never
    /// truncates).
    pub max_seq_len: Option<usize>,
    /// Where the model's tokenizer is, which fitting needs to count tokens.
    pub tokenizer: TokenizerSource,
    /// The folder relative media paths resolve against (`[data] media_root` or `media_root`).
    pub media_root: Option<PathBuf>,
}

/// Where a config's tokenizer comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenizerSource {
    /// A local checkpoint folder holding `tokenizer.json`.
    Dir(PathBuf),
    /// A hub id (`org/name[@revision]`), found in the Hugging Face cache.
    Hub(String),
    /// A model trained from scratch: `train sft` trains its tokenizer on the training text
    /// (vocabulary `vocab`) and keeps it in `base_dir`.
    Fresh { base_dir: PathBuf, vocab: usize },
    Unknown,
}

impl ConfigMedia {
    /// The flow cache folder the run itself would use: `[motion] cache_dir`, else
    /// `<run dir>/flow-cache`.
    pub fn default_cache(&self) -> Option<PathBuf> {
        self.cache_dir.clone().or_else(|| self.run_dir.as_ref().map(|d| d.join("flow-cache")))
    }
}

#[derive(Deserialize, Default)]
struct MotionKeys {
    estimator: Option<String>,
    weights: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
}

/// The flow estimator a motion-aware checkpoint was trained with: `estimator` of the
/// `motion.json` beside the adapter, in its parent (a trainer checkpoint) or in the model
/// folder — where `evaluate run` finds it.
fn trained_estimator(checkpoint: Option<&Path>, adapter: Option<&Path>) -> Option<String> {
    let mut dirs: Vec<&Path> = Vec::new();
    if let Some(a) = adapter {
        dirs.push(a);
        dirs.extend(a.parent());
    }
    dirs.extend(checkpoint);
    dirs.iter().find_map(|d| {
        let text = std::fs::read_to_string(d.join("motion.json")).ok()?;
        let meta: serde_json::Value = serde_json::from_str(&text).ok()?;
        meta.get("estimator")?.as_str().map(str::to_owned)
    })
}

/// Reads the video settings of a training recipe (it has `[data] train`) or of an evaluation
/// config (anything else). An evaluation uses the preprocessing of its `[model] checkpoint`
/// when that is a local folder with a `preprocessor_config.json`, else Qwen2.5-VL's.
pub fn media_from_config(path: &Path) -> Result<ConfigMedia, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let section = |name: &str| table.get(name).cloned().unwrap_or_else(|| toml::Value::Table(Default::default()));
    let bad = |what: &str, e: toml::de::Error| format!("{}: [{what}] {e}", path.display());
    let motion: MotionKeys = section("motion").try_into().map_err(|e| bad("motion", e))?;
    let estimator = motion.estimator.filter(|e| e != "none");
    let is_recipe = table.get("data").and_then(|d| d.get("train")).is_some();
    let model = |key: &str| table.get("model").and_then(|m| m.get(key)).cloned();
    let checkpoint = model("checkpoint").and_then(|c| c.as_str().map(str::to_owned));
    let checkpoint_source = |id: String| if Path::new(&id).is_dir() { TokenizerSource::Dir(PathBuf::from(id)) } else { TokenizerSource::Hub(id) };
    if is_recipe {
        let video: TrainingVideo = section("data").try_into().map_err(|e| bad("data", e))?;
        let run_dir = table.get("output_dir").and_then(|v| v.as_str()).map(PathBuf::from);
        let max_seq_len = table.get("data").and_then(|d| d.get("max_seq_len")).and_then(|v| v.as_integer()).map_or(2048, |v| v.max(0) as usize);
        let tokenizer = match (model("init_config"), checkpoint, &run_dir) {
            (Some(_), _, Some(dir)) => TokenizerSource::Fresh {
                base_dir: dir.join("base-model"),
                vocab: model("init_vocab_size").and_then(|v| v.as_integer()).map_or(512, |v| v.max(0) as usize),
            },
            (None, Some(id), _) => checkpoint_source(id),
            _ => TokenizerSource::Unknown,
        };
        return Ok(ConfigMedia {
            kind: "training recipe",
            media: video.media(),
            estimator,
            weights: motion.weights,
            cache_dir: motion.cache_dir,
            run_dir,
            max_seq_len: Some(max_seq_len),
            tokenizer,
            media_root: table.get("data").and_then(|d| d.get("media_root")).and_then(|v| v.as_str()).map(PathBuf::from),
        });
    }
    let (kind, media, run_dir) = {
        let protocol: ProtocolConfig = section("protocol").try_into().map_err(|e| bad("protocol", e))?;
        let base = match checkpoint.as_ref().map(|c| Path::new(c).join("preprocessor_config.json")).filter(|p| p.is_file()) {
            Some(file) => PreprocessConfig::from_json_file(&file).map_err(|e| format!("{}: {e}", file.display()))?,
            None => PreprocessConfig::default(),
        };
        ("evaluation config", protocol.media(&base), table.get("out").and_then(|v| v.as_str()).map(PathBuf::from))
    };
    let adapter = model("adapter").and_then(|a| a.as_str().map(PathBuf::from));
    let estimator = estimator.or_else(|| trained_estimator(checkpoint.as_deref().map(Path::new), adapter.as_deref()));
    let tokenizer = checkpoint.map_or(TokenizerSource::Unknown, checkpoint_source);
    let media_root = table.get("media_root").and_then(|v| v.as_str()).map(PathBuf::from);
    Ok(ConfigMedia { kind, media, estimator, weights: motion.weights, cache_dir: motion.cache_dir, run_dir, max_seq_len: None, tokenizer, media_root })
}
