//! Inference: turning questions into prompts and pixels ([`Prepare`]) and prompts into text
//! ([`Generate`]).
//!
//! The two halves are apart so the runner can prepare batch k+1 (video decoding, resizing,
//! tokenising — CPU work, on rayon's threads) while the model decodes batch k. They are traits so
//! that anything that answers questions can be evaluated the same way: the Qwen2.5-VL model
//! here ([`QwenPreparer`] + [`QwenGenerator`]), or a caller's own backend.
//!
//! With `[generation] answer = "likelihood"` the preparer also tokenises each option as the
//! assistant's answer and the generator ranks them ([`crate::likelihood`]) instead of decoding.

use std::path::{Path, PathBuf};

use candle_core::Device;
use motionvl_data::frames::FramePolicy;
use motionvl_data::loader::{PixelInput as DataPixels, QwenMedia};
use motionvl_data::manifest::{AnswerOption, ChoiceAnswer};
use motionvl_data::preprocess::{PreprocessConfig, normalize_image_resized};
use motionvl_data::processor::{ModelFamily, ModelProcessor};
use motionvl_data::text::{EncodedPrompt, Message, QwenTokenizer, TemplateOptions};
use motionvl_flow::media::MotionMedia;
use motionvl_flow::mofnet::{MofConfig, MofNetEstimator};
use motionvl_flow::{
    EstimatorName, EstimatorSpec, FlowCache, FlowEstimator, MotionChoice, PseudoImageConfig, estimator_from_spec, settings_without_precision,
};
use motionvl_models::backbone::Backbone;
use motionvl_models::lora::LoraWeights;
use motionvl_models::motion::{MotionBranch, MotionMeta, qwen3_features, vision_features};
use motionvl_models::qwen25vl::{GenerateOptions, Padding, PixelInput, PromptBatch, RepetitionPenalty, VisionInputs};
use motionvl_models::sis_package::SisPackage;
use motionvl_models::{CheckpointFiles, HubOptions};
use rayon::prelude::*;

use crate::bench::Bench;
use crate::config::{AdapterMerge, AnswerMode, Continuation, Normalisation, ProtocolKind, RunConfig};
use crate::error::{Bookkeeping, EvalError, Result};
use crate::item::Item;
use crate::likelihood::{OptionRow, best, chosen_output, encode_options, option_log_likelihoods};
use crate::official::{GenerationDefaults, OfficialRows};

/// One question ready for a model.
#[derive(Debug, Clone)]
pub struct PreparedQuestion {
    pub id: String,
    /// The user turn as text (media tags included), kept for backends that take text.
    pub prompt_text: String,
    /// The tokenised chat prompt (empty for text-only preparers).
    pub prompt: Option<EncodedPrompt>,
    /// Images and videos in prompt order.
    pub images: Vec<DataPixels>,
    pub videos: Vec<DataPixels>,
    /// Flow pseudo-image pixels of each video, on its grid (motion-aware models only).
    pub motion: Vec<DataPixels>,
    /// Each option tokenised as the answer, when options are ranked by likelihood (empty when
    /// the question is answered by generation).
    pub option_rows: Vec<OptionRow>,
}

/// A batch of questions ready for a model, and those that could not be prepared.
#[derive(Debug, Clone, Default)]
pub struct PreparedBatch {
    pub questions: Vec<PreparedQuestion>,
    /// `(question id, why)` of questions left out under `--skip-bad`.
    pub failed: Vec<(String, String)>,
}

/// Makes model inputs from questions. Runs on a worker thread, hence `Sync`.
pub trait Prepare: Sync {
    fn prepare(&self, items: &[&Item]) -> Result<PreparedBatch>;

    /// Checks before the first question that everything `items` need is at hand (a
    /// cache-only run's flows); the default has nothing to check.
    fn check_ready(&self, _items: &[&Item]) -> Result<()> {
        Ok(())
    }

    /// Flow cache `(hits, computed, repaired)` so far, when the preparer computes motion.
    fn flow_cache_counts(&self) -> Option<(usize, usize, usize)> {
        None
    }
}

/// A question's answer: the raw output, and the scores its option was chosen by.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub text: String,
    /// `(option letter, score)` of every option, when the answer was chosen by likelihood.
    pub option_scores: Option<Vec<(char, f64)>>,
    /// The generated token ids (the stop id included), when the backend decodes tokens.
    pub output_ids: Option<Vec<u32>>,
}

/// Answers a prepared batch: one raw output per question, in order.
pub trait Generate {
    fn generate(&mut self, batch: &PreparedBatch) -> Result<Vec<String>>;

