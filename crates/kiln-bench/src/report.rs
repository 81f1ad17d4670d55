//! Provenance recorded with every result: what was measured, where, with which build.

use serde_json::{json, Value};

/// Git commit and dirty flag of the working tree the binary runs in (build-time
/// values when git is not available there, e.g. on the GPU machine).
fn git() -> (String, bool) {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    // The GPU machine runs a copy without .git: scripts/stage-gpu.sh passes the commit.
    if let Ok(Some(c)) = kiln::settings::COMMIT.get() {
        let dirty = c.ends_with("-dirty");
        return (c.trim_end_matches("-dirty").to_string(), dirty);
    }
    match run(&["rev-parse", "HEAD"]) {
        Some(c) => {
            (c, run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty()))
        }
        None => ("unknown".to_string(), false),
    }
}

/// The kernel sources compiled from `KILN_KERNEL_DIR` so far (name, path, SHA-256): figures
/// measured with them are not the commit's kernels.
fn kernel_overrides() -> Value {
    kiln::cuda::kernel_overrides()
        .iter()
        .map(|o| json!({ "name": o.name, "path": o.path.display().to_string(), "sha256": o.sha256 }))
        .collect()
}

/// Commit, dirty flag, kiln version, host, timestamp, the device's name, compute
/// capability, driver, CUDA and NVRTC versions (or "cpu"), and any kernel sources that
/// replaced the built-in ones (`kernel_overrides`, empty normally). Call it after the
/// measurements, so that the overrides they compiled are listed.
pub fn provenance() -> Value {
    let (commit, dirty) = git();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_string();
    let timestamp =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let device = match kiln::cuda::availability() {
        Ok(()) => match kiln::cuda::device(0).and_then(|d| d.info()) {
            Ok(i) => serde_json::to_value(&i).unwrap_or(Value::Null),
            Err(e) => json!({ "error": e.to_string() }),
        },
        Err(why) => json!({ "name": "cpu", "cuda_unavailable": why }),
    };
    json!({
        "commit": commit,
        "dirty": dirty,
        "kiln_version": env!("CARGO_PKG_VERSION"),
        "host": host,
        "unix_time": timestamp,
        "device": device,
        "kernel_overrides": kernel_overrides(),
    })
}

/// A column of a printed results table: header, the row's key, decimals (numbers) and width.
pub struct Col(pub &'static str, pub &'static str, pub usize, pub usize);

/// Prints `rows` under a header line: each row's `name` left-aligned in `name_width`, then
/// each column's value right-aligned (a number with its decimals, a string as it is, `-`
/// where the row has none, e.g. no PyTorch peer).
pub fn print_table(name_header: &str, name_width: usize, cols: &[Col], rows: &[Value]) {
    let line = |name: &str, cells: Vec<String>| {
        let cells: Vec<String> =
            cells.iter().zip(cols).map(|(c, col)| format!("{c:>w$}", w = col.3)).collect();
        println!("{name:<name_width$} {}", cells.join(" "));
    };
    line(name_header, cols.iter().map(|c| c.0.to_string()).collect());
    for r in rows {
        let cell = |c: &Col| match &r[c.1] {
            Value::Number(n) => format!("{:.p$}", n.as_f64().unwrap_or(f64::NAN), p = c.2),
            Value::String(s) => s.clone(),
            _ => "-".to_string(),
        };
        line(r["name"].as_str().unwrap_or(""), cols.iter().map(cell).collect());
    }
}
