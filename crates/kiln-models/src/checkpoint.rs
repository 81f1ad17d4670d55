//! A model's files, in either form kiln reads: a Hugging Face folder (config.json,
//! safetensors, tokenizer.json, generation_config.json, a chat template) or a GGUF file
//! (or a folder holding one and no config.json). `kiln generate` and `kiln serve` open
//! their `--model` through this, so each takes both.

use crate::chat::ChatTemplate;
use crate::gguf::{self, GgufModel};
use crate::tokenizer::Tokenizer;
use crate::{Config, GenerationConfig, Model, Quantize};
use kiln::{DType, Device, Result};
use std::path::{Path, PathBuf};

/// An opened model: where its config, tokenizer, chat template, sampling defaults and
/// weights come from.
pub enum Checkpoint {
    /// A Hugging Face model folder.
    Folder(PathBuf),
    /// A GGUF file: its metadata read, its tensors mapped.
    Gguf(Box<GgufModel>),
}

impl Checkpoint {
    /// `path` as a GGUF file, a folder holding one `.gguf` and no config.json, or a
    /// Hugging Face folder (checked as each part is read).
    pub fn open(path: &Path) -> Result<Checkpoint> {
        Ok(match gguf::find(path)? {
            Some(file) => Checkpoint::Gguf(Box::new(GgufModel::open(&file)?)),
            None => Checkpoint::Folder(path.to_path_buf()),
        })
    }

    /// The decoder's config.
    pub fn config(&self) -> Result<Config> {
        match self {
            Checkpoint::Folder(dir) => Config::load(dir),
            Checkpoint::Gguf(g) => Ok(g.config.clone()),
        }
    }

    /// The tokenizer (tokenizer.json, or the GGUF vocabulary and merges).
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        match self {
            Checkpoint::Folder(dir) => Tokenizer::load(dir),
            Checkpoint::Gguf(g) => g.tokenizer(),
        }
    }

    /// The chat template, `None` when the model ships none (a malformed one is an error).
    pub fn chat_template(&self) -> Result<Option<ChatTemplate>> {
        match self {
            Checkpoint::Folder(dir) => ChatTemplate::find(dir),
            Checkpoint::Gguf(g) => Ok(g.find_chat_template()),
        }
    }

    /// Stop tokens and sampling defaults (generation_config.json; a GGUF file stores only
    /// its stop tokens), with `config`'s EOS ids where none are named.
    pub fn generation_config(&self, config: &Config) -> Result<GenerationConfig> {
        match self {
            Checkpoint::Folder(dir) => GenerationConfig::load(dir, config),
            Checkpoint::Gguf(g) => Ok(g.generation_config()),
        }
    }

    /// The model's weights on `device` in `dtype` (GGUF tensors dequantised), linear
    /// layers quantised as `quantize` says.
    pub fn load(&self, device: Device, dtype: DType, quantize: Quantize) -> Result<Model> {
        match self {
            Checkpoint::Folder(dir) => Model::load_quantized(dir, device, dtype, quantize),
            Checkpoint::Gguf(g) => g.load(device, dtype, quantize),
        }
    }

    /// Rank `comm.shard()`'s part of the model (`crate::parallel`), as [`Checkpoint::load`]
    /// otherwise; a Hugging Face folder only (GGUF files load whole).
    pub fn load_parallel(
        &self,
        device: Device,
        dtype: DType,
        quantize: Quantize,
        comm: std::sync::Arc<dyn crate::parallel::Collective>,
    ) -> Result<Model> {
        match self {
            Checkpoint::Folder(dir) => Model::load_parallel(dir, device, dtype, quantize, comm),
            Checkpoint::Gguf(_) => Err(kiln::Error::invalid(
                "tensor parallel",
                "a GGUF file loads whole; split a model from its Hugging Face folder",
            )),
        }
    }

    /// A short name for the model: the GGUF file's stem or the folder's name.
    pub fn name(&self) -> String {
        let path = match self {
            Checkpoint::Folder(dir) => dir.as_path(),
            Checkpoint::Gguf(g) => g.file.path(),
        };
        path.file_stem().map_or("model".into(), |n| n.to_string_lossy().into_owned())
    }
}
