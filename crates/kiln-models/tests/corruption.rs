//! Issue 37, bounded in CI: a few hundred mutated copies of the fixture files (configs of
//! the models and VAEs, tokenizers, chat templates, safetensors headers) go through
//! kiln's loaders; each must end in `Ok` or a typed error. A panic fails the test; an
//! abort kills it. Seeded, so a failure reproduces; `scripts/tour.py` is the long form
//! (the `kiln` binary, with time and memory limits).

use kiln::io::safetensors::SafetensorsFile;
use kiln::{DType, Device};
use kiln_models::chat::ChatTemplate;
use kiln_models::config::fixtures_dir;
use kiln_models::tokenizer::Tokenizer;
use kiln_models::wan_vae::{VaeConfig, WanVae};
use kiln_models::{Config, Model};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// xorshift64*: a tiny seeded generator, so the cases are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// Values a hostile or broken file may hold where a size is expected.
fn extreme(rng: &mut Rng) -> Value {
    let big: [u64; 8] = [0, 1, 3, 1 << 31, (1 << 32) + 1, 1 << 40, 1_000_000_000_000, u64::MAX];
    match rng.below(6) {
        0 => Value::from(-1),
        1 => Value::from(0.5),
        2 => Value::Null,
        3 => Value::from("7"),
        _ => Value::from(*rng.pick(&big)),
    }
}

/// Paths to every number of a JSON tree (numbers are where sizes live).
fn numbers(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Number(_) => out.push(at.clone()),
        Value::Object(m) => {
            for (k, x) in m {
                at.push(k.clone());
                numbers(x, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate().take(32) {
                at.push(i.to_string());
                numbers(x, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// One number of `v` set to an extreme value, or (one case in four) the text damaged.
fn mutate_json(rng: &mut Rng, text: &str) -> String {
    if rng.below(4) == 0 {
        let mut b = text.as_bytes().to_vec();
        match rng.below(2) {
            0 => b.truncate(rng.below(b.len())),
            _ => {
                let i = rng.below(b.len());
                b[i] = *rng.pick(b"{}[]\",:9-e");
            }
        }
        return String::from_utf8_lossy(&b).into_owned();
    }
    let mut v: Value = serde_json::from_str(text).unwrap();
    let mut paths = vec![];
    numbers(&v, &mut vec![], &mut paths);
    let path = rng.pick(&paths).clone();
    let slot = path.iter().fold(&mut v, |cur, k| match cur {
        Value::Array(a) => &mut a[k.parse::<usize>().unwrap()],
        other => &mut other[k.as_str()],
    });
    *slot = extreme(rng);
    v.to_string()
}

/// A scratch copy of a fixture folder, its big files linked rather than copied.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str, src: &Path) -> Scratch {
        let dir = std::env::temp_dir().join(format!("kiln-corrupt-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(src).unwrap() {
            let e = e.unwrap();
            let to = dir.join(e.file_name());
            std::fs::remove_file(&to).ok();
            if e.file_name().to_string_lossy().ends_with(".safetensors") {
                std::os::unix::fs::symlink(e.path(), &to).unwrap();
            } else {
                std::fs::copy(e.path(), &to).unwrap();
            }
        }
        Scratch(dir)
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.0.join(name), text).unwrap();
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

#[test]
fn mutated_model_configs_load_or_fail_cleanly() {
    let mut rng = Rng(0x37);
    for arch in kiln_models::golden::ARCHS {
        let src = fixtures_dir().join("models").join(arch);
        let scratch = Scratch::new(&format!("config-{arch}"), &src);
        let text = std::fs::read_to_string(src.join("config.json")).unwrap();
        for _ in 0..24 {
            let mutated = mutate_json(&mut rng, &text);
            if Config::from_json(&mutated).is_err() {
                continue;
            }
            scratch.write("config.json", &mutated);
            let _ = Model::load(&scratch.0, Device::Cpu, DType::F32);
        }
    }
}

#[test]
fn mutated_vae_configs_load_or_fail_cleanly() {
    let mut rng = Rng(0x38);
    for name in kiln_models::wan_vae::FIXTURES {
        let src = fixtures_dir().join("vae").join(name);
        let scratch = Scratch::new(&format!("vae-{name}"), &src);
        let text = std::fs::read_to_string(src.join("config.json")).unwrap();
        for _ in 0..30 {
            let mutated = mutate_json(&mut rng, &text);
            if VaeConfig::parse(&mutated).is_err() {
                continue;
            }
            scratch.write("config.json", &mutated);
            let _ = WanVae::load(&scratch.0, Device::Cpu, DType::F32);
        }
    }
}

#[test]
fn mutated_tokenizers_load_or_fail_cleanly() {
    let mut rng = Rng(0x39);
    for arch in ["llama", "qwen3"] {
        let src = fixtures_dir().join("models").join(arch);
        let scratch = Scratch::new(&format!("tok-{arch}"), &src);
        let text = std::fs::read_to_string(src.join("tokenizer.json")).unwrap();
        for _ in 0..40 {
            scratch.write("tokenizer.json", &mutate_json(&mut rng, &text));
            if let Ok(tok) = Tokenizer::load(&scratch.0) {
                let ids = tok.encode("hello <|im_end|> there", true).unwrap_or_default();
                let _ = tok.decode(&ids);
            }
        }
    }
}

#[test]
fn hostile_templates_render_or_fail_cleanly() {
    let mut rng = Rng(0x40);
    let pieces = [
        "{% for i in range(N) %}",
        "{% endfor %}",
        "{{ 'ab' * N }}",
        "{% if messages %}",
        "{% endif %}",
        "{{ messages[N].content }}",
        "{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}",
        "{{ raise_exception('x') }}",
        "{% set ns = namespace(s='a') %}",
    ];
    for _ in 0..120 {
        let n = rng.pick(&["0", "7", "1000", "100000", "1000000000"]).to_string();
        let source: String =
            (0..1 + rng.below(6)).map(|_| rng.pick(&pieces).replace('N', &n)).collect::<Vec<_>>().concat();
        let _ = ChatTemplate::from_source(&source, "<s>", "</s>").render(&[("user", "hi")], true);
    }
}

#[test]
fn mutated_safetensors_headers_open_or_fail_cleanly() {
    let mut rng = Rng(0x41);
    let bytes = std::fs::read(fixtures_dir().join("models/llama/model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    let path = std::env::temp_dir().join(format!("kiln-corrupt-{}.safetensors", std::process::id()));
    for _ in 0..120 {
        let h = mutate_json(&mut rng, header);
        let mut file = (h.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(h.as_bytes());
        file.extend_from_slice(&bytes[8 + n..]);
        std::fs::write(&path, &file).unwrap();
        if let Ok(f) = SafetensorsFile::open(&path) {
            for name in f.names() {
                let _ = f.load(&name, Device::Cpu);
            }
        }
    }
    std::fs::remove_file(&path).ok();
}