    /// The answers with what they were chosen by; the default has only the texts.
    fn answer(&mut self, batch: &PreparedBatch) -> Result<Vec<Answer>> {
        Ok(self.generate(batch)?.into_iter().map(|text| Answer { text, option_scores: None, output_ids: None }).collect())
    }
}

/// Prompts and pixels for Qwen2.5-VL: the benchmark's prompt in the chat template, media
/// decoded with the evaluation frame plan and preprocessed with the protocol's pixel bounds.
pub struct QwenPreparer {
    pub bench: &'static dyn Bench,
    pub tokenizer: QwenTokenizer,
    pub media: QwenMedia,
    pub template: TemplateOptions,
    /// Flow → pseudo-images for every video, when the model is motion-aware.
    pub motion: Option<MotionMedia>,
    /// Leave out (and report) questions whose media or prompt fail, instead of stopping.
    pub skip_bad: bool,
    /// The answer form to tokenise each option in, when options are ranked by likelihood
    /// (`None`: every question is generated).
    pub likelihood: Option<Continuation>,
    /// The manifest's rows as written, when questions are asked as a released evaluator asks
    /// them ([`crate::official`]).
    pub official: Option<OfficialRows>,
    /// Which evaluator's prompt and media: the official one's video with
    /// `second_per_grid_ts` 1.0, or the vLLM baseline's one image per frame.
    pub protocol: ProtocolKind,
}

/// `second_per_grid_ts` of every official video.
const OFFICIAL_SECOND_PER_GRID: f64 = 1.0;

impl QwenPreparer {
    fn prepare_one(&self, item: &Item) -> Result<PreparedQuestion> {
        if self.protocol == ProtocolKind::VllmBaseline {
            return self.prepare_vllm(item);
        }
        let media_error = |path: &Path, e: &dyn std::fmt::Display| EvalError::Media {
            file: item.file.clone(),
            line: item.line,
            id: item.id.clone(),
            message: format!("{}: {e}", path.display()),
        };
        let (mut videos, motion): (Vec<DataPixels>, Vec<DataPixels>) = match &self.motion {
            Some(m) => item
                .videos
                .iter()
                .map(|p| m.load_video_with_motion(p).map_err(|e| media_error(p, &e)))
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .unzip(),
            None => {
                let videos = item.videos.iter().map(|p| self.media.load_video(p).map_err(|e| media_error(p, &e))).collect::<Result<Vec<_>>>()?;
                (videos, Vec::new())
            }
        };
        let images = item.images.iter().map(|p| self.media.load_image(p).map_err(|e| media_error(p, &e))).collect::<Result<Vec<_>>>()?;
        // A ranked question's prompt asks for the form its options are scored in.
        let ranked_as = match self.likelihood {
            Some(form) if crate::bench::ranked(self.bench, item)? => Some(form),
            _ => None,
        };
        let prompt_text = match &self.official {
            Some(rows) => {
                // The processor's default fps 2 over temporal patches of 2 frames, whatever
                // the clip's rate (`eval.py:243-248`).
                for video in &mut videos {
                    video.second_per_grid = Some(OFFICIAL_SECOND_PER_GRID);
                }
                crate::official::prompt(&rows.row(item)?, item)
            }
            None => self.bench.prompt_asking(item, ranked_as.map_or(ChoiceAnswer::Letter, Continuation::asked)),
        };
        let image_grids: Vec<[usize; 3]> = images.iter().map(|p| p.grid_thw).collect();
        let video_grids: Vec<[usize; 3]> = videos.iter().map(|p| p.grid_thw).collect();
        let video_seconds: Vec<Vec<f64>> = videos.iter().map(|p| p.grid_seconds.clone()).collect();
        let prompt = self
            .tokenizer
            .encode_prompt_timed(&item.id, &[Message::user(prompt_text.clone())], &image_grids, &video_grids, &video_seconds, &self.template)
            .map_err(|source| prompt_error(item, source))?;
        let option_rows = match ranked_as {
            Some(form) => {
                let (grids, seconds) = (&video_grids, &video_seconds);
                encode_options(&self.tokenizer, &item.id, &prompt_text, &prompt, &item.options, &image_grids, grids, seconds, &self.template, form)
                    .map_err(|source| prompt_error(item, source))?
            }
            _ => Vec::new(),
        };
        Ok(PreparedQuestion { id: item.id.clone(), prompt_text, prompt: Some(prompt), images, videos, motion, option_rows })
    }

