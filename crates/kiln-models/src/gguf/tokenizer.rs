//! The tokenizer a GGUF file carries (`tokenizer.ggml.*`) as the `tokenizer.json` the
//! `tokenizers` crate reads: a byte-level BPE vocabulary with its merges (`model` "gpt2"),
//! the pre-tokenizer its `pre` name stands for in llama.cpp, control and user-defined
//! tokens as added tokens, and a BOS post-processor when `add_bos_token` asks for one.

use super::file::GgufFile;
use serde_json::{json, Value};

/// llama.cpp's pre-tokenizer regexes (`llama-vocab.cpp`) for the `pre` names that need one.
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Token types of `tokenizer.ggml.token_type`.
const CONTROL: u64 = 3;
const USER_DEFINED: u64 = 4;

fn byte_level(use_regex: bool) -> Value {
    json!({ "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": use_regex })
}

fn split_then_bytes(regex: &str) -> Value {
    json!({ "type": "Sequence", "pretokenizers": [
        { "type": "Split", "pattern": { "Regex": regex }, "behavior": "Isolated", "invert": false },
        byte_level(false),
    ]})
}

/// The pre-tokenizer of llama.cpp's pre-tokenizer name `pre`.
fn pre_tokenizer(pre: &str) -> std::result::Result<Value, String> {
    Ok(match pre {
        "default" | "gpt2" => byte_level(true),
        "smollm" => json!({ "type": "Sequence", "pretokenizers": [
            { "type": "Digits", "individual_digits": true },
            byte_level(true),
        ]}),
        "qwen2" => split_then_bytes(QWEN2_REGEX),
        "llama-bpe" | "llama3" => split_then_bytes(LLAMA3_REGEX),
        other => {
            return Err(format!(
                "tokenizer.ggml.pre {other:?} is not supported (default, gpt2, smollm, qwen2, llama-bpe)"
            ))
        }
    })
}

/// `tokenizer.json` text for `f`'s vocabulary.
pub fn tokenizer_json(f: &GgufFile) -> std::result::Result<String, String> {
    let text = |key: &str| f.get(key).and_then(|v| v.as_str());
    let strings = |key: &str| -> std::result::Result<Vec<&str>, String> {
        let a = f.get(key).and_then(|v| v.as_array()).ok_or_else(|| format!("no {key}"))?;
        a.iter().map(|v| v.as_str().ok_or_else(|| format!("{key} holds a non-string"))).collect()
    };
    let model = text("tokenizer.ggml.model").ok_or("no tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(format!("tokenizer.ggml.model {model:?} is not supported (gpt2: byte-level BPE)"));
    }
    let tokens = strings("tokenizer.ggml.tokens")?;
    let merges = strings("tokenizer.ggml.merges")?;
    let types: Vec<u64> = match f.get("tokenizer.ggml.token_type").and_then(|v| v.as_array()) {
        Some(a) => a.iter().map(|v| v.as_u64().unwrap_or(1)).collect(),
        None => vec![1; tokens.len()],
    };
    let vocab: serde_json::Map<String, Value> =
        tokens.iter().enumerate().map(|(i, t)| (t.to_string(), i.into())).collect();
    let added: Vec<Value> = tokens
        .iter()
        .zip(&types)
        .enumerate()
        .filter(|(_, (_, &ty))| ty == CONTROL || ty == USER_DEFINED)
        .map(|(id, (t, &ty))| {
            json!({ "id": id, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": ty == CONTROL })
        })
        .collect();
    let bos = f.get("tokenizer.ggml.bos_token_id").and_then(|v| v.as_u64());
    let add_bos = matches!(f.get("tokenizer.ggml.add_bos_token"), Some(super::file::Value::Bool(true)));
    let post = match bos.and_then(|id| Some((id, *tokens.get(id as usize)?))).filter(|_| add_bos) {
        Some((id, t)) => json!({
            "type": "TemplateProcessing",
            "single": [{ "SpecialToken": { "id": t, "type_id": 0 } }, { "Sequence": { "id": "A", "type_id": 0 } }],
            "pair": [{ "SpecialToken": { "id": t, "type_id": 0 } }, { "Sequence": { "id": "A", "type_id": 0 } },
                     { "Sequence": { "id": "B", "type_id": 1 } }],
            "special_tokens": { t: { "id": t, "ids": [id], "tokens": [t] } },
        }),
        None => Value::Null,
    };
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer(text("tokenizer.ggml.pre").unwrap_or("default"))?,
        "post_processor": post,
        "decoder": byte_level(true),
        "model": { "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                   "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                   "ignore_merges": false, "vocab": vocab, "merges": merges },
    });
    Ok(doc.to_string())
}

/// The text of special token `key` (`tokenizer.ggml.bos_token_id`…), or "".
pub fn token_text(f: &GgufFile, key: &str) -> String {
    let id = f.get(key).and_then(|v| v.as_u64());
    let tokens = f.get("tokenizer.ggml.tokens").and_then(|v| v.as_array());
    match (id, tokens) {
        (Some(id), Some(t)) => t.get(id as usize).and_then(|v| v.as_str()).unwrap_or_default().to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::file::tests::{string, write};
    use super::*;

    fn strings(items: &[&str]) -> Vec<u8> {
        let mut out = [8u32.to_le_bytes().to_vec(), (items.len() as u64).to_le_bytes().to_vec()].concat();
        for s in items {
            out.extend(string(s));
        }
        out
    }

    /// A tiny byte-level BPE: "ab" merges, "Ġ" is the byte-level space, `<s>` a control
    /// token added in front (add_bos_token) and left out of decoding.
    #[test]
    fn byte_level_bpe_from_metadata() {
        let path = std::env::temp_dir().join(format!("kiln-gguf-tok-{}.gguf", std::process::id()));
        let types: Vec<u8> = [3u32, 1, 1, 1, 1, 1].iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>();
        let types = [5u32.to_le_bytes().to_vec(), 6u64.to_le_bytes().to_vec(), types].concat();
        let kv = [
            ("tokenizer.ggml.model", 8, string("gpt2")),
            ("tokenizer.ggml.pre", 8, string("smollm")),
            ("tokenizer.ggml.tokens", 9, strings(&["<s>", "a", "b", "ab", "Ġ", "1"])),
            ("tokenizer.ggml.token_type", 9, types),
            ("tokenizer.ggml.merges", 9, strings(&["a b"])),
            ("tokenizer.ggml.bos_token_id", 4, 0u32.to_le_bytes().to_vec()),
            ("tokenizer.ggml.add_bos_token", 7, vec![1]),
        ];
        write(&path, &kv, &[]);
        let f = GgufFile::open(&path).unwrap();
        let tok = tokenizers::Tokenizer::from_bytes(tokenizer_json(&f).unwrap().as_bytes()).unwrap();
        let ids = tok.encode("ab a11", true).unwrap().get_ids().to_vec();
        assert_eq!(ids, [0, 3, 4, 1, 5, 5]);
        assert_eq!(tok.decode(&ids, true).unwrap(), "ab a11");
        assert_eq!(token_text(&f, "tokenizer.ggml.bos_token_id"), "<s>");
        write(&path, &[("tokenizer.ggml.model", 8, string("llama"))], &[]);
        let e = tokenizer_json(&GgufFile::open(&path).unwrap()).unwrap_err();
        assert!(e.contains("\"llama\" is not supported"), "{e}");
        std::fs::remove_file(&path).ok();
    }
}
