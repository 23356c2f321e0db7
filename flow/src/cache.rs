//! On-disk flow cache: flows are computed once per (frames, frame plan, estimator, settings)
//! and read back by every later training or evaluation run.
//!
//! An entry is `<root>/<key[0..2]>/<key>.safetensors` holding one tensor `flows` `[T,2,H,W]`:
//! f16 for motionvl's pipeline (f16 keeps 0.03 px at 100 px of motion, far below any
//! estimator's error, at half the disk), f32 for the official one, whose small 1/8-resolution
//! flows the reference never rounds ([`Precision`]); and metadata: the key, the estimator, and a SHA-256 of the tensor bytes. The
//! key is a SHA-256 over the frames' shape and bytes, the caller's plan description, the
//! estimator's name and its settings JSON, so changing any of them misses. Entries are written
//! to a temporary file named by host, PID and a random nonce (nodes of a cluster share caches,
//! and containers repeat PIDs), fsynced, renamed into place and the folder fsynced, so readers
//! never see half an entry, even after a crash; an entry that fails to parse, names another
//! key, or whose checksum disagrees is reported as corrupt, and [`FlowCache::get_or_compute`]
//! recomputes and replaces it. A failed write (a full or read-only shared cache) is a warning:
//! the flows just computed are used. Temporary files older than a day — writers killed
//! mid-write — are swept when a cache is opened.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;

use half::f16;
use ndarray::{Array4, ArrayView4};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use sha2::{Digest, Sha256};

use crate::error::{FlowError, Result};
use crate::estimator::{FlowEstimator, Flows};

/// Bumped when the entry layout or the key recipe changes, so old entries simply miss.
const FORMAT: &str = "motionvl-flow-cache-v1";

/// A cache key: 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey(String);

impl CacheKey {
    /// Key of `frames` `[N,H,W,3]` taken by `plan` (any stable description of how the frames
    /// were chosen: video id, timestamps, resize) and flowed by `estimator`.
    pub fn new(frames: ArrayView4<u8>, plan: &str, estimator: &dyn FlowEstimator) -> Self {
        let mut h = Sha256::new();
        h.update(FORMAT.as_bytes());
        for d in frames.shape() {
            h.update((*d as u64).to_le_bytes());
        }
        match frames.as_slice() {
            Some(bytes) => h.update(bytes),
            None => frames.iter().for_each(|b| h.update([*b])),
        }
        Self::finish(h, plan, estimator)
    }

    /// [`CacheKey::new`] of float frames (the official pipeline's MOFNet input `[N,3,H,W]`).
    pub fn of_floats(frames: ArrayView4<f32>, plan: &str, estimator: &dyn FlowEstimator) -> Self {
        let mut h = Sha256::new();
        h.update(FORMAT.as_bytes());
        h.update(b"f32");
        for d in frames.shape() {
            h.update((*d as u64).to_le_bytes());
        }
        let bytes: Vec<u8> = frames.iter().flat_map(|v| v.to_le_bytes()).collect();
        h.update(&bytes);
        Self::finish(h, plan, estimator)
    }

