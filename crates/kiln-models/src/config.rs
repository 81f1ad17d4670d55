//! `config.json` of a Hugging Face model folder: the fields every family needs.

use kiln::{Error, Result};
use serde::Deserialize;
use std::path::Path;

#[derive(Debug, Clone, Deserialize)]
pub struct BaseConfig {
    /// e.g. ["LlamaForCausalLM"]
    #[serde(default)]
    pub architectures: Vec<String>,
    pub model_type: String,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub vocab_size: usize,
}

impl BaseConfig {
    /// Reads and parses `dir/config.json`; a missing file or field is an error naming it.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Io { path: path.display().to_string(), source: e })?;
        serde_json::from_str(&text)
            .map_err(|e| Error::File { path: path.display().to_string(), msg: e.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `$KILN_FIXTURES`, else `../shared/fixtures` beside the repository.
    fn kiln_fixtures() -> std::path::PathBuf {
        std::env::var_os("KILN_FIXTURES")
            .map(Into::into)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"))
    }

    #[test]
    fn fixture_configs_parse() {
        let root = kiln_fixtures().join("models");
        for arch in ["llama", "qwen3", "qwen3_moe"] {
            let c = BaseConfig::load(&root.join(arch)).unwrap();
            assert!(c.hidden_size > 0 && c.vocab_size > 0, "{arch}");
        }
        let err = BaseConfig::load(Path::new("/nonexistent")).unwrap_err().to_string();
        assert!(err.contains("config.json"), "{err}");
    }
}
