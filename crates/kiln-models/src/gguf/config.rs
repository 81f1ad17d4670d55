//! A GGUF file's `{arch}.*` metadata as the Hugging Face `config.json` it was converted
//! from, so one parser ([`Config::from_json`]) checks both.

use super::file::GgufFile;
use crate::config::Config;
use serde_json::{json, Value};

/// GGUF architecture names and the `model_type` they came from.
const ARCHES: [(&str, &str); 3] = [("llama", "llama"), ("qwen3", "qwen3"), ("qwen3moe", "qwen3_moe")];

/// The config of `f`'s model, or what is missing or unsupported.
pub fn config(f: &GgufFile) -> std::result::Result<Config, String> {
    let arch = f.get("general.architecture").and_then(|v| v.as_str()).ok_or("no general.architecture")?;
    let model_type = ARCHES.iter().find(|a| a.0 == arch).map(|a| a.1).ok_or_else(|| {
        format!("architecture {arch:?} is not supported (GGUF: {})", ARCHES.map(|a| a.0).join(", "))
    })?;
    if f.tensors.contains_key("rope_freqs.weight") {
        return Err("rope_freqs.weight (Llama 3.1 rope scaling) is not supported in GGUF files yet".into());
    }
    let num = |key: &str| f.get(&format!("{arch}.{key}")).and_then(|v| v.as_f64());
    let int = |key: &str| num(key).map(|v| v as u64);
    let vocab = int("vocab_size")
        .or_else(|| f.get("tokenizer.ggml.tokens").and_then(|t| t.as_array()).map(|t| t.len() as u64));
    let mut c = json!({
        "model_type": model_type,
        "hidden_size": int("embedding_length"),
        "intermediate_size": int("feed_forward_length"),
        "num_hidden_layers": int("block_count"),
        "num_attention_heads": int("attention.head_count"),
        "num_key_value_heads": int("attention.head_count_kv"),
        "head_dim": int("attention.key_length"),
        "vocab_size": vocab,
        "rms_norm_eps": num("attention.layer_norm_rms_epsilon"),
        "rope_theta": num("rope.freq_base").unwrap_or(10000.0),
        "max_position_embeddings": int("context_length"),
        "tie_word_embeddings": !f.tensors.contains_key("output.weight"),
        "attention_bias": f.tensors.contains_key("blk.0.attn_q.bias"),
        "eos_token_id": f.get("tokenizer.ggml.eos_token_id").and_then(|v| v.as_u64()),
    });
    if model_type == "qwen3_moe" {
        c["num_experts"] = int("expert_count").into();
        c["num_experts_per_tok"] = int("expert_used_count").into();
        c["moe_intermediate_size"] = int("expert_feed_forward_length").into();
        // llama.cpp renormalises Qwen3-MoE's top-k weights, as its checkpoints ask.
        c["norm_topk_prob"] = true.into();
    }
    // Absent keys are null, which the parser reports as missing by their HF names.
    if let Value::Object(m) = &mut c {
        m.retain(|_, v| !v.is_null());
    }
    Config::from_json(&c.to_string())
}

#[cfg(test)]
mod tests {
    use super::super::file::tests::{string, write};
    use super::*;
    use crate::config::Arch;

    #[test]
    fn llama_metadata_to_config() {
        let path = std::env::temp_dir().join(format!("kiln-gguf-cfg-{}.gguf", std::process::id()));
        let u32v = |v: u32| v.to_le_bytes().to_vec();
        let f32v = |v: f32| v.to_le_bytes().to_vec();
        let kv = [
            ("general.architecture", 8, string("llama")),
            ("llama.embedding_length", 4, u32v(64)),
            ("llama.feed_forward_length", 4, u32v(128)),
            ("llama.block_count", 4, u32v(2)),
            ("llama.attention.head_count", 4, u32v(4)),
            ("llama.attention.head_count_kv", 4, u32v(2)),
            ("llama.attention.layer_norm_rms_epsilon", 6, f32v(1e-5)),
            ("llama.rope.freq_base", 6, f32v(100000.0)),
            ("llama.context_length", 4, u32v(2048)),
            ("llama.vocab_size", 4, u32v(100)),
            ("tokenizer.ggml.eos_token_id", 4, u32v(2)),
        ];
        write(&path, &kv, &[]);
        let c = config(&GgufFile::open(&path).unwrap()).unwrap();
        assert_eq!(
            (c.arch, c.hidden_size, c.num_layers, c.num_kv_heads, c.head_dim),
            (Arch::Llama, 64, 2, 2, 16)
        );
        assert_eq!((c.vocab_size, c.rope_theta, c.eos_token_ids.clone()), (100, 100000.0, vec![2]));
        assert!(c.tie_word_embeddings && !c.qk_norm);
        write(&path, &kv[..3], &[]);
        let e = config(&GgufFile::open(&path).unwrap()).unwrap_err();
        assert!(e.contains("missing"), "{e}");
        write(&path, &[("general.architecture", 8, string("mamba"))], &[]);
        let e = config(&GgufFile::open(&path).unwrap()).unwrap_err();
        assert!(e.contains("\"mamba\" is not supported"), "{e}");
        std::fs::remove_file(&path).ok();
    }
}
