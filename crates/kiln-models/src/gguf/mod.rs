//! llama.cpp's GGUF files (`kiln generate --model file.gguf`, or a folder holding one and
//! no config.json): the container ([`file`](mod@file)), its tensor types dequantised to the model
//! dtype on load ([`dequant`]: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K), the
//! config from `{arch}.*` metadata ([`config`]: llama, qwen3, qwen3moe), the byte-level
//! BPE tokenizer from `tokenizer.ggml.*` ([`tokenizer`]) and the chat template from
//! `tokenizer.chat_template`. Weights go through the same model builder as a Hugging Face
//! folder's ([`source`]). Quantised weights are dense after loading: no quantised kernels.

pub mod config;
pub mod dequant;
pub mod file;
pub mod source;
pub mod tokenizer;

use crate::chat::ChatTemplate;
use crate::config::{Config, GenerationConfig};
use crate::decoder::Model;
use crate::loader::Quantize;
use file::GgufFile;
use kiln::{DType, Device, Error, Result};
use std::path::{Path, PathBuf};

/// The GGUF file `path` names: `path` itself when it ends in `.gguf`, or the one `.gguf`
/// file of a folder without a config.json; `None` for a Hugging Face folder.
pub fn find(path: &Path) -> Result<Option<PathBuf>> {
    let is_gguf = |p: &Path| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    if !path.is_dir() {
        return Ok(is_gguf(path).then(|| path.to_path_buf()));
    }
    if path.join("config.json").exists() {
        return Ok(None);
    }
    let io = |e| Error::Io { path: path.display().to_string(), source: e };
    let mut found: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_gguf(p.as_path()))
        .collect();
    match found.len() {
        0 | 1 => Ok(found.pop()),
        n => Err(Error::File {
            path: path.display().to_string(),
            msg: format!("{n} .gguf files and no config.json; name one with --model"),
        }),
    }
}

/// An opened GGUF model file and its config.
pub struct GgufModel {
    /// The file.
    pub file: GgufFile,
    /// The decoder config its metadata describes.
    pub config: Config,
}

impl GgufModel {
    /// Opens `path` and reads the config from its metadata.
    pub fn open(path: &Path) -> Result<Self> {
        let file = GgufFile::open(path)?;
        let config = config::config(&file).map_err(|msg| file.error(msg))?;
        Ok(GgufModel { file, config })
    }

    /// The tokenizer built from the file's `tokenizer.ggml.*` vocabulary.
    pub fn tokenizer(&self) -> Result<crate::tokenizer::Tokenizer> {
        let json = tokenizer::tokenizer_json(&self.file).map_err(|msg| self.file.error(msg))?;
        crate::tokenizer::Tokenizer::from_json(&json, self.file.path())
    }

    /// The chat template of `tokenizer.chat_template`; an error when the file has none.
    pub fn chat_template(&self) -> Result<ChatTemplate> {
        self.find_chat_template()
            .ok_or_else(|| self.file.error("the model has no chat template (tokenizer.chat_template)".into()))
    }

    /// The chat template of `tokenizer.chat_template`, if the file has one.
    pub fn find_chat_template(&self) -> Option<ChatTemplate> {
        let source = self.file.get("tokenizer.chat_template")?.as_str()?;
        let text = |key| tokenizer::token_text(&self.file, key);
        Some(ChatTemplate::from_source(
            source,
            &text("tokenizer.ggml.bos_token_id"),
            &text("tokenizer.ggml.eos_token_id"),
        ))
    }

    /// Stop tokens from the metadata; greedy unless told otherwise (GGUF stores no
    /// sampling defaults).
    pub fn generation_config(&self) -> GenerationConfig {
        GenerationConfig { eos_token_ids: self.config.eos_token_ids.clone(), ..Default::default() }
    }

    /// The model with every weight dequantised to `dtype` on `device`.
    pub fn load(&self, device: Device, dtype: DType, quantize: Quantize) -> Result<Model> {
        let mut src =
            source::GgufSource::new(&self.file, &self.config, device, dtype).with_quantize(quantize);
        let model = Model::build(self.config.clone(), &mut src);
        src.finish()?;
        model
    }
}
