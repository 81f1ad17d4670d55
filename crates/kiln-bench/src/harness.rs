//! `kiln bench`: runs suites, wraps their results with provenance, compares runs.
//! The four families stay separate in the output: throughput (decode), op latency
//! (runtime, linear, reductions, fp8, grouped), correctness, memory.

use crate::report::provenance;
use kiln::{Device, Error, Result};
use serde_json::{json, Value};

/// Version of the result layout below; bump when a key moves.
pub const SCHEMA: u64 = 1;

/// Suites run by a plain `kiln bench` on a GPU (every family: about 30 s on the H200 with
/// the PyTorch peers), and on a CPU.
pub const DEFAULT_GPU: &[&str] = ALL_GPU;
/// Suites run by a plain `kiln bench` on the CPU.
pub const DEFAULT_CPU: &[&str] = &["cpu", "correctness"];
/// Every suite, for `--suite all` on a GPU (decode carries the memory family).
pub const ALL_GPU: &[&str] = &["runtime", "correctness", "linear", "reductions", "fp8", "grouped", "decode"];
/// The op-latency family, for `--suite ops`.
pub const OPS: &[&str] = &["runtime", "linear", "reductions", "fp8", "grouped"];

/// The correctness family: every fixture case on `device`.
pub fn correctness(device: Device) -> Result<Value> {
    let dir = crate::fixtures::default_dir();
    let results = crate::fixtures::run(&dir, device)?;
    let (p, f, s) = crate::fixtures::summary(&results);
    let cases: Vec<Value> = results
        .iter()
        .map(|r| {
            let (status, detail) = match &r.outcome {
                crate::fixtures::Outcome::Pass { max_err } => ("pass", json!(max_err)),
                crate::fixtures::Outcome::Fail(m) => ("fail", json!(m)),
                crate::fixtures::Outcome::NotImplemented => ("not_implemented", Value::Null),
            };
            json!({ "case": r.case, "op": r.op, "status": status, "max_abs_err_or_error": detail })
        })
        .collect();
    println!("correctness on {device}: {p} passed, {f} failed, {s} not implemented");
    Ok(
        json!({ "device": device.to_string(), "passed": p, "failed": f, "not_implemented": s, "cases": cases }),
    )
}

/// Settings of the suites that take any.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// PyTorch peer: `Some("torch")` requires it, `Some("none")` skips it, `None` runs it if it can.
    pub peer: Option<&'a str>,
    /// Model shape of the decode suite.
    pub preset: &'a str,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options { peer: None, preset: "llama-3.1-8b" }
    }
}

/// Runs one named suite.
pub fn run_suite(name: &str, device: Device, opts: &Options) -> Result<Value> {
    match name {
        "cpu" => crate::cpu::run(1024, 16 << 20, 10),
        "runtime" => crate::runtime::run(),
        "correctness" => correctness(device),
        "linear" => crate::linear::run(opts.peer),
        "reductions" => crate::reductions::run(opts.peer),
        "fp8" => crate::fp8::run(opts.peer),
        "grouped" => crate::grouped::run(opts.peer),
        "experts" => crate::experts::run(),
        "linalg" => crate::linalg::run(opts.peer),
        "attention" => crate::attention::run(opts.peer),
        "decode" if device == Device::Cpu => crate::cpu_decode::run(opts.preset),
        "decode" => crate::decode::run(opts.preset, opts.peer),
        "memory" => crate::decode::memory(opts.preset),
        "long" => crate::long_decode::run(opts.preset, device, crate::long_decode::LONG_TOKENS),
        "vae" => crate::vae::run(device),
        other => Err(Error::invalid(
            "bench",
            format!(
                "unknown suite {other:?} (cpu, runtime, linear, reductions, fp8, grouped, experts, linalg, attention, ops, decode, memory, long, vae, correctness, default, all)"
            ),
        )),
    }
}

/// Runs `suites` and returns the whole result document.
pub fn run(suites: &[&str], device: Device, opts: &Options) -> Result<Value> {
    let mut out = serde_json::Map::new();
    for s in suites {
        println!("== {s}");
        out.insert(s.to_string(), run_suite(s, device, opts)?);
    }
    for o in kiln::cuda::kernel_overrides() {
        println!(
            "NOTE: kernel source {} was {} (KILN_KERNEL_DIR, sha256 {}), not the built-in one",
            o.name,
            o.path.display(),
            &o.sha256[..16]
        );
    }
    Ok(json!({ "schema": SCHEMA, "provenance": provenance(), "suites": out }))
}