    /// A question as the vLLM baseline asks it: every planned frame of its video a separate
    /// image through [`crate::pil::vllm_frame`], the vLLM prompt.
    fn prepare_vllm(&self, item: &Item) -> Result<PreparedQuestion> {
        let rows = self.official.as_ref().ok_or(EvalError::NotInProtocol {
            protocol: ProtocolKind::VllmBaseline.as_str(),
            problem: "reads the manifest's rows as written, and none were read",
        })?;
        let row = rows.row(item)?;
        let mut images = Vec::new();
        for path in &item.videos {
            let media_error = |e: &dyn std::fmt::Display| EvalError::Media {
                file: item.file.clone(),
                line: item.line,
                id: item.id.clone(),
                message: format!("{}: {e}", path.display()),
            };
            let (_, decoded) = self.media.source(path).load(&self.media.video_policy, &self.media.decode).map_err(|e| media_error(&e))?;
            for frame in decoded.frames.outer_iter() {
                let resized = crate::pil::vllm_frame(frame).map_err(|e| media_error(&e))?;
                let vision = normalize_image_resized(resized.view(), &self.media.image_config).map_err(|e| media_error(&e))?;
                images.push(DataPixels {
                    pixel_values: vision.pixel_values,
                    grid_thw: vision.grid_thw,
                    second_per_grid: None,
                    grid_seconds: Vec::new(),
                });
            }
        }
        let prompt_text = crate::official::vllm_prompt(&row, images.len());
        let image_grids: Vec<[usize; 3]> = images.iter().map(|p| p.grid_thw).collect();
        let prompt = self
            .tokenizer
            .encode_prompt(&item.id, &[Message::user(prompt_text.clone())], &image_grids, &[], &self.template)
            .map_err(|source| prompt_error(item, source))?;
        Ok(PreparedQuestion {
            id: item.id.clone(),
            prompt_text,
            prompt: Some(prompt),
            images,
            videos: Vec::new(),
            motion: Vec::new(),
            option_rows: Vec::new(),
        })
    }
}

fn prompt_error(item: &Item, source: motionvl_data::text::TextError) -> EvalError {
    EvalError::Prompt { file: item.file.clone(), line: item.line, id: item.id.clone(), source: Box::new(source) }
}

impl Prepare for QwenPreparer {
    fn check_ready(&self, items: &[&Item]) -> Result<()> {
        let Some(motion) = self.motion.as_ref().filter(|m| m.cache_only) else { return Ok(()) };
        let videos: Vec<&Path> = items.iter().flat_map(|i| i.videos.iter().map(PathBuf::as_path)).collect();
        videos.par_iter().try_for_each(|video| {
            let input = motion.flow_input(video)?;
            match motion.cache.as_ref().map(|c| c.get(&input.key)) {
                Some(Ok(Some(_))) => Ok(()),
                Some(Err(e)) => Err(e.into()),
                _ => Err(motion.miss_error(video, &input).into()),
            }
        })
    }

    fn flow_cache_counts(&self) -> Option<(usize, usize, usize)> {
        self.motion.as_ref().map(|m| m.counts.snapshot())
    }

