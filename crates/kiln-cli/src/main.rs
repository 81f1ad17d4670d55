//! `kiln`: info, check (and later bench, generate).

use clap::{Parser, Subcommand};
use kiln::Device;
use kiln_bench::fixtures::{self, Outcome};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "kiln", version, about = "A tensor runtime for running models locally on a GPU")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show the devices kiln can use (and, without a usable GPU, exactly why not).
    Info,
    /// Run the PyTorch fixture cases of DIR/ops.json and report pass / FAIL / not implemented.
    Check {
        /// Folder holding ops.json and ops.safetensors.
        #[arg(long, default_value = "../shared/fixtures")]
        fixtures: PathBuf,
        /// cpu, cuda, cuda:N or auto.
        #[arg(long, default_value = "cpu")]
        device: String,
    },
    /// Measure: `--suite runtime` (copy bandwidth, bf16 add, kernel cache, allocator).
    Bench {
        #[arg(long, default_value = "runtime")]
        suite: String,
        /// Write the results as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Compile every embedded CUDA kernel source with NVRTC (no GPU needed).
    Kernels {
        /// Comma-separated target architectures, e.g. sm_80,sm_90a.
        #[arg(long, default_value = "sm_80,sm_90a")]
        check: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Info => info(),
        Cmd::Check { fixtures, device } => check(&fixtures, &device),
        Cmd::Kernels { check } => compile_kernels(&check),
        Cmd::Bench { suite, json } => bench(&suite, json.as_deref()),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn info() -> kiln::Result<ExitCode> {
    println!("kiln {}", env!("CARGO_PKG_VERSION"));
    println!("cpu: {} threads", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    match kiln::cuda::availability() {
        Ok(()) => {
            let dev = kiln::cuda::device(0)?;
            println!("{}", dev.info()?);
        }
        Err(why) => println!("cuda: not available ({why}); using the CPU"),
    }
    Ok(ExitCode::SUCCESS)
}

fn check(dir: &std::path::Path, device: &str) -> kiln::Result<ExitCode> {
    let device = Device::parse(device)?;
    if let Device::Cuda(_) = device {
        if let Err(why) = kiln::cuda::availability() {
            println!("skipped (no CUDA device: {why})");
            return Ok(ExitCode::SUCCESS);
        }
    }
    let results = fixtures::run(dir, device)?;
    for r in &results {
        match &r.outcome {
            Outcome::Pass { max_err } => {
                println!("pass  {:<40} {:<24} max|Δ| {:.2e}", r.case, short(&r.op), max_err)
            }
            Outcome::Fail(msg) => println!("FAIL  {:<40} {:<24} {msg}", r.case, short(&r.op)),
            Outcome::NotImplemented => println!("skip  {:<40} {:<24} not implemented", r.case, short(&r.op)),
        }
    }
    let (p, f, s) = fixtures::summary(&results);
    println!("{p} passed, {f} failed, {s} skipped");
    Ok(if f == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn short(op: &str) -> &str {
    op.split_whitespace().next().unwrap_or(op)
}

fn compile_kernels(archs: &str) -> kiln::Result<ExitCode> {
    let mut failed = 0;
    for arch in archs.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        for src in kiln::cuda::ops::ALL_SOURCES {
            match kiln::cuda::compile_check(src, arch) {
                Ok(()) => println!("ok    {:<14} {arch}", src.name),
                Err(e) => {
                    failed += 1;
                    println!("FAIL  {:<14} {arch}\n{e}", src.name);
                }
            }
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn bench(suite: &str, json: Option<&std::path::Path>) -> kiln::Result<ExitCode> {
    if let Err(why) = kiln::cuda::availability() {
        println!("bench: no CUDA device ({why}); the {suite} suite needs one");
        return Ok(ExitCode::SUCCESS);
    }
    let value = match suite {
        "runtime" => kiln_bench::runtime::run()?,
        "fp8" => kiln_bench::fp8::run()?,
        other => {
            return Err(kiln::Error::invalid("bench", format!("unknown suite {other:?} (runtime, fp8)")))
        }
    };
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&value).expect("JSON values serialise");
        std::fs::write(path, text)
            .map_err(|e| kiln::Error::Io { path: path.display().to_string(), source: e })?;
    }
    Ok(ExitCode::SUCCESS)
}
