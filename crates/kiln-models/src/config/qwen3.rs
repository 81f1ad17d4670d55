//! Qwen3 dense (`model_type` "qwen3"): Llama with RMS norms on each query and key head.

use super::raw::RawConfig;
use super::Config;

pub(super) fn describe(raw: &RawConfig, c: &mut Config) -> Result<(), String> {
    c.intermediate_size = raw.intermediate_size()?;
    Ok(())
}
