//! The chat template of a model folder (`chat_template.jinja`, or `chat_template` in
//! `tokenizer_config.json`), rendered with minijinja the way transformers renders it
//! (trim_blocks, lstrip_blocks, Python string methods, `raise_exception`). A template is
//! code from the model folder: it runs on a budget of work ([`FUEL`], minijinja's fuel;
//! recursion is bounded by minijinja itself) and of output ([`MAX_OUTPUT`]), so a hostile
//! one ends in an error instead of running forever or filling memory.

use kiln::{Error, Result};
use minijinja::syntax::SyntaxConfig;
use minijinja::{context, Environment, ErrorKind};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Instructions a render may run: chat templates need thousands, this allows millions.
pub const FUEL: u64 = 5_000_000;
/// Bytes a render may write.
pub const MAX_OUTPUT: usize = 16 << 20;

/// The rendered text, refusing to grow past [`MAX_OUTPUT`]; `overflowed` says why a write
/// failed (minijinja reports only "failed to write output").
#[derive(Default)]
struct BoundedOutput {
    text: Vec<u8>,
    overflowed: bool,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.text.len() + buf.len() > MAX_OUTPUT {
            self.overflowed = true;
            return Err(std::io::Error::other("output bound"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A model's Jinja chat template with the BOS and EOS token texts it may refer to.
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

/// A special token as tokenizer_config.json writes it: a string or `{"content": …}`.
fn token_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o.get("content").and_then(Value::as_str).unwrap_or_default().to_string(),
        _ => String::new(),
    }
}

impl ChatTemplate {
    /// The template of a Hugging Face folder: `chat_template.jinja`, else
    /// `tokenizer_config.json`'s `chat_template` (a list's `default` entry); special tokens from
    /// the latter. An error when the model has none.
    pub fn load(dir: &Path) -> Result<Self> {
        Self::find(dir)?.ok_or_else(|| Error::File {
            path: dir.join("tokenizer_config.json").display().to_string(),
            msg: "the model has no chat template".into(),
        })
    }

    /// As [`load`](ChatTemplate::load), `None` when the model has no template (unreadable
    /// or malformed files are still errors).
    pub fn find(dir: &Path) -> Result<Option<Self>> {
        let cfg_path = dir.join("tokenizer_config.json");
        let file_err = |msg: String| Error::File { path: cfg_path.display().to_string(), msg };
        let cfg: Value = match std::fs::read_to_string(&cfg_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| file_err(e.to_string()))?,
            Err(_) => Value::Null,
        };
        let jinja = dir.join("chat_template.jinja");
        let source = if jinja.exists() {
            std::fs::read_to_string(&jinja)
                .map_err(|e| Error::Io { path: jinja.display().to_string(), source: e })?
        } else {
            match cfg.get("chat_template") {
                Some(Value::String(s)) => s.clone(),
                // A list of named templates: take "default".
                Some(Value::Array(list)) => list
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                    .and_then(|t| t.get("template")?.as_str())
                    .ok_or_else(|| file_err("no \"default\" entry in the chat_template list".into()))?
                    .to_string(),
                _ => return Ok(None),
            }
        };
        Ok(Some(ChatTemplate {
            source,
            bos_token: token_text(cfg.get("bos_token")),
            eos_token: token_text(cfg.get("eos_token")),
        }))
    }

    /// A template from its source text and the texts of the BOS and EOS tokens.
    pub fn from_source(source: &str, bos_token: &str, eos_token: &str) -> Self {
        ChatTemplate { source: source.into(), bos_token: bos_token.into(), eos_token: eos_token.into() }
    }

    /// The prompt text of `(role, content)` messages, ending with the assistant's turn
    /// opened when `add_generation_prompt`. Encode it without adding special tokens.
    pub fn render(&self, messages: &[(&str, &str)], add_generation_prompt: bool) -> Result<String> {
        let err = |e: minijinja::Error| Error::invalid("chat template", format!("{e:#}"));
        let mut env = Environment::new();
        env.set_syntax(SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build().map_err(err)?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_fuel(Some(FUEL));
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        });
        let tmpl = env.template_from_str(&self.source).map_err(err)?;
        let messages: Vec<minijinja::Value> = messages
            .iter()
            .map(|&(role, content)| {
                let (r, c) =
                    (("role".to_string(), role.to_string()), ("content".to_string(), content.to_string()));
                minijinja::Value::from_object(BTreeMap::from([r, c]))
            })
            .collect();
        let ctx = context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        let mut out = BoundedOutput::default();
        if let Err(e) = tmpl.render_captured_to(ctx, &mut out) {
            return Err(match out.overflowed {
                true => Error::invalid(
                    "chat template",
                    format!("the rendered prompt would pass {MAX_OUTPUT} bytes"),
                ),
                false => err(e),
            });
        }
        String::from_utf8(out.text).map_err(|e| Error::invalid("chat template", e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of Qwen's ChatML template, with a Python string method in it.
    const CHATML: &str = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content.strip() + \
                          '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_chatml() {
        let t = ChatTemplate::from_source(CHATML, "", "<|im_end|>");
        let s = t.render(&[("user", " hi ")], true).unwrap();
        assert_eq!(s, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
        let bad = ChatTemplate::from_source("{{ raise_exception('no system role') }}", "", "");
        assert!(bad.render(&[], true).unwrap_err().to_string().contains("no system role"));
    }

    #[test]
    fn hostile_templates_stop_with_an_error() {
        for (source, want) in [
            ("{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}", "fuel"),
            ("{% for a in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "bytes"),
            ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion"),
        ] {
            let t = ChatTemplate::from_source(source, "", "");
            let started = std::time::Instant::now();
            let e = t.render(&[("user", "hi")], true).unwrap_err().to_string();
            assert!(e.contains(want), "{source}: {e}");
            assert!(started.elapsed().as_secs() < 10, "{source}: {:?}", started.elapsed());
        }
    }

    #[test]
    fn loads_from_tokenizer_config() {
        let dir = std::env::temp_dir().join(format!("kiln-chat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = serde_json::json!({
            "bos_token": { "content": "<s>" },
            "chat_template": [{ "name": "default", "template": "{{ bos_token }}{{ messages[0].content }}" }],
        });
        std::fs::write(dir.join("tokenizer_config.json"), cfg.to_string()).unwrap();
        let t = ChatTemplate::load(&dir).unwrap();
        assert_eq!(t.render(&[("user", "x")], true).unwrap(), "<s>x");
        std::fs::write(dir.join("tokenizer_config.json"), "{}").unwrap();
        let e = ChatTemplate::load(&dir).err().unwrap().to_string();
        assert!(e.contains("no chat template"), "{e}");
        assert!(ChatTemplate::find(&dir).unwrap().is_none());
        std::fs::write(dir.join("tokenizer_config.json"), "{").unwrap();
        assert!(ChatTemplate::find(&dir).is_err(), "a malformed file is an error, not \"no template\"");
        std::fs::remove_dir_all(&dir).ok();
    }
}
