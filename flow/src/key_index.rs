//! Cache keys of videos already keyed, so that a `--flow-cache-only` start need not decode
//! every video again: a key is a digest of the decoded frames, and decoding 54k clips to learn
//! what is already known takes hours. A slot per (video, media settings) under
//! `<cache>/keys/` holds the video file's identity (size, mtime, inode) and the key; a file
//! whose identity changed is keyed again. [`check_cached`] also checks a sample of the indexed
//! keys by decoding, and decodes everything when any disagrees.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::cache::CacheKey;
use crate::error::{FlowError, Result};
use crate::media::MotionMedia;

/// What identifies a file's contents without reading them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    size: u64,
    mtime_ns: i128,
    inode: u64,
}

impl Identity {
    fn of(path: &Path) -> Option<Identity> {
        let meta = std::fs::metadata(path).ok()?;
        let mtime = meta.modified().ok()?;
        let mtime_ns = match mtime.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        };
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        Some(Identity { size: meta.len(), mtime_ns, inode })
    }

    fn line(&self, key: &str) -> String {
        format!("{} {} {} {key}\n", self.size, self.mtime_ns, self.inode)
    }
}

/// The index beside a flow cache.
#[derive(Debug, Clone)]
pub struct KeyIndex {
    dir: PathBuf,
}

impl KeyIndex {
    pub fn new(cache_root: &Path) -> Self {
        KeyIndex { dir: cache_root.join("keys") }
    }

    /// The slot of `video` under `settings` (everything besides the frames that the key covers).
    fn slot(&self, video: &Path, settings: &str) -> PathBuf {
        let video = video.canonicalize().unwrap_or_else(|_| video.to_path_buf());
        let mut h = Sha256::new();
        for part in [video.to_string_lossy().as_bytes(), settings.as_bytes()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        let name: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(&name[..2]).join(name)
    }

    /// The key recorded for `video` under `settings`, when the file is still the one keyed.
    pub fn lookup(&self, video: &Path, settings: &str) -> Option<String> {
        let identity = Identity::of(video)?;
        let text = std::fs::read_to_string(self.slot(video, settings)).ok()?;
        let key = text.trim_end().rsplit_once(' ')?.1;
        (text == identity.line(key)).then(|| key.to_owned())
    }

    /// Records `key` for `video` as it is now. The index only saves work: a failed write is
    /// not an error.
    pub fn record(&self, video: &Path, settings: &str, key: &CacheKey) {
        if let Some(identity) = Identity::of(video) {
            let _ = motionvl_data::files::write_atomic(&self.slot(video, settings), identity.line(key.as_str()).as_bytes());
        }
    }
}

/// What besides the frames a key of `media` covers, and the key index of its cache (none
/// without a cache).
pub fn key_settings(media: &MotionMedia) -> Option<(String, KeyIndex)> {
    let cache = media.cache.as_ref()?;
    let settings = format!("{:?}|{:?}|{}|{}", media.qwen, media.pseudo, media.estimator.name(), media.estimator.settings());
    Some((settings, KeyIndex::new(cache.root())))
}

/// What [`check_cached`] found and did.
#[derive(Debug, Default)]
pub struct CachedCheck {
    /// Videos checked.
    pub videos: usize,
    /// Videos decoded to learn or verify their key.
    pub decoded: usize,
    /// Videos whose flow is not in the cache, or whose entry cannot be read.
    pub missing: Vec<FlowError>,
}

/// Every `(video, media)` has a cache entry (its header read, not its flows): keys from the
/// index where the file is unchanged, else decoded and indexed. `verify` indexed keys, spread
/// over the list, are decoded anyway; if one disagrees, every key is decoded.
pub fn check_cached(jobs: &[(PathBuf, MotionMedia)], verify: usize, progress: &(dyn Fn() + Sync)) -> Result<CachedCheck> {
    use rayon::prelude::*;
    let stride = (jobs.len() / verify.max(1)).max(1);
    let keyed: Vec<Result<(String, bool, bool)>> = jobs
        .par_iter()
        .enumerate()
        .map(|(i, (video, media))| {
            let (settings, index) = key_settings(media).ok_or(FlowError::NoCache)?;
            let indexed = index.lookup(video, &settings);
            let sampled = i % stride == 0 && indexed.is_some();
            let key = match (&indexed, sampled) {
                (Some(key), false) => key.clone(),
                _ => {
                    let key = media.flow_input(video)?.key;
                    index.record(video, &settings, &key);
                    key.as_str().to_owned()
                }
            };
            let disagrees = sampled && indexed.as_deref() != Some(key.as_str());
            Ok((key, indexed.is_none() || sampled, disagrees))
        })
        .collect();
    let keyed: Vec<(String, bool, bool)> = keyed.into_iter().collect::<Result<_>>()?;
    let mut decoded = keyed.iter().filter(|k| k.1).count();
    let keys: Vec<String> = if keyed.iter().any(|k| k.2) {
        // The index is wrong somewhere (a file rewritten with its old size and time): trust none.
        decoded = jobs.len();
        jobs.par_iter().map(|(video, media)| media.flow_input(video).map(|input| input.key.as_str().to_owned())).collect::<Result<_>>()?
    } else {
        keyed.into_iter().map(|k| k.0).collect()
    };
    let missing = jobs
        .iter()
        .zip(&keys)
        .filter_map(|((video, media), key)| {
            progress();
            let cache = media.cache.as_ref()?;
            match cache.has_entry(key) {
                Ok(true) => None,
                Ok(false) => Some(FlowError::CacheMiss { video: video.clone(), plan: format!("key {key}"), cache: cache.root().to_path_buf() }),
                Err(e) => Some(e),
            }
        })
        .collect();
    Ok(CachedCheck { videos: jobs.len(), decoded, missing })
}
