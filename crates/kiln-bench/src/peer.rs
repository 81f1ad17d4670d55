//! PyTorch peers: `bench/torch_peer.py --suite NAME` runs the suite's workloads by the same
//! method on the same GPU, in the same call, and prints one JSON object.

use kiln::{Error, Result};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// What `--peer` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Run it if python3 with torch is there; say why not otherwise.
    IfPresent,
    /// Run it; a failure is an error.
    Required,
    /// Do not run it.
    Skip,
}

impl Want {
    pub(crate) fn parse(peer: Option<&str>) -> Result<Want> {
        match peer {
            None => Ok(Want::IfPresent),
            Some("torch") => Ok(Want::Required),
            Some("none") => Ok(Want::Skip),
            Some(other) => Err(Error::invalid("bench", format!("unknown peer {other:?} (torch, none)"))),
        }
    }
}

/// `bench/<name>` under `$KILN_BENCH_DIR`, the working directory, or the source tree.
fn script(name: &str) -> Option<PathBuf> {
    // KILN_BENCH_DIR first: a staged build's scripts must not lose to an older checkout's
    // bench/ in the working directory (the GPU machine runs from one).
    let mut dirs: Vec<PathBuf> = kiln::settings::BENCH_DIR.get().ok().flatten().into_iter().collect();
    dirs.push(PathBuf::from("bench"));
    dirs.push(PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench")));
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.exists())
}

const PEER: &str = "torch_peer.py";

fn spawn(suite: &str, stdin: Option<&Value>) -> std::result::Result<Value, String> {
    let path = script(PEER).ok_or_else(|| format!("bench/{PEER} not found"))?;
    let mut child = Command::new("python3")
        .arg(&path)
        .args(["--suite", suite])
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.to_string().as_bytes()).map_err(|e| format!("writing to python3: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!("{} ({})", out.status, tail.join(" | ")));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("peer output is not JSON: {e}"))
}

/// Runs `bench/torch_peer.py --suite <suite>` (feeding it `stdin` as JSON when given) as
/// `want` says. Returns its JSON, or `Err(why)` inside `Ok` when the peer was skipped or
/// could not run.
pub fn torch(suite: &str, stdin: Option<&Value>, want: Want) -> Result<std::result::Result<Value, String>> {
    if want == Want::Skip {
        return Ok(Err("--peer none".into()));
    }
    match spawn(suite, stdin) {
        Ok(v) => Ok(Ok(v)),
        Err(why) if want == Want::Required => {
            Err(Error::invalid("bench", format!("torch peer failed: {why}")))
        }
        Err(why) => {
            println!("torch peer skipped: {why}");
            Ok(Err(why))
        }
    }
}

/// Adds `torch_us` and `speedup` (PyTorch's µs over kiln's) to each of `results` whose
/// `name` the peer's output `torch` timed.
pub fn merge(results: &mut [Value], torch: &Value) {
    let empty = vec![];
    for r in results.iter_mut() {
        let hit = torch["results"].as_array().unwrap_or(&empty).iter().find(|p| p["name"] == r["name"]);
        if let (Some(tus), Some(us)) = (hit.and_then(|p| p["us"].as_f64()), r["us"].as_f64()) {
            r["torch_us"] = serde_json::json!(tus);
            r["speedup"] = serde_json::json!(tus / us);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_script_is_found_and_given_the_suite() {
        // torch_peer.py checks --suite before it imports torch, so this runs without torch.
        match torch("no-such-suite", None, Want::IfPresent).unwrap() {
            Err(why) if why.starts_with("python3:") => eprintln!("no python3 here: {why}"),
            Err(why) => assert!(why.contains("invalid choice: 'no-such-suite'"), "{why}"),
            Ok(v) => panic!("unexpected peer output {v}"),
        }
        assert_eq!(torch("linear", None, Want::Skip).unwrap(), Err("--peer none".into()));
    }
}
