//! `construct split`: the AirScape train / benchmark split of SIS-Bench.
//!
//! Clip names carry their origin, `{id}_{source}_{split}_...` as in
//! `00942_NAT2021_test_N01001_1.mp4`: a numeric id, the source dataset (`urbanvideo`,
//! `NAT2021`, `WebUAV3M`, any case) and the source's own split (`train`, `val`, `test`). The
//! rules:
//! - every UrbanVideo-origin clip goes to the benchmark side;
//! - NAT2021 keeps its own split (its `test` clips on the benchmark side, the rest training);
//! - WebUAV3M is rebalanced so that exactly `webuav_benchmark` clips (700 by default) are on
//!   the benchmark side: its own `test` clips first, topped up from (or trimmed back into) the
//!   other clips, each draw uniform under the seed.
//!
//! The paper's training pool is 0 UrbanVideo + 1,349 NAT2021 + 7,596 WebUAV3M clips.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::Path;

use motionvl_util::files::{write_atomic, write_json_atomic};
use motionvl_util::rng::SynthRng;
use serde::{Deserialize, Serialize};

use crate::ConstructError;

/// The source dataset of an AirScape clip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    UrbanVideo,
    Nat2021,
    WebUav3m,
}

impl Source {
    pub const ALL: [Source; 3] = [Source::UrbanVideo, Source::Nat2021, Source::WebUav3m];

    pub fn name(self) -> &'static str {
        match self {
            Source::UrbanVideo => "UrbanVideo",
            Source::Nat2021 => "NAT2021",
            Source::WebUav3m => "WebUAV3M",
        }
    }

    fn from_token(token: &str) -> Option<Source> {
        let t: String = token.chars().filter(char::is_ascii_alphanumeric).collect::<String>().to_ascii_lowercase();
        match t.as_str() {
            "urbanvideo" | "urbanvideobench" => Some(Source::UrbanVideo),
            "nat2021" => Some(Source::Nat2021),
            "webuav3m" => Some(Source::WebUav3m),
            _ => None,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a clip's file name says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClipName {
    /// The file name as given (with extension).
    pub name: String,
    pub id: u64,
    pub source: Source,
    /// The source's own split is `test`.
    pub source_test: bool,
}

impl ClipName {
    /// Parses `{id}_{source}_{split}_...`; the error says which part is wrong.
    pub fn parse(name: &str) -> Result<ClipName, String> {
        let stem = Path::new(name).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let parts: Vec<&str> = stem.split('_').collect();
        if parts.len() < 3 {
            return Err(format!("`{name}` is not `{{id}}_{{source}}_{{split}}_...` (e.g. 00942_NAT2021_test_N01001_1.mp4)"));
        }
        let id = parts[0].parse().map_err(|_| format!("`{name}`: id `{}` is not a number", parts[0]))?;
        let source = Source::from_token(parts[1])
            .ok_or_else(|| format!("`{name}`: unknown source `{}` (expected urbanvideo, NAT2021 or WebUAV3M)", parts[1]))?;
        let source_test = match parts[2].to_ascii_lowercase().as_str() {
            "test" => true,
            "train" | "val" | "valid" | "validation" => false,
            other => return Err(format!("`{name}`: unknown split `{other}` (expected train, val or test)")),
        };
        Ok(ClipName { name: name.to_string(), id, source, source_test })
    }
}

/// Settings of `construct split`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitConfig {
    /// WebUAV3M clips kept on the benchmark side.
    pub webuav_benchmark: usize,
    pub seed: u64,
}

impl Default for SplitConfig {
    fn default() -> Self {
        SplitConfig { webuav_benchmark: 700, seed: 0 }
    }
}

/// Clips per side of one source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideCounts {
    pub train: usize,
    pub benchmark: usize,
}

/// Both lists (sorted by name) and the per-source counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitOutcome {
    pub config: SplitConfig,
    pub counts: BTreeMap<Source, SideCounts>,
    pub train: Vec<String>,
    pub benchmark: Vec<String>,
}

