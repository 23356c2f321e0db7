//! Extracting flows ahead of training or evaluation, into the cache those runs read.
//!
//! Given a training recipe or an evaluation config ([`ConfigMedia`]), every flow is computed
//! on exactly the frames that run feeds the vision tower — its frame plan, its resize, and for
//! training samples longer than `max_seq_len` the fitted size ([`motionvl_data::budget`]) —
//! and stored under the key the run looks up ([`MotionMedia::flow_input`]). The work is a
//! fixed, deduplicated list of [`Job`]s; [`Shard`] takes every N-th, so N processes fill one
//! cache without overlap, and entries already cached are read instead of recomputed.

use std::path::{Path, PathBuf};

use motionvl_data::budget::{SampleFit, VideoLimits};
use motionvl_data::frames::FramePolicy;
use motionvl_data::loader::{DataLoader, LoaderConfig, QwenMedia};
use motionvl_data::manifest::{Benchmark, read_manifest};
use motionvl_data::media_config::{ProtocolConfig, TrainingVideo};
use motionvl_data::preprocess::PreprocessConfig;
use motionvl_data::samples::tokenizer_for_fresh_model;
use motionvl_data::samples::{LlavaRows, ReadOptions, TrainingSample, read_training_rows};
use motionvl_data::text::{QwenTokenizer, TemplateOptions};

use crate::error::{FlowError, Result};
use crate::estimator::Flows;
use crate::media::{FlowInput, MotionMedia};

/// What a training recipe or an evaluation config computes, as its run resolves it (`train`'s
/// `motion_media`, `eval`'s `evaluation_inputs`): the flows to extract and how to plan them.
#[derive(Clone)]
pub struct ConfigMedia {
    /// Frames, sizes, estimator, pseudo-images and the run's flow cache.
    pub motion: MotionMedia,
    /// The token limit training fits long samples to (`[data] max_seq_len` under
    /// `max_seq_len_policy = "fit"`); none when samples train whole or for an evaluation.
    pub length_limit: Option<usize>,
    /// Where the model's tokenizer is, which fitting needs to count tokens.
    pub tokenizer: TokenizerSource,
    /// The folder relative media paths resolve against (`[data] media_root` or `media_root`).
    pub media_root: Option<PathBuf>,
    /// How conversation rows read (the recipe's `[data] llava_rows`).
    pub llava_rows: LlavaRows,
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
    Fresh {
        base_dir: PathBuf,
        vocab: usize,
    },
    Unknown,
}

/// Part `index` of `count` of the work (`--shard I/N`, 0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// This shard's jobs: every `count`-th, starting at `index`.
    pub fn take(&self, jobs: &[Job]) -> Vec<Job> {
        jobs.iter().skip(self.index).step_by(self.count.max(1)).cloned().collect()
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let parsed = s.split_once('/').and_then(|(i, n)| Some((i.trim().parse::<usize>().ok()?, n.trim().parse::<usize>().ok()?)));
        match parsed {
            Some((index, count)) if count >= 1 && index < count => Ok(Shard { index, count }),
            _ => Err(format!("`{s}` is not a shard I/N with 0 <= I < N (e.g. 0/4)")),
        }
    }
}

/// One flow to extract: a video under the media of its run, limited when its training sample
/// had to be fitted to `max_seq_len`.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub video: PathBuf,
    pub limits: Option<VideoLimits>,
}

impl Job {
    /// The flow's frames and cache key (recorded in the cache's key index, for the quick
    /// start of a `--flow-cache-only` run).
    pub fn input(&self, media: &MotionMedia) -> Result<(MotionMedia, FlowInput)> {
        let media = match self.limits {
            Some(limits) => media.limited(limits),
            None => media.clone(),
        };
        let input = media.flow_input(&self.video)?;
        if let Some((settings, index)) = crate::key_index::key_settings(&media) {
            index.record(&self.video, &settings, &input.key);
        }
        Ok((media, input))
    }

    /// The flow, read from the cache or computed (and stored).
    pub fn run(&self, media: &MotionMedia) -> Result<(FlowInput, Flows)> {
        let (media, input) = self.input(media)?;
        let flows = media.flows(&self.video, &input)?;
        Ok((input, flows))
    }
}

/// The media of a frame plan without a config: the frames and sizes of that kind of run
/// (`training`, `sisbench`, `uniform:N`).
pub fn plan_media(plan: &str) -> Result<QwenMedia> {
    Ok(match plan {
        "training" => TrainingVideo::default().media(),
        "sisbench" => ProtocolConfig::default().media(&PreprocessConfig::default()),
        other => match other.strip_prefix("uniform:").map(str::parse::<usize>) {
            Some(Ok(frames)) if frames >= 2 => {
                QwenMedia { video_policy: FramePolicy::Uniform { frames }, ..ProtocolConfig::default().media(&PreprocessConfig::default()) }
            }
            _ => return Err(FlowError::UnknownPlan { plan: other.to_string() }),
        },
    })
}

/// What a manifest holds, for extraction.
enum ManifestVideos {
    Training(Vec<TrainingSample>),
    Benchmark(Vec<PathBuf>),
}

fn read_videos(manifest: &Path, media_root: Option<&Path>, rows: LlavaRows) -> Result<ManifestVideos> {
    let opts = ReadOptions { media_root: media_root.map(Path::to_path_buf), ..ReadOptions::default() };
    if let Ok(read) = read_training_rows(manifest, &opts, rows)
        && !read.items.is_empty()
    {
        return Ok(ManifestVideos::Training(read.items));
    }
    Benchmark::ALL
        .iter()
        .find_map(|&b| read_manifest(b, manifest, &opts).ok().filter(|r| !r.items.is_empty()))
        .map(|read| ManifestVideos::Benchmark(read.items.into_iter().flat_map(|q| q.videos).collect()))
        .ok_or_else(|| FlowError::NotAManifest { path: manifest.to_path_buf() })
}

