//! `tokenizer.json` through the `tokenizers` crate, and incremental detokenisation for
//! streaming output.

use kiln::{Error, Result};
use std::path::{Path, PathBuf};

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl Tokenizer {
    /// Reads `dir/tokenizer.json`.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Err(Error::File { path: path.display().to_string(), msg: "not found".into() });
        }
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| Error::File { path: path.display().to_string(), msg: e.to_string() })?;
        Ok(Tokenizer { inner, path })
    }

    /// A tokenizer from `tokenizer.json` text (a GGUF file's, converted); `path` names
    /// where it came from in errors.
    pub fn from_json(json: &str, path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_bytes(json.as_bytes())
            .map_err(|e| Error::File { path: path.display().to_string(), msg: e.to_string() })?;
        Ok(Tokenizer { inner, path: path.to_path_buf() })
    }

    fn err(&self, e: tokenizers::Error) -> Error {
        Error::File { path: self.path.display().to_string(), msg: e.to_string() }
    }

    /// Token ids of `text`; `add_special_tokens` adds what the post-processor adds (BOS…).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        Ok(self.inner.encode(text, add_special_tokens).map_err(|e| self.err(e))?.get_ids().to_vec())
    }

    /// Text of `ids`, special tokens left out. Ids outside the vocabulary are skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, true).map_err(|e| self.err(e))
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn stream(&self) -> TextStream<'_> {
        TextStream { tok: self, ids: vec![], printed: 0 }
    }
}

/// Turns a stream of token ids into text pieces: a piece is released once it no longer
/// ends in an incomplete UTF-8 sequence. The window restarts after each newline, so
/// decoding stays cheap on long outputs.
pub struct TextStream<'a> {
    tok: &'a Tokenizer,
    ids: Vec<u32>,
    printed: usize,
}

impl TextStream<'_> {
    /// The new text `id` completes (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = self.tok.decode(&self.ids)?;
        if text.ends_with('\u{FFFD}') || text.len() < self.printed {
            return Ok(String::new());
        }
        let piece = text[self.printed..].to_string();
        if text.ends_with('\n') {
            self.ids.clear();
            self.printed = 0;
        } else {
            self.printed = text.len();
        }
        Ok(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures_dir;

    #[test]
    fn fixture_tokenizer_matches_transformers() {
        let dir = fixtures_dir().join("models/llama");
        let tok = Tokenizer::load(&dir).unwrap();
        let golden = kiln::io::safetensors::load(dir.join("golden.safetensors"), kiln::Device::Cpu).unwrap();
        let want: Vec<u32> =
            golden["text_ids"].to_vec::<i64>().unwrap().into_iter().map(|i| i as u32).collect();
        let text: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap()).unwrap();
        let text = text["text"].as_str().unwrap();
        assert_eq!(tok.encode(text, true).unwrap(), want);
        assert_eq!(tok.decode(&want).unwrap(), text);
        let mut s = tok.stream();
        let streamed: String = want.iter().map(|&i| s.push(i).unwrap()).collect();
        assert_eq!(streamed, text);
        assert_eq!(tok.token_id("<|im_end|>"), Some(2));
        let err = Tokenizer::load(Path::new("/nonexistent")).err().unwrap().to_string();
        assert!(err.contains("tokenizer.json"), "{err}");
    }

    #[test]
    fn stream_holds_back_split_utf8() {
        // Byte-level BPE: "é" is two byte tokens; the first alone decodes to U+FFFD.
        let tok = Tokenizer::load(&fixtures_dir().join("models/qwen3")).unwrap();
        let ids = tok.encode("é!", false).unwrap();
        let mut s = tok.stream();
        let pieces: Vec<String> = ids.iter().map(|&i| s.push(i).unwrap()).collect();
        assert_eq!(pieces.concat(), "é!");
        if ids.len() == 3 {
            assert_eq!(pieces[0], "");
        }
    }
}