    fn prepare(&self, items: &[&Item]) -> Result<PreparedBatch> {
        let results: Vec<Result<PreparedQuestion>> = items.par_iter().map(|item| self.prepare_one(item)).collect();
        let mut batch = PreparedBatch::default();
        for (item, r) in items.iter().zip(results) {
            match r {
                Ok(q) => batch.questions.push(q),
                Err(e @ (EvalError::Media { .. } | EvalError::Prompt { .. } | EvalError::OfficialRow { .. })) if self.skip_bad => {
                    batch.failed.push((item.id.clone(), e.to_string()));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(batch)
    }
}

/// Batched greedy decoding with Qwen2.5-VL or Qwen3-VL (KV cache, left-padded rows decoded in
/// lockstep), or, for questions prepared with option rows, the likeliest option (Qwen2.5-VL).
pub struct QwenGenerator {
    pub model: Backbone,
    /// The SIS-Motion branch whose fused tokens replace the video tokens, when motion-aware.
    pub motion: Option<MotionBranch>,
    pub tokenizer: QwenTokenizer,
    pub device: Device,
    pub max_new_tokens: usize,
    /// How option log-likelihoods become scores (questions with option rows only).
    pub likelihood_normalisation: Normalisation,
    /// Hugging Face's repetition penalty, applied before every argmax (`None`: plain greedy).
    pub repetition_penalty: Option<f32>,
    /// Ids that end a row's generation; default `<|im_end|>` (the end of the assistant turn)
    /// and `<|endoftext|>`.
    pub stop_ids: Option<Vec<u32>>,
}

impl QwenGenerator {
    fn stop_ids(&self) -> Vec<u32> {
        let s = self.tokenizer.special();
        self.stop_ids.clone().unwrap_or_else(|| vec![s.im_end, s.endoftext])
    }
}

impl Generate for QwenGenerator {
    fn generate(&mut self, batch: &PreparedBatch) -> Result<Vec<String>> {
        Ok(self.answer(batch)?.into_iter().map(|a| a.text).collect())
    }

    fn answer(&mut self, batch: &PreparedBatch) -> Result<Vec<Answer>> {
        // Questions with option rows are ranked one by one; the rest decode together.
        let mut answers: Vec<Option<Answer>> = vec![None; batch.questions.len()];
        let mut generated: Vec<usize> = Vec::new();
        for (i, q) in batch.questions.iter().enumerate() {
            if q.option_rows.is_empty() {
                generated.push(i);
            } else {
                answers[i] = Some(self.likeliest_option(q)?);
            }
        }
        let questions: Vec<&PreparedQuestion> = generated.iter().map(|&i| &batch.questions[i]).collect();
        for (&i, (text, ids)) in generated.iter().zip(self.greedy(&questions)?) {
            answers[i] = Some(Answer { text, option_scores: None, output_ids: Some(ids) });
        }
        answers.into_iter().zip(&batch.questions).map(|(a, q)| a.ok_or_else(|| EvalError::Bookkeeping(Bookkeeping::NoAnswer(q.id.clone())))).collect()
    }
}

impl QwenGenerator {
    /// Ranks a question's options by their log-likelihood as its answer.
    fn likeliest_option(&self, q: &PreparedQuestion) -> Result<Answer> {
        let pad_id = self.tokenizer.special().endoftext;
        let media = (q.images.as_slice(), q.videos.as_slice(), q.motion.as_slice());
        let likelihoods = option_log_likelihoods(&self.model, self.motion.as_ref(), &q.option_rows, media, pad_id, &self.device)?;
        let scores: Vec<f64> = likelihoods.iter().map(|l| l.score(self.likelihood_normalisation)).collect();
        let options: Vec<&AnswerOption> = q.option_rows.iter().map(|r| &r.option).collect();
        let chosen = best(&scores).ok_or_else(|| EvalError::NoFiniteScore { question: q.id.clone(), scores: scores.clone() })?;
        Ok(Answer {
            text: chosen_output(options[chosen]),
            option_scores: Some(options.iter().map(|o| o.label).zip(scores).collect()),
            output_ids: None,
        })
    }

    /// Greedy decoding of a batch of questions, left-padded and decoded together: each one's
    /// text and generated ids.
    fn greedy(&self, questions: &[&PreparedQuestion]) -> Result<Vec<(String, Vec<u32>)>> {
        if questions.is_empty() {
            return Ok(Vec::new());
        }
        let prompts: Vec<&EncodedPrompt> = questions
            .iter()
            .map(|q| q.prompt.as_ref().ok_or_else(|| EvalError::Bookkeeping(Bookkeeping::NotTokenised(q.id.clone()))))
            .collect::<Result<_>>()?;
        let tokens: Vec<(&[u32], &[u8])> = prompts.iter().map(|p| (p.input_ids.as_slice(), p.mm_token_type_ids.as_slice())).collect();
        let rows = PromptBatch::padded(&tokens, self.tokenizer.special().endoftext, Padding::Left);
        let dtype = self.model.text().embedding_weight().dtype();
        let images: Vec<&DataPixels> = questions.iter().flat_map(|q| &q.images).collect();
        let videos: Vec<&DataPixels> = questions.iter().flat_map(|q| &q.videos).collect();
        let vision = VisionInputs {
            images: PixelInput::stack(&images, &self.device, dtype)?,
            videos: PixelInput::stack(&videos, &self.device, dtype)?,
            video_seconds_per_grid: videos.iter().map(|v| v.second_per_grid.unwrap_or(1.0)).collect(),
        };
        let options = GenerateOptions { max_new_tokens: self.max_new_tokens, stop_ids: self.stop_ids(), keep_logits: false };
        let motion = match &self.motion {
            Some(_) => {
                let motion: Vec<&DataPixels> = questions.iter().flat_map(|q| &q.motion).collect();
                if motion.len() != videos.len() {
                    return Err(EvalError::MotionPixels { videos: videos.len(), with_motion: motion.len() });
                }
                PixelInput::stack(&motion, &self.device, dtype)?
            }
            None => None,
        };
        // Each row's own prompt, unpadded: what a batch of one holds in `input_ids`.
        let penalty =
            self.repetition_penalty.map(|penalty| RepetitionPenalty { penalty, prompt_ids: prompts.iter().map(|p| p.input_ids.clone()).collect() });
        let generation = match &self.model {
            Backbone::Qwen25(model) => {
                let features = vision_features(model, self.motion.as_ref(), &vision, motion.as_ref())?;
                let embeds = model.embed(&rows, &features)?;
                let positions = model.positions(&rows, &vision)?;
                model.generate_penalised(&embeds, &rows.mask, &positions, &options, penalty.as_ref())?
            }
            Backbone::Qwen3(model) => {
                let features = qwen3_features(model, self.motion.as_ref(), &vision, motion.as_ref())?;
                let positions = model.positions(&rows, &vision)?;
                model.generate_from(&rows, &features, &positions, &options, penalty.as_ref())?
            }
        };
        generation
            .tokens
            .into_iter()
            .map(|ids| {
                let text = self.tokenizer.decode(&ids, true).map_err(|e| EvalError::Tokenizer(Box::new(e)))?;
                Ok((text, ids))
            })
            .collect()
    }
}

/// A PEFT adapter folder: the folder itself, or the `adapter/` folder of a trainer checkpoint.
fn adapter_dir(path: &Path) -> Result<PathBuf> {
    for dir in [path.to_path_buf(), path.join("adapter")] {
        if dir.join("adapter_config.json").is_file() {
            return Ok(dir);
        }
    }
    Err(EvalError::NoAdapter { dir: path.to_path_buf() })
}

/// A file of the checkpoint's folder, fetched from the hub when the checkpoint is a hub id
/// and the file is not there yet (`CheckpointFiles::resolve` fetches only config and weights).
fn checkpoint_file(checkpoint: &str, files: &CheckpointFiles, name: &str) -> Result<Option<PathBuf>> {
    let local = files.dir.join(name);
    if local.is_file() || Path::new(checkpoint).is_dir() {
        return Ok(local.is_file().then_some(local));
    }
    let (repo, revision) = checkpoint.split_once('@').unwrap_or((checkpoint, "main"));
    // Absent from the repository, or offline and not cached: the caller falls back.
    Ok(HubOptions::from_env().fetch(repo, revision, name).ok())
}

/// Loads the checkpoint (and adapter) of a run and builds its preparer and generator.
pub fn load_qwen(config: &RunConfig, bench: &'static dyn Bench) -> Result<(QwenPreparer, QwenGenerator)> {
    let device = config.model.device.open()?;
    let dtype = config.model_dtype()?;
    let checkpoint = config.model.checkpoint.as_str();
    let files = checkpoint_files(config)?;
    let tokenizer_path = checkpoint_file(checkpoint, &files, "tokenizer.json")?
        .ok_or_else(|| EvalError::NoTokenizer { checkpoint: checkpoint.to_owned(), looked_in: files.dir.clone() })?;
    let tokenizer = QwenTokenizer::from_file(&tokenizer_path).map_err(|e| EvalError::Tokenizer(Box::new(e)))?;
    // Settings are checked (and MOFNet loaded) before the model, which takes longest.
    let inputs = inputs_of(config, &files, &device)?;
    let mut model = Backbone::load(&files, dtype, &device)?;
    if let Some(mismatch) = model.vision_token_mismatch(tokenizer.special().vision_ids()) {
        return Err(mismatch.into());
    }
    if let Some(adapter) = &config.model.adapter {
        let lora = LoraWeights::load_peft(&adapter_dir(adapter)?, &device)?;
        match config.adapter_merge(dtype) {
            AdapterMerge::Unmerged => lora.attach(model.linears_mut())?,
            AdapterMerge::Merged => lora.merge_into_linears(model.linears_mut())?,
        }
    }
    let media = inputs.media;
    let kind = config.protocol_kind();
    let template = inputs.processor.template(TemplateOptions {
        max_seq_len: None,
        merge_size: inputs.processor.pixels.merge_size,
        ..TemplateOptions::default()
    });
    let (motion_media, branch) = match inputs.motion {
        Some(m) => {
            let branch = m.source.load(&model, &device)?;
            (Some(m.media), Some(branch))
        }
        None => (None, None),
    };
    let preparer = QwenPreparer {
        bench,
        tokenizer: tokenizer.clone(),
        media,
        template,
        motion: motion_media,
        skip_bad: config.skip_bad,
        likelihood: (config.generation.answer == AnswerMode::Likelihood).then_some(config.generation.likelihood_continuation),
        official: if kind == ProtocolKind::Paper { None } else { Some(OfficialRows::read(&config.manifest)?) },
        protocol: kind,
    };
    let defaults = match checkpoint_file(checkpoint, &files, "generation_config.json")? {
        Some(path) if kind != ProtocolKind::Paper => GenerationDefaults::read(&path)?,
        _ => GenerationDefaults::default(),
    };
    let repetition_penalty = config.generation.repetition_penalty.or(defaults.repetition_penalty).filter(|p| *p != 1.0);
    let generator = QwenGenerator {
        model,
        motion: branch,
        tokenizer,
        device,
        max_new_tokens: config.generation.max_new_tokens,
        likelihood_normalisation: config.generation.likelihood_normalisation,
        repetition_penalty: repetition_penalty.map(|p| p as f32),
        stop_ids: defaults.eos_ids(),
    };
    Ok((preparer, generator))
}

/// Pixels per frame of the official protocol: the video processor's bounds set in
/// `eval.py:198-209`.
pub const OFFICIAL_MIN_PIXELS: usize = 128 * 28 * 28;
pub const OFFICIAL_MAX_PIXELS: usize = 512 * 28 * 28;

/// What an evaluation feeds its model, resolved from its config and the checkpoint's files
/// without loading the model.
pub struct EvaluationInputs {
    /// The checkpoint's processor: its family's pixels and prompt layout.
    pub processor: ModelProcessor,
    /// Frames and sizes of every video and image.
    pub media: QwenMedia,
    /// The motion branch's inputs; none for a visual-only evaluation.
    pub motion: Option<MotionInputs>,
}

/// The flows (cache included) and pseudo-images of a motion-aware evaluation.
pub struct MotionInputs {
    pub media: MotionMedia,
    source: BranchSource,
}

/// The inputs `config`'s evaluation computes, checked as `evaluate run` checks them: `flow
/// extract --config` fills the evaluation's flow cache through this.
pub fn evaluation_inputs(config: &RunConfig, device: &Device) -> Result<EvaluationInputs> {
    inputs_of(config, &checkpoint_files(config)?, device)
}

/// The checkpoint's files (config and weights fetched when it is a hub id).
fn checkpoint_files(config: &RunConfig) -> Result<CheckpointFiles> {
    if config.model.checkpoint.is_empty() {
        return Err(EvalError::Missing { what: "checkpoint", flag: "--checkpoint", key: "model.checkpoint" });
    }
    Ok(CheckpointFiles::resolve(&config.model.checkpoint, &HubOptions::from_env())?)
}

fn inputs_of(config: &RunConfig, files: &CheckpointFiles, device: &Device) -> Result<EvaluationInputs> {
    // The family's processor, with the checkpoint's own normalisation and patch sizes when it
    // ships a processor config.
    let family = ModelFamily::of_config(&files.config).map_err(|reason| EvalError::ConfigFile { reason, path: files.config.clone() })?;
    let file = checkpoint_file(&config.model.checkpoint, files, "preprocessor_config.json")?;
    let processor = ModelProcessor::with_config_file(family, file.as_deref())
        .map_err(|e| EvalError::ConfigFile { reason: e.to_string(), path: file.clone().unwrap_or_default() })?;
    let base = processor.pixels.clone();
    let kind = config.protocol_kind();
    let media = match kind {
        ProtocolKind::Official => official_media(config, &base),
        // The frames of the official plan; each becomes an image already sized by Pillow,
        // which the image preprocessing only normalises.
        ProtocolKind::VllmBaseline => QwenMedia {
            video_policy: FramePolicy::Official { max_frames: config.official.max_frames },
            image_config: base.clone(),
            ..QwenMedia::default()
        },
        ProtocolKind::Paper => config.protocol.media(&base),
    };
    let motion = match resolve_motion(config, files, device)? {
        Some(_) if kind == ProtocolKind::VllmBaseline => {
            return Err(EvalError::NotInProtocol {
                protocol: kind.as_str(),
                problem: "evaluates models without a motion branch; evaluate a motion-aware checkpoint with --protocol official",
            });
        }
        Some(m) => {
            let cache_dir = config.motion.cache_dir.clone().unwrap_or_else(|| config.out.join("flow-cache"));
            let mut flows = MotionMedia::new(media.clone(), m.estimator, Some(FlowCache::new(cache_dir)?), m.pseudo);
            flows.cache_only = config.motion.cache_only;
            Some(MotionInputs { media: flows, source: m.source })
        }
        None => None,
    };
    Ok(EvaluationInputs { processor, media, motion })
}

/// Videos and images of the official protocol with the checkpoint's preprocessing `base`: at
/// most `official.max_frames` frames by floor-linspace over the whole clip, 128–512 × 28²
/// pixels per frame.
fn official_media(config: &RunConfig, base: &PreprocessConfig) -> QwenMedia {
    let pixels = PreprocessConfig { min_pixels: OFFICIAL_MIN_PIXELS, max_pixels: OFFICIAL_MAX_PIXELS, ..base.clone() };
    QwenMedia {
        video_policy: FramePolicy::Official { max_frames: config.official.max_frames },
        video_config: pixels.clone(),
        image_config: pixels,
        ..QwenMedia::default()
    }
}

/// The flow estimator and pseudo-images of a motion-aware checkpoint, and where its branch is.
struct ResolvedMotion {
    estimator: std::sync::Arc<dyn FlowEstimator>,
    pseudo: PseudoImageConfig,
    source: BranchSource,
}

/// Where a motion branch's weights are.
enum BranchSource {
    /// `motion.json` + `motion.safetensors` of a `train sft --motion` run, in `dir`.
    Trained { dir: PathBuf, meta: MotionMeta },
    /// A released-layout SIS-Motion package's `connector_weights.pt`.
    Package(SisPackage),
}

impl BranchSource {
    /// The branch on (a copy of) `model`'s vision tower.
    fn load(&self, model: &Backbone, device: &Device) -> Result<MotionBranch> {
        Ok(match self {
            BranchSource::Trained { dir, meta } => MotionBranch::load(dir, meta, model.motion_tower(), device)?,
            BranchSource::Package(package) => {
                let connector = package.load_connector(model.hidden_size(), device)?;
                MotionBranch::from_visual(model.motion_tower(), &connector)?
            }
        })
    }
}

/// Where a motion-aware checkpoint keeps `motion.json`: the `--adapter` folder (a trainer
/// checkpoint), the folder above a given `adapter/`, or the model folder (a merged model).
fn motion_dir(config: &RunConfig, files: &CheckpointFiles) -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(adapter) = &config.model.adapter {
        candidates.push(adapter.clone());
        if let Some(parent) = adapter.parent() {
            candidates.push(parent.to_path_buf());
        }
    }
    candidates.push(files.dir.clone());
    candidates.into_iter().find(|d| d.join(motionvl_models::motion::MOTION_META_FILE).is_file())
}

/// Resolves the motion branch of a run (see [`crate::config::MotionConfig`] for the rules).
fn resolve_motion(config: &RunConfig, files: &CheckpointFiles, device: &Device) -> Result<Option<ResolvedMotion>> {
    let requested = match (config.motion.no_motion, config.motion.estimator) {
        (false, named) => named,
        (true, None | Some(MotionChoice::None)) => Some(MotionChoice::None),
        (true, Some(name)) => {
            return Err(EvalError::NoMotionAndMotion { motion: name });
        }
    };
    if let Some(adapter) = &config.model.adapter
        && let Some(package) = SisPackage::detect(&adapter_dir(adapter)?)?
    {
        return package_motion(config, requested, package, device);
    }
    let found = match motion_dir(config, files) {
        Some(dir) => MotionMeta::read(&dir)?.map(|meta| (dir, meta)),
        None => None,
    };
    let Some((dir, meta)) = found else {
        return match (requested, &config.model.adapter) {
            (Some(MotionChoice::None), _) | (None, None) => Ok(None),
            // An adapter without its motion branch is most likely a motion-aware model missing
            // its connector, which would silently be evaluated as a visual-only one.
            (None, Some(adapter)) => Err(EvalError::MotionBranch {
                model: adapter.clone(),
                problem: "the adapter has no motion branch (no motion.json + motion.safetensors beside it, no \
                          connector_weights.pt of a SIS-Motion package); pass --no-motion to evaluate it visual-only"
                    .into(),
            }),
            (Some(name), _) => Err(EvalError::MotionBranch {
                model: config.model.adapter.clone().unwrap_or_else(|| files.dir.clone()),
                problem: format!(
                    "--motion {name}: the checkpoint has no motion branch (no motion.json beside the adapter or the \
                     model); evaluate a `train sft --motion` checkpoint, or leave --motion out"
                ),
            }),
        };
    };
    if requested == Some(MotionChoice::None) {
        if config.motion.force {
            return Ok(None);
        }
        return Err(EvalError::MotionBranch {
            problem: format!(
                "motion-aware (trained with `{}`); --motion none would drop its motion branch (add --force-motion to do so anyway)",
                meta.estimator
            ),
            model: dir,
        });
    }
    let name = match requested.and_then(MotionChoice::estimator) {
        Some(name) => name,
        None => meta.estimator.parse::<EstimatorName>()?,
    };
    let dtype = config.model_dtype()?;
    // The official default rounds MOFNet, the only network the official code runs; asking for
    // rounded weights of another estimator stays an error of the registry's.
    let weight_precision =
        if name == EstimatorName::MofNet { config.estimator_weights(dtype) } else { config.motion.estimator_weights.unwrap_or_default() };
    let spec = EstimatorSpec { name, weights: config.motion.weights.as_deref(), weight_precision, ..EstimatorSpec::default() };
    let estimator: std::sync::Arc<dyn FlowEstimator> = estimator_from_spec(&spec, device)?.into();
    if !config.motion.force {
        if estimator.name() != meta.estimator {
            return Err(EvalError::MotionBranch {
                problem: format!(
                    "trained with the `{}` flow estimator, not `{}`; pass --motion {} (or --force-motion)",
                    meta.estimator,
                    estimator.name(),
                    meta.estimator
                ),
                model: dir,
            });
        }
        // The weights' rounding is no mismatch: the official code trains and evaluates MOFNet on
        // weights rounded by the dtype each runs in, so a run's evaluation follows its own
        // dtype and protocol (`RunConfig::estimator_weights`), not the training's precision.
        if settings_without_precision(&estimator.settings()) != settings_without_precision(&meta.estimator_settings) {
            return Err(EvalError::MotionBranch {
                problem: format!(
                    "the `{}` estimator's settings {} differ from those it was trained with, {} (add --force-motion to go on)",
                    meta.estimator,
                    estimator.settings(),
                    meta.estimator_settings
                ),
                model: dir,
            });
        }
    }
    let pseudo: PseudoImageConfig = serde_json::from_value(meta.pseudo_images.clone())
        .map_err(|e| EvalError::ConfigFile { path: dir.join(motionvl_models::motion::MOTION_META_FILE), reason: format!("pseudo_images: {e}") })?;
    Ok(Some(ResolvedMotion { estimator, pseudo, source: BranchSource::Trained { dir, meta } }))
}

/// The motion branch of a released-layout SIS-Motion package: its connector
/// (`connector_weights.pt`, on a copy of the vision tower), and MOFNet with the package's weights
/// (`MOF_kitti.pth`, or `--motion-weights` as the official `--videoflow_ckpt`), widths
/// (`"mofnet"`, else the sintel config) and `decoder_depth` iterations.
fn package_motion(config: &RunConfig, requested: Option<MotionChoice>, package: SisPackage, device: &Device) -> Result<Option<ResolvedMotion>> {
    match requested {
        None => {}
        Some(MotionChoice::None) if config.motion.force => return Ok(None),
        Some(MotionChoice::None) => {
            return Err(EvalError::MotionBranch {
                model: package.dir,
                problem: "a SIS-Motion package; --no-motion (or --motion none) would drop its motion branch (add --force-motion to do so anyway)"
                    .into(),
            });
        }
        Some(MotionChoice::Estimator(name)) => {
            return Err(EvalError::MotionBranch {
                model: package.dir,
                problem: format!("a SIS-Motion package, which brings its own MOFNet; leave out --motion {name}"),
            });
        }
    }
    let config_file = package.dir.join(motionvl_models::sis_package::SIS_CONFIG_FILE);
    let mofnet_config = match &package.config.mofnet {
        Some(widths) => serde_json::from_value::<MofConfig>(widths.clone())
            .map_err(|e| EvalError::ConfigFile { path: config_file.clone(), reason: format!("mofnet: {e}") })?,
        None => MofConfig::default(),
    };
    let weights = config.motion.weights.clone().unwrap_or_else(|| package.videoflow_path());
    if !weights.is_file() {
        return Err(EvalError::MotionBranch {
            problem: format!(
                "the SIS-Motion package needs MOFNet weights: {} does not exist (bundle them in the package or pass --motion-weights)",
                weights.display()
            ),
            model: package.dir,
        });
    }
    let dtype = config.model_dtype()?;
    let mofnet = MofNetEstimator::from_checkpoint(
        &weights,
        mofnet_config,
        package.config.motion_config.decoder_depth,
        config.estimator_weights(dtype),
        device,
    )?;
    // A package is the SIS-Motion authors' model: its connector learnt the official pseudo-images
    // (B1-B6 of the official-code note), so it always runs through that pipeline.
    Ok(Some(ResolvedMotion { estimator: std::sync::Arc::new(mofnet), pseudo: PseudoImageConfig::official(), source: BranchSource::Package(package) }))
}
