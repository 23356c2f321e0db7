//! The settings of an evaluation run, as a TOML file (`configs/eval/*.toml`) that command-line
//! flags override key by key. Keys are grouped by concern: `[model]`, `[generation]`,
//! `[protocol]`; the defaults are SPEC §2's protocol (at most 32 frames chosen by clip length,
//! 256–512 × 28² pixels per frame, greedy decoding of at most 128 new tokens). One departure is
//! opt-in: `[generation] answer = "likelihood"` answers multiple-choice questions by ranking
//! their options (lmms-eval's `output_type: multiple_choice`) instead of decoding. The
//! top-level `protocol_kind` chooses whose evaluation is reproduced ([`ProtocolKind`]); under
//! `official` and `vllm-baseline` the `[protocol]` section's frame rates and pixel bounds give
//! way to the released code's, and `[official]` holds its frame cap and minimum.

use motionvl_models::device::{DTypeName, DeviceName};
use std::path::{Path, PathBuf};

use candle_core::DType;
use motionvl_data::manifest::ChoiceAnswer;
pub use motionvl_data::media_config::ProtocolConfig;
use motionvl_flow::{FlowError, MotionChoice, WeightPrecision};
use serde::{Deserialize, Serialize};

use crate::error::{EvalError, Result};

/// Everything `evaluate run` needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// `--bench` name (see [`crate::bench::REGISTRY`]).
    #[serde(default)]
    pub bench: String,
    #[serde(default)]
    pub manifest: PathBuf,
    /// The run folder: predictions, `run.json` and the reports.
    #[serde(default)]
    pub out: PathBuf,
    /// Name of the run in reports; default: the run folder's name.
    #[serde(default)]
    pub name: Option<String>,
    /// Folder relative media paths resolve against; default: the manifest's folder.
    #[serde(default)]
    pub media_root: Option<PathBuf>,
    /// Leave out bad manifest rows and questions whose media fail to load, and count them.
    #[serde(default)]
    pub skip_bad: bool,
    /// Continue the predictions already in `out` (required when there are some).
    #[serde(default)]
    pub resume: bool,
    /// Ask only the first N questions of the manifest (and score only those).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub model: ModelConfig,
    #[serde(default)]
    pub generation: GenerationConfig,
    #[serde(default)]
    pub protocol: ProtocolConfig,
    #[serde(default)]
    pub motion: MotionConfig,
    /// The CVAA alignment prior appended to each question (`--cvaa`).
    #[serde(default)]
    pub cvaa: crate::prior::CvaaPriorConfig,
    /// Whose evaluation code the run reproduces (`--protocol`); unset means `paper`, what
    /// every config written before the choice existed meant (`evaluate run` itself picks
    /// `official` for SIS-Bench and the navigation MCQ when neither names one).
    #[serde(default)]
    pub protocol_kind: Option<ProtocolKind>,
    /// How answers are read out of outputs (`--extract`); default: `official` under the
    /// official and vLLM protocols, `motionvl` under the paper's.
    #[serde(default)]
    pub extract: Option<ExtractMode>,
    /// Settings of the official protocol.
    #[serde(default)]
    pub official: OfficialConfig,
}

/// Whose evaluation a run reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProtocolKind {
    /// The authors' released evaluator, `motion/src/eval/eval.py` at `b123237` (how SIS-Motion
    /// is scored): at most 32 frames by floor-linspace over the whole clip,
    /// `second_per_grid_ts` 1.0, 128–512 × 28² pixels per frame, the training prompt without a
    /// newline after the video, greedy decoding with the base model's repetition penalty,
    /// questions with fewer than `min_frames` frames left out, the regex answer cascade and
    /// `uav_accuracy.json` (see [`crate::official`]).
    Official,
    /// SPEC §2 as motionvl read the paper: the `[protocol]` section's frame plan and pixels,
    /// lmms-eval's prompt, plain greedy decoding, motionvl's extractor.
    Paper,
    /// The zero-shot baselines' vLLM evaluation (`eval/src/uav/vqa` of the released code): the
    /// official frames, each a separate image resized by Pillow into 256–512 × 28² pixels
    /// ([`crate::pil`]), the vLLM prompt, greedy decoding with the base model's repetition
    /// penalty, only missing or empty media left out, the same regex cascade.
    VllmBaseline,
}

