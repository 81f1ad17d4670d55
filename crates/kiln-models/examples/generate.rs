//! Generate text from Rust: load a Hugging Face folder, tokenize, stream greedy tokens.
//!
//! `cargo run --release -p kiln-models --example generate -- [MODEL_DIR] [PROMPT]`
//! (default: the repository's fixture Llama, whose random weights make nonsense text).

use kiln::{DType, Device};
use kiln_models::tokenizer::Tokenizer;
use kiln_models::{GenerateOptions, GenerationConfig, Model};
use std::io::Write;

fn main() -> kiln::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir =
        args.next().map_or_else(|| kiln_models::config::fixtures_dir().join("models/llama"), Into::into);
    let prompt = args.next().unwrap_or_else(|| "The capital of France is".to_string());
    let device = if kiln::cuda::availability().is_ok() { Device::Cuda(0) } else { Device::Cpu };

    let tok = Tokenizer::load(&dir)?;
    let ids = tok.encode(&prompt, true)?;
    let model = Model::load(&dir, device, DType::BF16)?;
    let eos_token_ids = GenerationConfig::load(&dir, &model.config)?.eos_token_ids;
    let opts = GenerateOptions::greedy(32, eos_token_ids);

    let mut text = tok.stream();
    print!("{prompt}");
    let stats = kiln_models::generate(&model, &ids, &opts, |id| {
        print!("{}", text.push(id)?);
        std::io::stdout().flush().map_err(|e| kiln::Error::Io { path: "stdout".into(), source: e })
    })?;
    println!("\n{} tokens, {:.1} tokens/s on {device}", stats.tokens.len(), stats.decode_tokens_per_sec());
    Ok(())
}