/// Every video of a training file or benchmark manifest, each once, in order.
pub fn manifest_videos(manifest: &Path) -> Result<Vec<PathBuf>> {
    let videos: Vec<PathBuf> = match read_videos(manifest, None, LlavaRows::default())? {
        ManifestVideos::Training(samples) => samples.into_iter().flat_map(|s| s.videos).collect(),
        ManifestVideos::Benchmark(videos) => videos,
    };
    let mut seen = std::collections::HashSet::new();
    Ok(videos.into_iter().filter(|v| seen.insert(v.clone())).collect())
}

/// The jobs of `videos` and of `manifest`, in a fixed order, each once. Training samples
/// longer than the recipe's length limit are fitted as `train sft` fits them when the model's
/// tokenizer is found (`tokenizer`, else [`ConfigMedia::tokenizer`]); the returned warning
/// says when it is not.
pub fn plan_jobs(
    videos: &[PathBuf],
    manifest: Option<&Path>,
    settings: Option<&ConfigMedia>,
    media: &QwenMedia,
    tokenizer: Option<&Path>,
) -> Result<(Vec<Job>, Option<String>)> {
    let mut jobs: Vec<Job> = videos.iter().map(|v| Job { video: v.clone(), limits: None }).collect();
    let mut warning = None;
    if let Some(manifest) = manifest {
        let media_root = settings.and_then(|s| s.media_root.as_deref());
        let rows = settings.map(|s| s.llava_rows).unwrap_or_default();
        match (read_videos(manifest, media_root, rows)?, settings.and_then(|s| s.length_limit)) {
            (ManifestVideos::Training(samples), Some(max_seq_len)) => match fitting_tokenizer(settings, tokenizer, &samples)? {
                Some(tok) => jobs.extend(fitted_jobs(samples, tok, media, max_seq_len)?),
                None => {
                    warning = Some(format!(
                        "the recipe's tokenizer was not found (pass --tokenizer FILE): samples longer than max_seq_len {max_seq_len}, which training fits, are extracted at full size"
                    ));
                    jobs.extend(samples.into_iter().flat_map(|s| s.videos).map(|video| Job { video, limits: None }));
                }
            },
            (ManifestVideos::Training(samples), None) => {
                jobs.extend(samples.into_iter().flat_map(|s| s.videos).map(|video| Job { video, limits: None }))
            }
            (ManifestVideos::Benchmark(videos), _) => jobs.extend(videos.into_iter().map(|video| Job { video, limits: None })),
        }
    }
    let mut unique: Vec<Job> = Vec::with_capacity(jobs.len());
    for job in jobs {
        if !unique.contains(&job) {
            unique.push(job);
        }
    }
    Ok((unique, warning))
}

fn fitted_jobs(samples: Vec<TrainingSample>, tokenizer: QwenTokenizer, media: &QwenMedia, max_seq_len: usize) -> Result<Vec<Job>> {
    let template = TemplateOptions { max_seq_len: Some(max_seq_len), merge_size: media.video_config.merge_size, ..TemplateOptions::default() };
    let loader = DataLoader::new(samples, tokenizer, media.clone(), LoaderConfig { workers: 0, template, ..LoaderConfig::default() });
    let mut jobs = Vec::new();
    for (index, sample) in loader.samples().iter().enumerate() {
        let limits = match loader.sample_fit(index)? {
            Some(SampleFit::Fitted { limits, .. }) => Some(limits),
            // Training drops it: no flow is needed.
            Some(SampleFit::TooLong { .. }) => continue,
            Some(SampleFit::Fits { .. }) | None => None,
        };
        jobs.extend(sample.videos.iter().map(|video| Job { video: video.clone(), limits }));
    }
    Ok(jobs)
}

/// The tokenizer `train sft` will count tokens with: `flag`, the checkpoint's (a local folder,
/// or a hub id already in the Hugging Face cache), or a fresh model's, trained as `train sft`
/// trains it when its base model is not built yet.
fn fitting_tokenizer(settings: Option<&ConfigMedia>, flag: Option<&Path>, samples: &[TrainingSample]) -> Result<Option<QwenTokenizer>> {
    let load = |path: &Path| QwenTokenizer::from_file(path).map_err(FlowError::from);
    if let Some(path) = flag {
        return load(path).map(Some);
    }
    let Some(settings) = settings else { return Ok(None) };
    let file = match &settings.tokenizer {
        TokenizerSource::Dir(dir) => Some(dir.join("tokenizer.json")),
        TokenizerSource::Hub(id) => {
            let (repo, revision) = id.split_once('@').unwrap_or((id.as_str(), "main"));
            let root = std::env::var_os("HF_HUB_CACHE").map(PathBuf::from).unwrap_or_else(|| hf_hub::Cache::from_env().path().clone());
            hf_hub::Cache::new(root).repo(hf_hub::Repo::with_revision(repo.into(), hf_hub::RepoType::Model, revision.into())).get("tokenizer.json")
        }
        TokenizerSource::Fresh { base_dir, vocab } => {
            let built = base_dir.join("tokenizer.json");
            if !built.is_file() {
                return tokenizer_for_fresh_model(samples, *vocab).map(Some).map_err(FlowError::from);
            }
            Some(built)
        }
        TokenizerSource::Unknown => None,
    };
    file.filter(|f| f.is_file()).map(|f| load(&f)).transpose()
}