/// Splits the clips by the module's rules; fails when there are fewer WebUAV3M clips than the
/// benchmark is to keep, or when a name appears twice.
pub fn split_clips(clips: &[ClipName], config: &SplitConfig) -> Result<SplitOutcome, ConstructError> {
    let mut sorted: Vec<&ClipName> = clips.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = sorted.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(ConstructError::DuplicateClip { name: w[0].name.clone() });
    }
    let mut train = Vec::new();
    let mut benchmark = Vec::new();
    let (mut web_test, mut web_rest): (Vec<&ClipName>, Vec<&ClipName>) = (Vec::new(), Vec::new());
    for clip in sorted {
        match clip.source {
            Source::UrbanVideo => benchmark.push(clip),
            Source::Nat2021 if clip.source_test => benchmark.push(clip),
            Source::Nat2021 => train.push(clip),
            Source::WebUav3m if clip.source_test => web_test.push(clip),
            Source::WebUav3m => web_rest.push(clip),
        }
    }
    let wanted = config.webuav_benchmark;
    if web_test.len() + web_rest.len() < wanted {
        return Err(ConstructError::Setting {
            key: "--webuav-benchmark",
            problem: format!("the benchmark is to keep {wanted} WebUAV3M clips but only {} are listed", web_test.len() + web_rest.len()),
        });
    }
    let mut rng = SynthRng::new(config.seed);
    rng.shuffle(&mut web_test);
    rng.shuffle(&mut web_rest);
    if web_test.len() >= wanted {
        let moved = web_test.split_off(wanted);
        benchmark.extend(web_test);
        train.extend(moved);
        train.extend(web_rest);
    } else {
        let top_up = wanted - web_test.len();
        let kept = web_rest.split_off(top_up);
        benchmark.extend(web_test);
        benchmark.extend(web_rest);
        train.extend(kept);
    }
    let mut counts: BTreeMap<Source, SideCounts> = Source::ALL.iter().map(|&s| (s, SideCounts::default())).collect();
    for c in &train {
        counts.entry(c.source).or_default().train += 1;
    }
    for c in &benchmark {
        counts.entry(c.source).or_default().benchmark += 1;
    }
    let names = |list: Vec<&ClipName>| {
        let mut v: Vec<String> = list.into_iter().map(|c| c.name.clone()).collect();
        v.sort();
        v
    };
    Ok(SplitOutcome { config: *config, counts, train: names(train), benchmark: names(benchmark) })
}

/// Clip names from a folder (its files, any extension, hidden files left out) or from a text
/// file of one name per line (blank lines and `#` comments skipped). A name that does not
/// parse is an error naming it (and its line), before anything is split.
pub fn read_clip_names(input: &Path) -> Result<Vec<ClipName>, ConstructError> {
    let mut out = Vec::new();
    if input.is_dir() {
        let entries = fs::read_dir(input).map_err(ConstructError::io(input))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(ConstructError::io(input))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') && entry.path().is_file() {
                names.push(name);
            }
        }
        names.sort();
        for name in names {
            out.push(ClipName::parse(&name).map_err(|e| ConstructError::input(input, e))?);
        }
    } else {
        let text = fs::read_to_string(input).map_err(ConstructError::io(input))?;
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let name = Path::new(t).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            out.push(ClipName::parse(&name).map_err(|e| ConstructError::input(input, format!("line {}: {e}", i + 1)))?);
        }
    }
    if out.is_empty() {
        return Err(ConstructError::input(input, "no clip names found"));
    }
    Ok(out)
}

