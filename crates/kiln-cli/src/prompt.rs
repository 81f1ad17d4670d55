//! `kiln generate`'s prompt: read from the command line or stdin, wrapped in the model's
//! chat template when it has one, and the seed of its sampling.

use kiln::{Error, Result};
use kiln_models::{chat::ChatTemplate, tokenizer::Tokenizer};
use std::io::Read;

/// The text of `--prompt ARG`: ARG, or stdin when ARG is `-` (its final line break dropped,
/// as `echo` adds one). Empty text is an error: a model has nothing to continue.
pub fn read(arg: &str) -> Result<String> {
    let text = match arg {
        "-" => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Error::Io { path: "stdin".into(), source: e })?;
            s.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&s).to_string()
        }
        _ => arg.to_string(),
    };
    match text.is_empty() {
        true => Err(Error::invalid("generate", "the prompt is empty")),
        false => Ok(text),
    }
}

/// The prompt's token ids: `text` as the user message after an optional system message in
/// `template`, or, without a template, as it is with the tokenizer's special tokens (BOS).
pub fn encode(
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
    system: Option<&str>,
    text: &str,
) -> Result<Vec<u32>> {
    match (template, system) {
        (Some(t), _) => {
            let messages: Vec<(&str, &str)> =
                system.map(|s| ("system", s)).into_iter().chain([("user", text)]).collect();
            tok.encode(&t.render(&messages, true)?, false)
        }
        (None, Some(_)) => {
            Err(Error::invalid("generate", "--system needs a chat template, and the model has none"))
        }
        (None, None) => tok.encode(text, true),
    }
}

/// A seed from the operating system's randomness (the keys std draws for its hash maps),
/// different in every run.
pub fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0u8)
}