    fn finish(mut h: Sha256, plan: &str, estimator: &dyn FlowEstimator) -> Self {
        // Lengths before each string keep ("ab","c") and ("a","bc") apart.
        for part in [plan.to_string(), estimator.name().to_string(), estimator.settings().to_string()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        CacheKey(hex(&h.finalize()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// How an entry stores its flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// f16: motionvl's pipeline (every consumer rounds fresh flows the same way).
    Half,
    /// f32, unrounded: the official pipeline.
    Single,
}

/// How [`FlowCache::get_or_compute`] obtained the flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    Hit,
    Miss,
    /// The entry existed but was corrupt; it was recomputed and replaced.
    Repaired,
}

/// A directory of cached flows.
#[derive(Debug, Clone)]
pub struct FlowCache {
    root: PathBuf,
}

/// Temporary files older than this are a killed writer's, never one still writing.
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

impl FlowCache {
    /// Opens (creating) the cache at `root`, sweeping stale temporary files.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(|e| FlowError::io(&root, e))?;
        let shards = fs::read_dir(&root).map_err(|e| FlowError::io(&root, e))?;
        for shard in shards.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            motionvl_data::files::sweep_stale_temps(&shard.path(), STALE_TEMP);
        }
        Ok(FlowCache { root })
    }

    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// How many entries the cache holds (its key index and temporaries aside).
    pub fn entry_count(&self) -> Result<usize> {
        let mut count = 0;
        for shard in fs::read_dir(&self.root).map_err(|e| FlowError::io(&self.root, e))?.flatten() {
            let name = shard.file_name();
            // Entry folders are the first two hex digits of their keys.
            if name.len() != 2 || !shard.path().is_dir() {
                continue;
            }
            let entries = fs::read_dir(shard.path()).map_err(|e| FlowError::io(shard.path(), e))?;
            count += entries
                .flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.') && e.path().extension().is_some_and(|x| x == "safetensors"))
                .count();
        }
        Ok(count)
    }

    pub fn path_of(&self, key: &CacheKey) -> PathBuf {
        self.root.join(&key.0[..2]).join(format!("{}.safetensors", key.0))
    }

    /// The cached flows, `None` on a miss, [`FlowError::CorruptCacheEntry`] for a bad entry.
    pub fn get(&self, key: &CacheKey) -> Result<Option<Flows>> {
        let path = self.path_of(key);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            // Something that is no folder where the entry's folder belongs holds no entry either.
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => return Ok(None),
            Err(e) => return Err(FlowError::io(&path, e)),
        };
        decode_entry(&bytes, key).map(Some).map_err(|reason| FlowError::CorruptCacheEntry { path, reason })
    }

    /// Whether an entry for `key` (64 hex digits) is there and its header names it: what a
    /// start-up check needs, without reading or hashing the flows.
    pub fn has_entry(&self, key: &str) -> Result<bool> {
        use std::io::Read;
        if key.len() < 2 || !key.is_ascii() {
            return Ok(false);
        }
        let path = self.root.join(&key[..2]).join(format!("{key}.safetensors"));
        let mut file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => return Ok(false),
            Err(e) => return Err(FlowError::io(&path, e)),
        };
        let corrupt = |reason: String| FlowError::CorruptCacheEntry { path: path.clone(), reason };
        let mut len = [0u8; 8];
        file.read_exact(&mut len).map_err(|e| corrupt(format!("no safetensors header: {e}")))?;
        let len = u64::from_le_bytes(len);
        // safetensors caps its header at 100 MB; an entry's is a few hundred bytes.
        if len > 1 << 20 {
            return Err(corrupt(format!("a header of {len} bytes")));
        }
        let mut header = vec![0u8; len as usize];
        file.read_exact(&mut header).map_err(|e| corrupt(format!("truncated header: {e}")))?;
        let header: serde_json::Value = serde_json::from_slice(&header).map_err(|e| corrupt(format!("header is not JSON: {e}")))?;
        match header.get("__metadata__").and_then(|m| m.get("key")).and_then(|k| k.as_str()) {
            Some(k) if k == key => Ok(true),
            other => Err(corrupt(format!("entry belongs to key {other:?}"))),
        }
    }

    /// Stores `flows` under `key` at `precision`, atomically and durably replacing any previous
    /// entry.
    pub fn put(&self, key: &CacheKey, flows: &Flows, estimator: &str, precision: Precision) -> Result<()> {
        let path = self.path_of(key);
        let (dtype, data): (Dtype, Vec<u8>) = match precision {
            Precision::Half => (Dtype::F16, flows.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect()),
            Precision::Single => (Dtype::F32, flows.iter().flat_map(|v| v.to_le_bytes()).collect()),
        };
        let meta = HashMap::from([
            ("format".to_string(), FORMAT.to_string()),
            ("key".to_string(), key.0.clone()),
            ("estimator".to_string(), estimator.to_string()),
            ("sha256".to_string(), hex(&Sha256::digest(&data))),
        ]);
        let view = TensorView::new(dtype, flows.shape().to_vec(), &data)?;
        let bytes = safetensors::serialize([("flows", view)], Some(meta))?;
        motionvl_data::files::write_atomic(&path, &bytes).map_err(|e| FlowError::io(&path, e.source))
    }

    /// The flows of `frames` from the cache, computing and storing them on a miss or when the
    /// entry is corrupt.
    pub fn get_or_compute(&self, frames: ArrayView4<u8>, plan: &str, estimator: &dyn FlowEstimator) -> Result<(Flows, CacheStatus)> {
        self.get_or_compute_keyed(frames, &CacheKey::new(frames, plan, estimator), estimator)
    }

    /// [`FlowCache::get_or_compute`] with the key already made from `frames`.
    pub fn get_or_compute_keyed(&self, frames: ArrayView4<u8>, key: &CacheKey, estimator: &dyn FlowEstimator) -> Result<(Flows, CacheStatus)> {
        self.get_or_compute_with(key, estimator.name(), Precision::Half, || estimator.estimate(frames))
    }

    /// The flows under `key`, or `compute`d and stored at `precision` by `estimator` on a miss
    /// or when the entry is corrupt.
    pub fn get_or_compute_with(
        &self,
        key: &CacheKey,
        estimator: &str,
        precision: Precision,
        compute: impl FnOnce() -> Result<Flows>,
    ) -> Result<(Flows, CacheStatus)> {
        let status = match self.get(key) {
            Ok(Some(flows)) => return Ok((flows, CacheStatus::Hit)),
            Ok(None) => CacheStatus::Miss,
            Err(FlowError::CorruptCacheEntry { .. }) => CacheStatus::Repaired,
            Err(e) => return Err(e),
        };
        let flows = compute()?;
        if let Err(e) = self.put(key, &flows, estimator, precision) {
            // The flows are right; only the next run will compute them again.
            eprintln!("warning: flow cache entry not stored ({e}); the computed flows are used");
        }
        Ok((flows, status))
    }
}

