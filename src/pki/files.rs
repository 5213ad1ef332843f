//! Private and public files written atomically (temp file, fsync, rename); uses no other fedctl module.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Atomically writes `contents` to `path` with mode 0600 (temp file in the same directory,
/// fsync, rename), replacing any existing file.
pub fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    write_file_mode(path, contents, 0o600)
}

/// Atomically writes `contents` to `path` with mode 0644 (see [`write_private_file`]).
pub fn write_public_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    write_file_mode(path, contents, 0o644)
}

fn write_file_mode(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