/// Checks a result document has the keys every consumer relies on.
pub fn validate(doc: &Value) -> std::result::Result<(), String> {
    if doc["schema"].as_u64() != Some(SCHEMA) {
        return Err(format!("schema is {:?}, expected {SCHEMA}", doc["schema"]));
    }
    for key in ["commit", "dirty", "kiln_version", "host", "unix_time", "device"] {
        if doc["provenance"].get(key).is_none() {
            return Err(format!("provenance has no {key:?}"));
        }
    }
    if !doc["suites"].is_object() {
        return Err("no \"suites\" object".into());
    }
    Ok(())
}

/// Numeric leaves that measure something, by their path (`suite.key.key`).
fn figures(v: &Value, path: String, out: &mut Vec<(String, f64)>) {
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| figures(v, format!("{path}.{k}"), out)),
        // A list's entries are named by what tells them apart (a decode context, a case's
        // name or shape), else by their index, so that two runs pair up entry by entry.
        Value::Array(items) => items.iter().enumerate().for_each(|(i, v)| {
            let label = ["name", "label", "case", "shape", "context"]
                .iter()
                .find_map(|k| v.get(k).map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string)))
                .unwrap_or_else(|| i.to_string());
            figures(v, format!("{path}[{label}]"), out)
        }),
        Value::Number(n) => {
            let wanted = ["median_ms", "gbps", "tokens_per_s", "gflops", "tflops", "us"];
            if wanted.iter().any(|w| path.ends_with(w)) {
                out.push((path.trim_start_matches('.').to_string(), n.as_f64().unwrap_or(f64::NAN)));
            }
        }
        _ => {}
    }
}

/// A table of the figures two result documents share: old, new, change.
pub fn compare(old: &Value, new: &Value) -> String {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    figures(&old["suites"], String::new(), &mut a);
    figures(&new["suites"], String::new(), &mut b);
    let mut s = format!("{:<60} {:>12} {:>12} {:>8}\n", "figure", "old", "new", "change");
    for (k, nv) in &b {
        if let Some((_, ov)) = a.iter().find(|(ka, _)| ka == k) {
            let key = if k.len() > 60 { &k[k.len() - 60..] } else { k };
            s += &format!("{key:<60} {ov:>12.4} {nv:>12.4} {:>+7.1}%\n", 100.0 * (nv - ov) / ov);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_document_has_the_schema() {
        let doc = json!({ "schema": SCHEMA, "provenance": provenance(),
            "suites": { "cpu": crate::cpu::run(32, 1024, 2).unwrap() } });
        validate(&doc).unwrap();
        // No KILN_KERNEL_DIR here: no kernel source replaced.
        assert_eq!(doc["provenance"]["kernel_overrides"], json!([]));
        assert!(validate(&json!({ "schema": SCHEMA, "suites": {} })).is_err());
        let table = compare(&doc, &doc);
        assert!(table.contains("cpu.matmul_f32.stats.median_ms"), "{table}");
        assert!(table.contains("+0.0%"), "{table}");
        // Figures inside lists pair up by what names their entries.
        let run = |a: f64, b: f64| {
            json!({ "suites": { "decode": { "presets": { "p": { "decode": [
                { "context": 128, "tokens_per_s": a }, { "context": 1024, "tokens_per_s": b } ] } } } } })
        };
        let table = compare(&run(10.0, 8.0), &run(11.0, 8.0));
        assert!(
            table.contains("decode.presets.p.decode[128].tokens_per_s") && table.contains("+10.0%"),
            "{table}"
        );
        assert!(
            table.contains("decode.presets.p.decode[1024].tokens_per_s") && table.contains("+0.0%"),
            "{table}"
        );
    }

    #[test]
    fn correctness_suite_counts_cases() {
        let v = correctness(Device::Cpu).unwrap();
        assert!(v["passed"].as_u64().unwrap() >= 15);
        assert_eq!(v["failed"].as_u64(), Some(0));
    }
}
