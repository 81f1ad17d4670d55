//! The OpenAI request bodies of `/v1/chat/completions` and `/v1/completions`, checked and
//! turned into what the engine runs. Every way a body can be wrong is a 400 with the
//! field named: bad JSON, a field this server does not know, a wrong type, `n` ≠ 1,
//! `max_tokens` of 0 or past the context, a prompt the context cannot hold.

use crate::error::ApiError;
use kiln_models::chat::ChatTemplate;
use kiln_models::tokenizer::Tokenizer;
use kiln_models::SamplingParams;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Which completion route a body came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/chat/completions`: `messages` through the chat template.
    Chat,
    /// `POST /v1/completions`: a raw `prompt`.
    Completion,
}

/// Fields both routes take (others that OpenAI defines are refused rather than ignored).
const COMMON_FIELDS: [&str; 12] = [
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "seed",
    "stop",
    "n",
    "stream",
    "stream_options",
    "user",
];

/// Most stop strings a request may give (OpenAI's limit).
const MAX_STOPS: usize = 4;

/// The fields of a body; each one's type is checked alone first so an error can name it.
#[derive(Deserialize)]
struct Body {
    messages: Option<Vec<Message>>,
    prompt: Option<String>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<u64>,
    repetition_penalty: Option<f64>,
    seed: Option<u64>,
    stop: Option<Stop>,
    n: Option<u64>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    // `model` and `user` are accepted and ignored: one model is served.
}

#[derive(Deserialize)]
struct Message {
    role: String,
    content: Content,
}

/// A message's content: text, or a list of text parts.
#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamOptions {
    include_usage: Option<bool>,
}

/// What the server knows of its model to check and encode a request.
pub struct ModelInfo {
    /// The name `/v1/models` lists and responses carry.
    pub name: String,
    /// Positions a sequence may fill: prompt plus generated tokens.
    pub context: usize,
    /// Encodes prompts.
    pub tokenizer: std::sync::Arc<Tokenizer>,
    /// The chat template, when the model has one.
    pub template: Option<ChatTemplate>,
    /// Sampling when the request says nothing (from generation_config.json).
    pub defaults: SamplingParams,
}

/// A checked request.
#[derive(Debug)]
pub struct Parsed {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// How tokens are chosen.
    pub sampling: SamplingParams,
    /// Text that ends generation.
    pub stop: Vec<String>,
    /// Answer as server-sent events.
    pub stream: bool,
    /// With `stream`, send a last chunk with the token counts.
    pub include_usage: bool,
}

/// Checks a body sent to `endpoint` and encodes its prompt.
pub fn parse(body: &[u8], endpoint: Endpoint, info: &ModelInfo) -> Result<Parsed, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("the body is not valid JSON: {e}"), None))?;
    let Value::Object(fields) = value else {
        return Err(ApiError::invalid("the body must be a JSON object", None));
    };
    let b = typed(fields, endpoint)?;
    if b.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid("only n = 1 is supported", Some("n")));
    }
    let stop = match b.stop {
        None => vec![],
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if stop.len() > MAX_STOPS || stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            format!("stop takes up to {MAX_STOPS} non-empty strings"),
            Some("stop"),
        ));
    }
    let (prompt, prompt_param) = match endpoint {
        Endpoint::Chat => (chat_prompt(b.messages.unwrap_or_default(), info)?, "messages"),
        Endpoint::Completion => {
            let text = b.prompt.unwrap_or_default();
            if text.is_empty() {
                return Err(ApiError::invalid("prompt is missing or empty", Some("prompt")));
            }
            (info.tokenizer.encode(&text, true).map_err(|e| ApiError::internal(e.to_string()))?, "prompt")
        }
    };
    if prompt.is_empty() || prompt.len() >= info.context {
        let msg = format!(
            "the prompt has {} tokens; this model's context holds {} (prompt and output)",
            prompt.len(),
            info.context
        );
        return Err(ApiError::invalid(msg, Some(prompt_param)).with_code("context_length_exceeded"));
    }
    let room = info.context - prompt.len();
    let max_param = if b.max_completion_tokens.is_some() { "max_completion_tokens" } else { "max_tokens" };
    let max_tokens = match b.max_completion_tokens.or(b.max_tokens) {
        None => room,
        Some(0) => return Err(ApiError::invalid(format!("{max_param} must be at least 1"), Some(max_param))),
        Some(m) if m > room as u64 => {
            let msg = format!(
                "{max_param} {m} plus the prompt's {} tokens pass the context of {}",
                prompt.len(),
                info.context
            );
            return Err(ApiError::invalid(msg, Some(max_param)).with_code("context_length_exceeded"));
        }
        Some(m) => m as usize,
    };
    let d = &info.defaults;
    let sampling = SamplingParams {
        temperature: b.temperature.unwrap_or(d.temperature),
        top_k: b.top_k.map_or(d.top_k, |k| k as usize),
        top_p: b.top_p.unwrap_or(d.top_p),
        repetition_penalty: b.repetition_penalty.unwrap_or(d.repetition_penalty),
        seed: b.seed.unwrap_or_else(fresh_seed),
    };
    check_sampling(&sampling)?;
    let stream = b.stream.unwrap_or(false);
    let include_usage = b.stream_options.and_then(|o| o.include_usage).unwrap_or(false);
    Ok(Parsed { prompt, max_tokens, sampling, stop, stream, include_usage })
}

/// The body's fields, each known to `endpoint` and of its type (an error names the field).
fn typed(fields: Map<String, Value>, endpoint: Endpoint) -> Result<Body, ApiError> {
    let own: &[&str] = match endpoint {
        Endpoint::Chat => &["messages", "max_completion_tokens"],
        Endpoint::Completion => &["prompt"],
    };
    for (key, value) in &fields {
        if !COMMON_FIELDS.contains(&key.as_str()) && !own.contains(&key.as_str()) {
            return Err(ApiError::invalid(format!("unknown field {key:?}"), Some(key)));
        }
        let alone = Map::from_iter([(key.clone(), value.clone())]);
        if let Err(e) = serde_json::from_value::<Body>(Value::Object(alone)) {
            return Err(ApiError::invalid(format!("{key}: {e}"), Some(key)));
        }
    }
    serde_json::from_value(Value::Object(fields)).map_err(|e| ApiError::invalid(e.to_string(), None))
}

/// The chat template rendered over `messages`, the assistant's turn opened, encoded.
fn chat_prompt(messages: Vec<Message>, info: &ModelInfo) -> Result<Vec<u32>, ApiError> {
    let Some(template) = &info.template else {
        return Err(ApiError::invalid("this model has no chat template; use /v1/completions", None));
    };
    if messages.is_empty() {
        return Err(ApiError::invalid("messages is missing or empty", Some("messages")));
    }
    let mut texts = Vec::with_capacity(messages.len());
    for m in &messages {
        texts.push(match &m.content {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => {
                if let Some(p) = parts.iter().find(|p| p.kind != "text") {
                    let msg = format!("content parts of type {:?} are not supported (only text)", p.kind);
                    return Err(ApiError::invalid(msg, Some("messages")));
                }
                parts.iter().map(|p| p.text.as_str()).collect()
            }
        });
    }
    let pairs: Vec<(&str, &str)> =
        messages.iter().zip(&texts).map(|(m, t)| (m.role.as_str(), t.as_str())).collect();
    let text =
        template.render(&pairs, true).map_err(|e| ApiError::invalid(e.to_string(), Some("messages")))?;
    info.tokenizer.encode(&text, false).map_err(|e| ApiError::internal(e.to_string()))
}

/// The ranges OpenAI allows (top_k and repetition_penalty as vLLM takes them).
fn check_sampling(s: &SamplingParams) -> Result<(), ApiError> {
    if !(0.0..=2.0).contains(&s.temperature) {
        return Err(ApiError::invalid("temperature must be in [0, 2]", Some("temperature")));
    }
    if !(s.top_p > 0.0 && s.top_p <= 1.0) {
        return Err(ApiError::invalid("top_p must be in (0, 1]", Some("top_p")));
    }
    if !(s.repetition_penalty > 0.0 && s.repetition_penalty.is_finite()) {
        return Err(ApiError::invalid("repetition_penalty must be > 0", Some("repetition_penalty")));
    }
    Ok(())
}

/// A seed for a request that gave none: different each time, as OpenAI's are.
fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}
