//! The input as a file for readers that map one (tmpfs where there is one), shared by the
//! targets that fuzz file formats.

use std::path::{Path, PathBuf};

/// `data` written to a per-process file ending in `ext`.
pub fn file_with(data: &[u8], ext: &str) -> PathBuf {
    let dir = if Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() };
    let path = dir.join(format!("kiln-fuzz-{}.{ext}", std::process::id()));
    std::fs::write(&path, data).unwrap();
    path
}