impl ProtocolKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolKind::Official => "official",
            ProtocolKind::Paper => "paper",
            ProtocolKind::VllmBaseline => "vllm-baseline",
        }
    }

    /// What `evaluate run --bench NAME` uses when neither the flag nor the config names a
    /// protocol: the official one for the benchmarks the official code evaluates.
    pub fn default_for(bench: &str) -> ProtocolKind {
        match crate::bench::find(bench).map(|b| b.name()) {
            Ok("sisbench" | "nav") => ProtocolKind::Official,
            _ => ProtocolKind::Paper,
        }
    }
}

impl std::str::FromStr for ProtocolKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [ProtocolKind::Official, ProtocolKind::Paper, ProtocolKind::VllmBaseline]
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("--protocol {s} is not known; use official, paper or vllm-baseline"))
    }
}

/// How answers are read out of model outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExtractMode {
    /// motionvl's extractor ([`crate::extract`]): abstains on conflicting evidence.
    Motionvl,
    /// The official regex cascade ([`crate::extract::extract_official`]), compared with the
    /// row's `answer` as written.
    Official,
}

impl std::str::FromStr for ExtractMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "motionvl" => Ok(ExtractMode::Motionvl),
            "official" => Ok(ExtractMode::Official),
            _ => Err(format!("--extract {s} is not known; use official or motionvl")),
        }
    }
}

/// The official protocol's numbers (`motion/run_eval.sh`: `--max_frames 32 --min_frames 8`;
/// the vLLM baseline uses `max_frames` too, `eval/run_eval.sh`'s `MAX_FRAMES=32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OfficialConfig {
    /// Frames spread over the whole clip at most.
    pub max_frames: usize,
    /// Questions whose media's header frame count is in `1..min_frames` are left out (a count
    /// of 0, a container that states none, is kept).
    pub min_frames: usize,
}

impl Default for OfficialConfig {
    fn default() -> Self {
        OfficialConfig { max_frames: 32, min_frames: 8 }
    }
}

/// The SIS-Motion branch at evaluation time. A motion-aware checkpoint (a `train sft --motion`
/// checkpoint folder, or a merged model, holding `motion.json` + `motion.safetensors`) is
/// evaluated with the flow estimator it was trained with; naming another one, or `none`, is
/// refused unless `force` is set, since the connector learnt that estimator's flow statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MotionConfig {
    /// Flow estimator by registry name (`--motion`), or `none`; default (absent or empty): the
    /// checkpoint's own, or none for a visual-only checkpoint.
    #[serde(default, deserialize_with = "given_motion")]
    pub estimator: Option<MotionChoice>,
    /// Weights of a network estimator (RAFT) when it needs a file.
    #[serde(default)]
    pub weights: Option<PathBuf>,
    /// Flow cache folder; default `<out>/flow-cache`.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// Every flow must come from the cache (`--flow-cache-only`): a missing entry is an error
    /// naming the video, its frames and the cache, raised before any question is asked.
    #[serde(default)]
    pub cache_only: bool,
    /// Evaluate with a different estimator (or none) than the checkpoint was trained with.
    #[serde(default)]
    pub force: bool,
    /// Evaluate visual-only (`--no-motion`, the same as `--motion none`): required for an
    /// adapter without a motion branch, which is otherwise an error.
    #[serde(default)]
    pub no_motion: bool,
    /// What MOFNet computes with (`--estimator-weights`): `f32` or `bf16-rounded`. Default:
    /// `bf16-rounded` under the official protocol when the model runs in bf16 — the official
    /// `load_model` builds the whole model, MOFNet included, in bf16 and loads `MOF_kitti.pth`
    /// into it before casting MOFNet to f32 (`eval.py:127-131, 161-162`) — else `f32`. Not a
    /// mismatch with the precision a run was trained with: the official training and evaluation
    /// each round by their own dtype.
    #[serde(default)]
    pub estimator_weights: Option<motionvl_flow::WeightPrecision>,
}

