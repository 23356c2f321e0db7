//! File permissions as the user's umask asks. Writers that create through a temporary file
//! (safetensors' own writer uses `tempfile`, which creates 0600) would otherwise leave
//! checkpoints, adapters and flows readable by their owner only, whatever the umask says.

use std::path::Path;
use std::sync::OnceLock;

/// The mode a plain `File::create` gets here: `0o666 & !umask`.
pub fn default_file_mode() -> u32 {
    static MODE: OnceLock<u32> = OnceLock::new();
    *MODE.get_or_init(|| {
        let umask = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Umask:").and_then(|v| u32::from_str_radix(v.trim(), 8).ok())))
            .unwrap_or(0o022);
        0o666 & !umask
    })
}

/// Gives `path` the mode a freshly created file would have.
pub fn apply_default_mode(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(default_file_mode()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_is_the_one_file_create_gives() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("motionvl-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let plain = dir.join("plain");
        std::fs::write(&plain, b"x").unwrap_or_else(|e| panic!("{e}"));
        let want = std::fs::metadata(&plain).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
        let private = dir.join("private");
        std::fs::write(&private, b"x").unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap_or_else(|e| panic!("{e}"));
        apply_default_mode(&private).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::metadata(&private).map(|m| m.permissions().mode() & 0o777).unwrap_or(0), want);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
