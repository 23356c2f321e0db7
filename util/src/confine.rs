//! Names built from input data stay inside the folder they are written to. An id from a handoff
//! file (`instance_id` of `valid_instances.json`) or a relative path from a request file
//! (`output_path`) becomes a file name under the command's output folder; `../../x`, an absolute
//! path or a symbolic link planted inside the folder would otherwise write anywhere the user can.

use std::path::{Component, Path, PathBuf};

/// Why a name or relative path was refused.
#[derive(Debug, thiserror::Error)]
pub enum Escape {
    #[error("`{0}` is not a safe file name: use 1 to 128 of A-Z a-z 0-9 . _ - (and not `.` or `..`)")]
    Name(String),
    #[error("`{0}` must be a path relative to its folder, without `..`")]
    NotRelative(String),
    #[error("`{rel}` leads outside {} through {}", root.display(), through.display())]
    Link { rel: String, root: PathBuf, through: PathBuf },
    #[error("cannot resolve {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// The longest name [`safe_name`] accepts.
pub const MAX_NAME_LEN: usize = 128;

/// `name` when it can be used as one file or folder name as it is.
pub fn safe_name(name: &str) -> Result<&str, Escape> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > MAX_NAME_LEN || name == "." || name == ".." || !name.chars().all(allowed) {
        return Err(Escape::Name(name.to_owned()));
    }
    Ok(name)
}

/// `root/rel`, refused when `rel` is absolute, climbs with `..`, or reaches outside `root`
/// through a symbolic link that already exists under `root`.
pub fn confined_join(root: &Path, rel: &str) -> Result<PathBuf, Escape> {
    let relative = Path::new(rel);
    if rel.is_empty() || !relative.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(Escape::NotRelative(rel.to_owned()));
    }
    let joined = root.join(relative);
    if !root.exists() {
        // Nothing exists under it yet, so no link can lead out.
        return Ok(joined);
    }
    let canonical = |p: &Path| p.canonicalize().map_err(|source| Escape::Io { path: p.to_path_buf(), source });
    let top = canonical(root)?;
    let mut prefix = root.to_path_buf();
    for part in relative.components() {
        prefix.push(part);
        // A dangling link has no target to check: it is refused too, since writing through it
        // would create its target wherever it points.
        let Ok(meta) = prefix.symlink_metadata() else { break };
        if meta.file_type().is_symlink() && !prefix.canonicalize().is_ok_and(|target| target.starts_with(&top)) {
            return Err(Escape::Link { rel: rel.to_owned(), root: root.to_path_buf(), through: prefix });
        }
    }
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_one_plain_component_are_refused() {
        for bad in ["", ".", "..", "../x", "a/b", "/etc", "a b", "é", &"x".repeat(MAX_NAME_LEN + 1)] {
            assert!(safe_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["lm_001", "Tower-3.v2", &"x".repeat(MAX_NAME_LEN)] {
            assert_eq!(safe_name(good).ok(), Some(good));
        }
    }

    #[test]
    fn relative_paths_stay_under_their_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("out");
        std::fs::create_dir_all(root.join("videos")).expect("mkdir");
        assert_eq!(confined_join(&root, "videos/a.mp4").expect("inside"), root.join("videos/a.mp4"));
        assert_eq!(confined_join(&root, "new/deeper/b.jpg").expect("inside, not made yet"), root.join("new/deeper/b.jpg"));
        for bad in ["../x.mp4", "videos/../../x.mp4", "/tmp/x.mp4", ""] {
            assert!(matches!(confined_join(&root, bad), Err(Escape::NotRelative(_))), "{bad:?} accepted");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_link_out_of_the_root_is_refused_and_one_inside_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, outside) = (dir.path().join("out"), dir.path().join("elsewhere"));
        std::fs::create_dir_all(root.join("kept")).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::os::unix::fs::symlink(&outside, root.join("images")).expect("link out");
        std::os::unix::fs::symlink(root.join("kept"), root.join("alias")).expect("link in");
        std::os::unix::fs::symlink(outside.join("victim"), root.join("dangling.json")).expect("dangling link");
        let err = confined_join(&root, "images/a.jpg").expect_err("escapes through the link");
        assert!(err.to_string().contains("images"), "{err}");
        assert!(confined_join(&root, "dangling.json").is_err(), "a dangling link would create its target outside");
        assert_eq!(confined_join(&root, "alias/a.jpg").expect("stays inside"), root.join("alias/a.jpg"));
    }
}