/// `--motion` or `[motion] estimator` as given: surrounding space ignored, and an empty name the
/// same as none given (the checkpoint's own estimator).
pub fn parse_motion(text: &str) -> std::result::Result<Option<MotionChoice>, FlowError> {
    match text.trim() {
        "" => Ok(None),
        name => name.parse().map(Some),
    }
}

fn given_motion<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<MotionChoice>, D::Error> {
    match Option::<String>::deserialize(d)? {
        Some(text) => parse_motion(&text).map_err(serde::de::Error::custom),
        None => Ok(None),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// A local checkpoint folder or a hub id (`org/name[@revision]`).
    #[serde(default)]
    pub checkpoint: String,
    /// A PEFT LoRA adapter folder, or a trainer checkpoint folder holding one in `adapter/`.
    #[serde(default)]
    pub adapter: Option<PathBuf>,
    /// `f32`, `bf16` or `f16`; default f32 on the CPU and bf16 on CUDA.
    #[serde(default)]
    pub dtype: Option<DTypeName>,
    /// `cpu`, `cuda` or `cuda:N`.
    #[serde(default)]
    pub device: DeviceName,
    /// How the adapter reaches the model (`--adapter-merge`): `unmerged` (f32 adapters beside
    /// the frozen weights) or `merged` (folded into the weights in the model's dtype, as PEFT's
    /// `merge_and_unload` does). Default: `merged` under the official protocol when the model
    /// runs in bf16 (`eval.py:176-178` merges into the bf16 model), else `unmerged`.
    #[serde(default)]
    pub adapter_merge: Option<AdapterMerge>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig { checkpoint: String::new(), adapter: None, dtype: None, device: DeviceName::Cpu, adapter_merge: None }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationConfig {
    /// Questions decoded together (left-padded, one KV cache).
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    /// SPEC §2: at most 128.
    #[serde(default = "default_max_new")]
    pub max_new_tokens: usize,
    /// How a multiple-choice question is answered: `generate` (SPEC §2's greedy decoding, the
    /// default) or `likelihood` (each option scored as the assistant's answer, the likeliest
    /// chosen; see [`crate::likelihood`]). Open-ended questions are always generated.
    #[serde(default)]
    pub answer: AnswerMode,
    /// What is scored as an option's answer in `likelihood` mode: what the model was trained
    /// to answer with (`text`, the default: "pink silo"; `letter`: "B"; `letter-text`:
    /// "B. pink silo"). The prompt's instruction asks for this form
    /// ([`motionvl_data::manifest::ChoiceAnswer`]), so what is scored is what is asked for.
    #[serde(default)]
    pub likelihood_continuation: Continuation,
    /// How an option's token log-probabilities make its score in `likelihood` mode: `sum`
    /// (the default, lm-evaluation-harness's `acc`: the log-probability of the whole answer)
    /// or `per-token` (their mean, a length-normalised score like its `acc_norm`).
    #[serde(default)]
    pub likelihood_normalisation: Normalisation,
    /// Hugging Face's repetition penalty in greedy decoding; default: the base model's
    /// `generation_config.json` value under the official and vLLM protocols (Qwen2.5-VL's is
    /// 1.05), none under the paper's.
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
}

/// Rejects a value that is not one of `allowed`, naming the key and the allowed values.
fn unknown_value(key: &str, value: &str, allowed: &[&str]) -> String {
    let allowed: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
    format!("{key} = \"{value}\" is not known; use {}", allowed.join(" or "))
}

/// A config value written as one of a few strings: read with an error naming the key and the
/// values allowed, written back as the same string.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident, key = $key:literal,
     { $($(#[$variant_meta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub enum $name {
            $($(#[$variant_meta])* $variant),+
        }

        impl $name {
            /// The value as the config spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(value: String) -> std::result::Result<Self, String> {
                match value.as_str() {
                    $($text => Ok(Self::$variant),)+
                    _ => Err(unknown_value($key, &value, &[$($text),+])),
                }
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.as_str().to_string()
            }
        }
    };
}

string_enum!(
    /// See [`GenerationConfig::answer`].
    AnswerMode, key = "generation.answer", {
        #[default]
        Generate = "generate",
        Likelihood = "likelihood",
    }
);

string_enum!(
    /// See [`GenerationConfig::likelihood_continuation`].
    Continuation, key = "generation.likelihood_continuation", {
        #[default]
        Text = "text",
        Letter = "letter",
        LetterText = "letter-text",
    }
);

string_enum!(
    /// See [`GenerationConfig::likelihood_normalisation`].
    Normalisation, key = "generation.likelihood_normalisation", {
        #[default]
        Sum = "sum",
        PerToken = "per-token",
    }
);

string_enum!(
    /// How a LoRA adapter is applied at evaluation ([`ModelConfig::adapter_merge`]).
    AdapterMerge, key = "model.adapter_merge", {
        /// `x Wᵀ + scale · (x Aᵀ) Bᵀ` with the adapter in f32 at run time.
        #[default]
        Unmerged = "unmerged",
        /// `W ← round(W + scale · B A)` once at load, in the weights' dtype, then plain layers:
        /// PEFT 0.18.1's `merge_and_unload` after `PeftModel.from_pretrained`, which keeps the
        /// adapter in f32 (`autocast_adapter_dtype`), so the f32 delta is added to the bf16
        /// weight and the sum rounded once (`tuners/lora/layer.py` `merge`; checked on
        /// `tests/fixtures/sis_precision`).
        Merged = "merged",
    }
);

impl Continuation {
    /// What a prompt whose options are scored in this form asks for.
    pub fn asked(self) -> ChoiceAnswer {
        match self {
            Continuation::Text => ChoiceAnswer::Text,
            Continuation::Letter => ChoiceAnswer::Letter,
            Continuation::LetterText => ChoiceAnswer::LetterText,
        }
    }
}

fn default_batch() -> usize {
    4
}

fn default_max_new() -> usize {
    128
}

impl Default for GenerationConfig {
    fn default() -> Self {
        Self {
            batch_size: default_batch(),
            max_new_tokens: default_max_new(),
            answer: AnswerMode::default(),
            likelihood_continuation: Continuation::default(),
            likelihood_normalisation: Normalisation::default(),
            repetition_penalty: None,
        }
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            bench: String::new(),
            manifest: PathBuf::new(),
            out: PathBuf::new(),
            name: None,
            media_root: None,
            skip_bad: false,
            resume: false,
            limit: None,
            model: ModelConfig::default(),
            generation: GenerationConfig::default(),
            protocol: ProtocolConfig::default(),
            motion: MotionConfig::default(),
            cvaa: crate::prior::CvaaPriorConfig::default(),
            protocol_kind: None,
            extract: None,
            official: OfficialConfig::default(),
        }
    }
}

impl RunConfig {
    /// Reads a TOML run file; relative paths in it stay relative to the working directory,
    /// like the flags that override them.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(EvalError::io("read", path))?;
        toml::from_str(&text).map_err(|e| EvalError::ConfigFile { path: path.to_path_buf(), reason: e.to_string() })
    }

    /// Checks that the required keys are set and the numbers make sense.
    pub fn validate(&self) -> Result<()> {
        let missing = |what, flag, key| Err(EvalError::Missing { what, flag, key });
        if self.bench.is_empty() {
            return missing("benchmark", "--bench", "bench");
        }
        if self.manifest.as_os_str().is_empty() {
            return missing("manifest", "--manifest", "manifest");
        }
        if self.out.as_os_str().is_empty() {
            return missing("output folder", "--out", "out");
        }
        let bad =
            |key, value: &dyn std::fmt::Display, problem: &str| Err(EvalError::BadValue { key, value: value.to_string(), problem: problem.into() });
        let at_least_one = "must be at least 1";
        for (key, value) in [
            ("generation.batch_size", self.generation.batch_size),
            ("generation.max_new_tokens", self.generation.max_new_tokens),
            ("official.max_frames", self.official.max_frames),
        ] {
            if value == 0 {
                return bad(key, &value, at_least_one);
            }
        }
        if let Some(p) = self.generation.repetition_penalty
            && !(p.is_finite() && p > 0.0)
        {
            return bad("generation.repetition_penalty", &p, "must be a positive number");
        }
        if self.protocol_kind() != ProtocolKind::Paper && self.generation.answer == AnswerMode::Likelihood {
            return Err(EvalError::NotInProtocol {
                protocol: self.protocol_kind().as_str(),
                problem: "decodes its answers; use --protocol paper with [generation] answer = \"likelihood\"",
            });
        }
        if self.protocol.min_pixels > self.protocol.max_pixels {
            let problem = format!("exceeds protocol.max_pixels = {}", self.protocol.max_pixels);
            return bad("protocol.min_pixels", &self.protocol.min_pixels, &problem);
        }
        Ok(())
    }

    /// The protocol of the run (unset: `paper`).
    pub fn protocol_kind(&self) -> ProtocolKind {
        self.protocol_kind.unwrap_or(ProtocolKind::Paper)
    }

    /// The model's dtype: `[model] dtype`, else the default of its device (f32 on the CPU, bf16
    /// on CUDA), read from the device's name so that `flow extract --config` resolves the same
    /// precision on any machine.
    pub fn model_dtype(&self) -> Result<DType> {
        Ok(match self.model.dtype {
            Some(name) => name.dtype(),
            None if self.model.device.is_cpu() => DType::F32,
            None => DType::BF16,
        })
    }

    /// Whether the run reproduces the official evaluation in bf16, the one precision it runs in
    /// (`eval.py:131`): what the official defaults of the precision options key on.
    fn official_bf16(&self, dtype: DType) -> bool {
        self.protocol_kind() == ProtocolKind::Official && dtype == DType::BF16
    }

    /// The adapter's application for a model in `dtype` (see [`ModelConfig::adapter_merge`]).
    pub fn adapter_merge(&self, dtype: DType) -> AdapterMerge {
        self.model.adapter_merge.unwrap_or(if self.official_bf16(dtype) { AdapterMerge::Merged } else { AdapterMerge::Unmerged })
    }

    /// MOFNet's weight precision for a model in `dtype` (see [`MotionConfig::estimator_weights`]).
    pub fn estimator_weights(&self, dtype: DType) -> WeightPrecision {
        self.motion.estimator_weights.unwrap_or(if self.official_bf16(dtype) { WeightPrecision::Bf16Rounded } else { WeightPrecision::F32 })
    }

    /// The answer extraction of the run (see [`RunConfig::extract`]).
    pub fn extract_mode(&self) -> ExtractMode {
        self.extract.unwrap_or(match self.protocol_kind() {
            ProtocolKind::Paper => ExtractMode::Motionvl,
            ProtocolKind::Official | ProtocolKind::VllmBaseline => ExtractMode::Official,
        })
    }

    /// The name of the run in reports.
    pub fn run_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "run".to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_spec_protocol() {
        let cfg: RunConfig = toml::from_str("bench = \"sisbench\"").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.protocol.max_frames, 32);
        assert_eq!((cfg.protocol.min_pixels, cfg.protocol.max_pixels), (256 * 28 * 28, 512 * 28 * 28));
        assert_eq!(cfg.generation.max_new_tokens, 128);
        assert_eq!(cfg.model.device, DeviceName::Cpu);
    }

    /// The official protocol in bf16 merges the adapter and rounds MOFNet, as `eval.py` does in
    /// the one dtype it runs in; f32, another protocol, or an explicit choice keep what is asked.
    #[test]
    fn precision_options_follow_the_official_bf16_evaluation() {
        let read = |text: &str| toml::from_str::<RunConfig>(text).unwrap_or_else(|e| panic!("{e}"));
        let official_cuda = read("protocol_kind = \"official\"\n[model]\ndevice = \"cuda\"");
        let dtype = official_cuda.model_dtype().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dtype, DType::BF16);
        assert_eq!(official_cuda.adapter_merge(dtype), AdapterMerge::Merged);
        assert_eq!(official_cuda.estimator_weights(dtype), WeightPrecision::Bf16Rounded);
        let official_cpu = read("protocol_kind = \"official\"");
        let dtype = official_cpu.model_dtype().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (dtype, official_cpu.adapter_merge(dtype), official_cpu.estimator_weights(dtype)),
            (DType::F32, AdapterMerge::Unmerged, WeightPrecision::F32)
        );
        let paper_bf16 = read("protocol_kind = \"paper\"\n[model]\ndtype = \"bf16\"");
        assert_eq!(
            (paper_bf16.adapter_merge(DType::BF16), paper_bf16.estimator_weights(DType::BF16)),
            (AdapterMerge::Unmerged, WeightPrecision::F32)
        );
        let chosen =
            read("protocol_kind = \"official\"\n[model]\ndtype = \"bf16\"\nadapter_merge = \"unmerged\"\n[motion]\nestimator_weights = \"f32\"");
        assert_eq!((chosen.adapter_merge(DType::BF16), chosen.estimator_weights(DType::BF16)), (AdapterMerge::Unmerged, WeightPrecision::F32));
        let chosen = read("[model]\nadapter_merge = \"merged\"\n[motion]\nestimator_weights = \"bf16-rounded\"");
        assert_eq!((chosen.adapter_merge(DType::F32), chosen.estimator_weights(DType::F32)), (AdapterMerge::Merged, WeightPrecision::Bf16Rounded));
        let err = toml::from_str::<RunConfig>("[model]\nadapter_merge = \"folded\"").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("folded") && err.contains("merged"), "{err}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = toml::from_str::<RunConfig>("[generation]\nmax_tokens = 3").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("max_tokens"), "{err}");
    }

    #[test]
    fn answer_mode_defaults_to_generation_and_reads_likelihood_settings() {
        let cfg: RunConfig = toml::from_str("bench = \"sisbench\"").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.generation.answer, AnswerMode::Generate);
        let cfg: RunConfig = toml::from_str(
            "[generation]\nanswer = \"likelihood\"\nlikelihood_continuation = \"letter-text\"\nlikelihood_normalisation = \"per-token\"",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.generation.answer, AnswerMode::Likelihood);
        assert_eq!(cfg.generation.likelihood_continuation, Continuation::LetterText);
        assert_eq!(cfg.generation.likelihood_normalisation, Normalisation::PerToken);
        // Written back as it was read (run.json and the demo's resolved config keep the words).
        let text = toml::to_string(&cfg.generation).unwrap_or_else(|e| panic!("{e}"));
        assert!(text.contains("answer = \"likelihood\"") && text.contains("\"per-token\""), "{text}");
    }

    #[test]
    fn unknown_answer_values_are_refused_naming_the_key() {
        for (key, value) in [("answer", "loglikelihood"), ("likelihood_continuation", "letters"), ("likelihood_normalisation", "mean")] {
            let err = toml::from_str::<RunConfig>(&format!("[generation]\n{key} = \"{value}\"")).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(&format!("generation.{key} = \"{value}\" is not known")), "{err}");
        }
    }
}