/// Writes `train.txt`, `benchmark.txt` (one name per line) and `split.json` (settings, counts
/// and both lists) into `out_dir`.
pub fn write_split(out_dir: &Path, outcome: &SplitOutcome) -> Result<(), ConstructError> {
    let lines = |names: &[String]| names.iter().map(|n| format!("{n}\n")).collect::<String>();
    write_atomic(&out_dir.join("train.txt"), lines(&outcome.train).as_bytes())?;
    write_atomic(&out_dir.join("benchmark.txt"), lines(&outcome.benchmark).as_bytes())?;
    Ok(write_json_atomic(&out_dir.join("split.json"), outcome)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(source: &str, split: &str, n: usize, from: usize) -> Vec<ClipName> {
        (from..from + n).map(|i| ClipName::parse(&format!("{i:05}_{source}_{split}_X{i}_1.mp4")).unwrap_or_else(|e| panic!("{e}"))).collect()
    }

    #[test]
    fn parses_names_and_says_what_is_wrong() {
        let c = ClipName::parse("00942_NAT2021_test_N01001_1.mp4").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((c.id, c.source, c.source_test), (942, Source::Nat2021, true));
        assert!(ClipName::parse("x_NAT2021_test.mp4").unwrap_err().contains("id `x`"));
        assert!(ClipName::parse("1_visdrone_test.mp4").unwrap_err().contains("unknown source `visdrone`"));
        assert!(ClipName::parse("1_WebUAV3M_dev.mp4").unwrap_err().contains("unknown split `dev`"));
        assert!(ClipName::parse("1.mp4").is_err());
    }

    #[test]
    fn a_pool_shaped_like_the_papers_gives_its_training_counts() {
        // Source splits as large as AirScape's (the training side must come out 0 / 1,349 /
        // 7,596 with 700 WebUAV3M clips kept for the benchmark).
        let mut clips = names("urbanvideo", "train", 300, 0);
        clips.extend(names("urbanvideo", "test", 100, 1_000));
        clips.extend(names("NAT2021", "train", 1_349, 2_000));
        clips.extend(names("NAT2021", "test", 180, 4_000));
        clips.extend(names("WebUAV3M", "train", 7_800, 5_000));
        clips.extend(names("WebUAV3M", "test", 496, 20_000));
        let o = split_clips(&clips, &SplitConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let train: Vec<usize> = Source::ALL.iter().map(|s| o.counts[s].train).collect();
        assert_eq!(train, [0, 1_349, 7_596]);
        assert_eq!(o.counts[&Source::WebUav3m].benchmark, 700);
        assert_eq!(o.counts[&Source::UrbanVideo].benchmark, 400);
    }

    #[test]
    fn counts_follow_the_rules_and_the_seed() {
        let mut clips = names("urbanvideo", "train", 5, 0);
        clips.extend(names("urbanvideo", "test", 3, 100));
        clips.extend(names("NAT2021", "train", 7, 200));
        clips.extend(names("NAT2021", "test", 4, 300));
        clips.extend(names("WebUAV3M", "train", 20, 400));
        clips.extend(names("WebUAV3M", "test", 6, 500));
        let count = |o: &SplitOutcome, s: Source| o.counts[&s];
        // Topped up: 6 test clips plus 4 drawn from train.
        let o = split_clips(&clips, &SplitConfig { webuav_benchmark: 10, seed: 1 }).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(count(&o, Source::UrbanVideo), SideCounts { train: 0, benchmark: 8 });
        assert_eq!(count(&o, Source::Nat2021), SideCounts { train: 7, benchmark: 4 });
        assert_eq!(count(&o, Source::WebUav3m), SideCounts { train: 16, benchmark: 10 });
        assert_eq!(o.train.len() + o.benchmark.len(), clips.len());
        assert!(o.benchmark.iter().filter(|n| n.contains("WebUAV3M_test")).count() == 6);
        // Trimmed: only 4 of the 6 test clips stay.
        let o2 = split_clips(&clips, &SplitConfig { webuav_benchmark: 4, seed: 1 }).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(count(&o2, Source::WebUav3m), SideCounts { train: 22, benchmark: 4 });
        assert!(o2.benchmark.iter().all(|n| !n.contains("WebUAV3M_train")));
        // Deterministic by seed, and the seed matters.
        let again = split_clips(&clips, &SplitConfig { webuav_benchmark: 10, seed: 1 }).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o, again);
        let other = split_clips(&clips, &SplitConfig { webuav_benchmark: 10, seed: 2 }).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(o.benchmark, other.benchmark);
        assert!(split_clips(&clips, &SplitConfig { webuav_benchmark: 27, seed: 1 }).is_err());
        let mut twice = clips.clone();
        twice.push(clips[0].clone());
        assert!(split_clips(&twice, &SplitConfig::default()).is_err());
    }
}