fn decode_entry(bytes: &[u8], key: &CacheKey) -> std::result::Result<Flows, String> {
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
    let meta = header.metadata().clone().unwrap_or_default();
    if meta.get("key") != Some(&key.0) {
        return Err(format!("entry belongs to key {:?}", meta.get("key")));
    }
    let st = SafeTensors::deserialize(bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
    let t = st.tensor("flows").map_err(|e| format!("no `flows` tensor: {e}"))?;
    if !matches!(t.dtype(), Dtype::F16 | Dtype::F32) || t.shape().len() != 4 || t.shape()[1] != 2 {
        return Err(format!("`flows` is {:?} {:?}, expected f16 or f32 [T,2,H,W]", t.dtype(), t.shape()));
    }
    if meta.get("sha256") != Some(&hex(&Sha256::digest(t.data()))) {
        return Err("checksum mismatch".to_string());
    }
    let values: Vec<f32> = match t.dtype() {
        Dtype::F16 => t.data().chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        _ => t.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
    };
    let s = t.shape();
    Array4::from_shape_vec((s[0], s[1], s[2], s[3]), values).map_err(|e| e.to_string())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An estimator that counts its calls and returns a recognisable field.
    struct Counting {
        calls: AtomicUsize,
        setting: u32,
    }

    impl FlowEstimator for Counting {
        fn name(&self) -> &str {
            "counting"
        }
        fn settings(&self) -> serde_json::Value {
            serde_json::json!({ "setting": self.setting })
        }
        fn estimate_padded(&self, frames: ArrayView4<u8>) -> Result<Flows> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let (n, h, w, _) = frames.dim();
            Ok(Array4::from_shape_fn((n - 1, 2, h, w), |(t, c, y, x)| t as f32 + 0.5 * c as f32 - 0.25 * y as f32 + x as f32 / 8.0))
        }
    }

    fn is_temporary(path: &std::path::Path) -> bool {
        path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.') && n.contains(motionvl_data::files::TEMP_MARK))
    }

    fn clip(seed: u8) -> Array4<u8> {
        Array4::from_shape_fn((3, 5, 7, 3), |(t, y, x, c)| seed.wrapping_add((t * 31 + y * 7 + x * 3 + c) as u8))
    }

    #[test]
    fn miss_then_hit_returns_the_same_flows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FlowCache::new(dir.path()).expect("cache");
        let est = Counting { calls: AtomicUsize::new(0), setting: 1 };
        let frames = clip(0);
        let (a, s1) = cache.get_or_compute(frames.view(), "video.mp4@2fps", &est).expect("flows");
        let (b, s2) = cache.get_or_compute(frames.view(), "video.mp4@2fps", &est).expect("flows");
        assert_eq!((s1, s2, est.calls.load(Ordering::SeqCst)), (CacheStatus::Miss, CacheStatus::Hit, 1));
        assert_eq!(a, b); // these values are exact in f16
        assert_eq!(b.dim(), (2, 2, 5, 7));
    }

    /// The official pipeline's entries: keyed on float frames, stored as f32, read back bit for
    /// bit (these flows are not f16-representable).
    #[test]
    fn single_precision_entries_keep_every_bit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FlowCache::new(dir.path()).expect("cache");
        let est = Counting { calls: AtomicUsize::new(0), setting: 1 };
        let frames = Array4::from_shape_fn((4, 3, 5, 7), |(t, c, y, x)| (t * 31 + c * 7 + y * 3 + x) as f32 / 3.0);
        let key = CacheKey::of_floats(frames.view(), "official", &est);
        assert_ne!(key, CacheKey::of_floats(frames.view(), "other", &est));
        let mut nudged = frames.clone();
        nudged[[3, 2, 4, 6]] = f32::from_bits(nudged[[3, 2, 4, 6]].to_bits() + 1);
        assert_ne!(key, CacheKey::of_floats(nudged.view(), "official", &est), "one ulp of one input changes the key");
        let flows = Array4::from_shape_fn((2, 2, 3, 4), |(t, c, y, x)| 0.1 + (t * 24 + c * 12 + y * 4 + x) as f32 / 7.0);
        let (fresh, first) = cache.get_or_compute_with(&key, "counting", Precision::Single, || Ok(flows.clone())).expect("flows");
        let (cached, second) = cache.get_or_compute_with(&key, "counting", Precision::Single, || Err(FlowError::NoCache)).expect("cached");
        assert_eq!((first, second), (CacheStatus::Miss, CacheStatus::Hit));
        assert_eq!((&fresh, &cached), (&flows, &flows));
    }

    #[test]
    fn any_change_of_frames_plan_or_settings_misses() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FlowCache::new(dir.path()).expect("cache");
        let est = Counting { calls: AtomicUsize::new(0), setting: 1 };
        let other = Counting { calls: AtomicUsize::new(0), setting: 2 };
        let base = CacheKey::new(clip(0).view(), "p", &est);
        assert_ne!(base, CacheKey::new(clip(1).view(), "p", &est));
        assert_ne!(base, CacheKey::new(clip(0).view(), "q", &est));
        assert_ne!(base, CacheKey::new(clip(0).view(), "p", &other));
        assert_eq!(base, CacheKey::new(clip(0).view(), "p", &est));
        cache.get_or_compute(clip(0).view(), "p", &est).expect("flows");
        let (_, status) = cache.get_or_compute(clip(0).view(), "p", &other).expect("flows");
        assert_eq!(status, CacheStatus::Miss);
    }

    #[test]
    fn corrupt_entries_are_detected_and_recomputed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FlowCache::new(dir.path()).expect("cache");
        let est = Counting { calls: AtomicUsize::new(0), setting: 1 };
        let frames = clip(5);
        let key = CacheKey::new(frames.view(), "p", &est);
        let (good, _) = cache.get_or_compute(frames.view(), "p", &est).expect("flows");
        let path = cache.path_of(&key);
        let original = fs::read(&path).expect("entry");

        // A flipped byte in the payload: parses, but the checksum disagrees.
        let mut flipped = original.clone();
        let last = flipped.len() - 3;
        flipped[last] ^= 0x40;
        // A truncated file: does not parse.
        let truncated = original[..original.len() / 2].to_vec();
        for (what, bytes) in [("flipped", flipped), ("truncated", truncated), ("garbage", b"not a cache entry".to_vec())] {
            fs::write(&path, &bytes).expect("write");
            assert!(matches!(cache.get(&key), Err(FlowError::CorruptCacheEntry { .. })), "{what} must be reported");
            let (again, status) = cache.get_or_compute(frames.view(), "p", &est).expect("flows");
            assert_eq!((status, &again), (CacheStatus::Repaired, &good), "{what}");
            assert_eq!(cache.get(&key).expect("repaired").as_ref(), Some(&good), "{what}: the entry is replaced");
        }
        assert_eq!(est.calls.load(Ordering::SeqCst), 4);
        let leftovers: Vec<_> = fs::read_dir(path.parent().expect("dir")).expect("dir").flatten().filter(|e| is_temporary(&e.path())).collect();
        assert!(leftovers.is_empty());
    }

    /// A cache that cannot be written (full, read-only, another user's shard folder) costs the
    /// next run a recomputation, never this sample: the computed flows come back.
    #[cfg(unix)]
    #[test]
    fn an_unwritable_cache_warns_and_returns_the_computed_flows() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FlowCache::new(dir.path()).expect("cache");
        let est = Counting { calls: AtomicUsize::new(0), setting: 1 };
        let frames = clip(9);
        let key = CacheKey::new(frames.view(), "p", &est);
        // The entry's folder exists and refuses writes (root ignores modes: then a file
        // stands where the folder should be).
        let shard = cache.path_of(&key).parent().expect("shard").to_path_buf();
        fs::create_dir_all(&shard).expect("shard");
        fs::set_permissions(&shard, fs::Permissions::from_mode(0o500)).expect("read-only");
        if fs::write(shard.join("probe"), b"x").is_ok() {
            fs::set_permissions(&shard, fs::Permissions::from_mode(0o700)).expect("writable");
            fs::remove_dir_all(&shard).expect("remove");
            fs::write(&shard, b"not a folder").expect("a file in the way");
        }
        let (flows, status) = cache.get_or_compute(frames.view(), "p", &est).expect("computed although not stored");
        assert_eq!((status, flows), (CacheStatus::Miss, est.estimate_padded(frames.view()).expect("flows")));
        assert!(cache.get(&key).map(|f| f.is_none()).unwrap_or(true), "nothing was stored");
        let _ = fs::set_permissions(&shard, fs::Permissions::from_mode(0o700));
    }

    /// Temporary files of killed writers go when the cache is next opened, once a day old;
    /// younger ones (a writer still at work on another node) and entries stay.
    #[test]
    fn stale_temporaries_are_swept_and_fresh_ones_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FlowCache::new(dir.path()).expect("cache");
        let est = Counting { calls: AtomicUsize::new(0), setting: 1 };
        let frames = clip(3);
        cache.get_or_compute(frames.view(), "p", &est).expect("flows");
        let entry = cache.path_of(&CacheKey::new(frames.view(), "p", &est));
        let shard = entry.parent().expect("shard");
        let stale = motionvl_data::files::temp_sibling(&entry);
        let fresh = motionvl_data::files::temp_sibling(&entry);
        let legacy = shard.join(".tmpAbC123");
        for t in [&stale, &fresh, &legacy] {
            fs::write(t, b"half an entry").expect("temp");
        }
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 24 * 3600);
        for t in [&stale, &legacy] {
            fs::File::options().write(true).open(t).and_then(|f| f.set_modified(old)).expect("age");
        }
        assert_ne!(stale, fresh, "two writes never share a temporary name");
        assert!(stale.to_string_lossy().contains(motionvl_data::files::host_name()), "{}", stale.display());
        FlowCache::new(dir.path()).expect("reopened");
        assert!(!stale.exists() && !legacy.exists(), "a day-old temporary is swept");
        assert!(fresh.exists() && entry.exists(), "a fresh temporary and the entry stay");
    }

    /// Writers of one key at once (shards on several nodes) never collide: each write is whole,
    /// and the entry they leave reads back.
    #[test]
    fn concurrent_writers_of_one_key_leave_a_whole_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let est = Counting { calls: AtomicUsize::new(0), setting: 1 };
        let frames = clip(7);
        let key = CacheKey::new(frames.view(), "p", &est);
        let flows = est.estimate_padded(frames.view()).expect("flows");
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    let cache = FlowCache::new(dir.path()).expect("cache");
                    for _ in 0..20 {
                        cache.put(&key, &flows, "counting", Precision::Single).expect("put");
                    }
                });
            }
        });
        let cache = FlowCache::new(dir.path()).expect("cache");
        assert_eq!(cache.get(&key).expect("whole"), Some(flows));
        let shard = cache.path_of(&key).parent().expect("shard").to_path_buf();
        assert_eq!(fs::read_dir(&shard).expect("shard").count(), 1, "only the entry is left");
    }
}
