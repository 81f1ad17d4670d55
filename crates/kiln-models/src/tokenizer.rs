//! `tokenizer.json` through the `tokenizers` crate, and incremental detokenisation for
//! streaming output. A broken file cannot take the process down: the post-processor's
//! special tokens are checked against the vocabulary on load, padding (which a file may
//! set to any length) is switched off, and every call into the crate runs contained, so
//! a panic in it is an error naming the file.

use kiln::{Error, Result};
use serde_json::Value;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// A Hugging Face `tokenizer.json` tokenizer whose calls cannot panic the process (see
/// the module docs).
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
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Io { path: path.display().to_string(), source: e })?;
        Self::from_json(&text, &path)
    }

    /// A tokenizer from `tokenizer.json` text (a file's, or a GGUF file's vocabulary
    /// converted); `path` names where it came from in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<Self> {
        let file_err = |msg: String| Error::File { path: path.display().to_string(), msg };
        let json: Value = serde_json::from_str(text).map_err(|e| file_err(e.to_string()))?;
        let post = json.get("post_processor").unwrap_or(&Value::Null);
        // Ids past u32 fail the crate's own parser with a message that names no key: check
        // them first, then against the vocabulary once it is known.
        check_post_processor(post, u32::MAX as usize).map_err(file_err)?;
        let mut inner = contained(|| text.parse::<tokenizers::Tokenizer>())
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(file_err)?;
        check_post_processor(post, inner.get_vocab_size(true)).map_err(file_err)?;
        // kiln encodes one sequence at a time: padding would only append pad tokens.
        inner.with_padding(None);
        let tok = Tokenizer { inner, path: path.to_path_buf() };
        // A post-processor or normaliser that fails on any text fails here, not mid-run.
        tok.encode("a", true)?;
        Ok(tok)
    }

    /// Runs `f` on the inner tokenizer, a panic in it becoming an error.
    fn call<T>(&self, f: impl FnOnce(&tokenizers::Tokenizer) -> tokenizers::Result<T>) -> Result<T> {
        let msg = match contained(|| f(&self.inner)) {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e.to_string(),
            Err(panic) => panic,
        };
        Err(Error::File { path: self.path.display().to_string(), msg })
    }

    /// Token ids of `text`; `add_special_tokens` adds what the post-processor adds (BOS…).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.call(|t| Ok(t.encode(text, add_special_tokens)?.get_ids().to_vec()))
    }

    /// Text of `ids`, special tokens left out. Ids outside the vocabulary are skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.call(|t| t.decode(ids, true))
    }

    /// The id of token text `token`, if it is in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// An incremental decoder for streaming output.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream { tok: self, ids: vec![], printed: 0 }
    }
}

/// `f()`, or the message of the panic it raised.
fn contained<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let what =
            p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
        format!("the tokenizers crate panicked: {}", what.unwrap_or_default())
    })
}

/// The special tokens a post-processor adds must be tokens of the vocabulary, each with one
/// id: `TemplateProcessing`'s template pieces must name an entry of its `special_tokens`.
fn check_post_processor(p: &Value, vocab: usize) -> std::result::Result<(), String> {
    let id_ok = |id: Option<u64>| id.is_some_and(|i| (i as usize) < vocab);
    let bad = |what: String| Err(format!("post_processor: {what} (vocabulary of {vocab})"));
    match p.get("type").and_then(Value::as_str) {
        Some("TemplateProcessing") => {
            let specials = p.get("special_tokens").and_then(Value::as_object);
            for (name, t) in specials.into_iter().flatten() {
                let ids = t.get("ids").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                let tokens = t.get("tokens").and_then(Value::as_array).map_or(0, Vec::len);
                if ids.len() != tokens || !ids.iter().all(|i| id_ok(i.as_u64())) {
                    return bad(format!(
                        "special token {name:?} has ids {} for {tokens} tokens",
                        Value::from(ids)
                    ));
                }
            }
            for piece in ["single", "pair"].iter().filter_map(|k| p.get(k)?.as_array()).flatten() {
                let id = piece.get("SpecialToken").and_then(|s| s.get("id")).and_then(Value::as_str);
                if let Some(id) = id.filter(|id| !specials.is_some_and(|s| s.contains_key(*id))) {
                    return bad(format!("the template names {id:?}, which special_tokens lacks"));
                }
            }
            Ok(())
        }
        Some("BertProcessing" | "RobertaProcessing") => {
            for key in ["sep", "cls"] {
                if !id_ok(p.get(key).and_then(|t| t.get(1)).and_then(Value::as_u64)) {
                    return bad(format!("{key} {}", p.get(key).unwrap_or(&Value::Null)));
                }
            }
            Ok(())
        }
        Some("Sequence") => p
            .get("processors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .try_for_each(|q| check_post_processor(q, vocab)),
        _ => Ok(()),
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
    fn broken_post_processors_are_errors() {
        let dir = fixtures_dir().join("models/llama");
        let mut json: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap()).unwrap();
        let tmp = std::env::temp_dir().join(format!("kiln-tok-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let template = |special: Value| {
            serde_json::json!({"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": special})
        };
        for (post, want) in [
            (
                template(serde_json::json!({"<s>": {"id": "<s>", "ids": [1, 2], "tokens": ["<s>"]}})),
                "ids [1,2]",
            ),
            (
                template(serde_json::json!({"<s>": {"id": "<s>", "ids": [1000000000], "tokens": ["<s>"]}})),
                "1000000000",
            ),
            (
                serde_json::json!({"type": "BertProcessing", "sep": ["[SEP]", 1u64 << 40], "cls": ["[CLS]", 1]}),
                "sep",
            ),
        ] {
            json["post_processor"] = post;
            std::fs::write(tmp.join("tokenizer.json"), json.to_string()).unwrap();
            let e = Tokenizer::load(&tmp).err().unwrap().to_string();
            assert!(e.contains("post_processor") && e.contains(want), "{e}");
        }
        // A sound template loads and adds its token.
        json["post_processor"] =
            template(serde_json::json!({"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}));
        std::fs::write(tmp.join("tokenizer.json"), json.to_string()).unwrap();
        assert_eq!(Tokenizer::load(&tmp).unwrap().encode("a", true).unwrap()[0], 1);
        std::fs::remove_dir_all(&tmp).ok();
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
