//! `kiln`: info, check, bench, generate, vae.

use clap::{Parser, Subcommand};
use kiln::Device;
use kiln_bench::fixtures::{self, Outcome};
use std::path::PathBuf;
use std::process::ExitCode;

mod prompt;

#[derive(Parser)]
#[command(name = "kiln", version, about = "A tensor runtime for running models locally on a GPU")]
struct Cli {
    /// More log output on stderr: -v shows kiln's debug events (which path an op took,
    /// kernel compilation), -vv everything. RUST_LOG (e.g. `kiln=debug`) overrides it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show the devices kiln can use (and, without a usable GPU, exactly why not).
    Info,
    /// Run the PyTorch fixture cases of DIR/ops.json and report pass / FAIL / not implemented.
    Check {
        /// Folder holding ops.json and ops.safetensors (default: $KILN_FIXTURES, else the
        /// repository's fixtures/).
        #[arg(long)]
        fixtures: Option<PathBuf>,
        /// cpu, cuda, cuda:N or auto.
        #[arg(long, default_value = "cpu")]
        device: String,
    },
    /// Measure op latency, throughput, correctness and memory. Without --suite: a default
    /// set (about two minutes on a GPU; a reduced CPU set without one, saying why).
    Bench {
        /// cpu, runtime, linear, reductions, fp8, grouped, experts, linalg, attention, ops (runtime to grouped), decode, memory,
        /// long (10,000 tokens of --preset with memory sampled at three levels), vae, correctness,
        /// default, all.
        #[arg(long, default_value = "default")]
        suite: String,
        /// cpu, cuda, cuda:N or auto.
        #[arg(long, default_value = "auto")]
        device: String,
        /// Model shape of the decode suite: llama-3.1-8b, qwen3-8b, qwen3-30b-a3b, lfm2-8b-a1b,
        /// qwen3.6-35b-a3b or all (a `-fp8` suffix, e.g. llama-3.1-8b-fp8, gives it FP8 linear
        /// weights). The shapes are the config.json files of bench/presets/, built in. With
        /// --device cpu: qwen3-0.6b or llama-3.2-1b in f32, beside the measured memory
        /// bandwidth (any other name runs both).
        #[arg(long, default_value = "llama-3.1-8b")]
        preset: String,
        /// Linear weights of the decode and memory suites' models: none (bf16) or fp8
        /// (per-row FP8, the same as the preset's `-fp8` variant).
        #[arg(long, default_value = "none")]
        quantize: String,
        /// Write the results as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Print a table of changes against an earlier result JSON.
        #[arg(long)]
        compare: Option<PathBuf>,
        /// Write PNG and SVG charts (GB/s per linear shape, % of the floor per op) into this folder.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// PyTorch peer of suites that have one: torch (required) or none; default: run it if it can.
        #[arg(long)]
        peer: Option<String>,
    },
    /// Generate text with a Hugging Face model folder (llama, qwen3, qwen3_moe, lfm2_moe,
    /// qwen3_5_moe_text, or a multimodal qwen3_5_moe's text model).
    Generate(GenerateArgs),
    /// Encode video to latents or decode latents to video with a Wan VAE folder (diffusers
    /// AutoencoderKLWan: config.json, diffusion_pytorch_model.safetensors).
    Vae(VaeArgs),
    /// Serve a Hugging Face model folder over an OpenAI-compatible HTTP API
    /// (/v1/chat/completions, /v1/completions, /v1/models, /health, /metrics).
    Serve(ServeArgs),
    /// Compile every embedded CUDA kernel source with NVRTC (no GPU needed).
    Kernels {
        /// Comma-separated target architectures, e.g. sm_80,sm_90a.
        #[arg(long, default_value = "sm_80,sm_90a")]
        check: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let r = match cli.cmd {
        Cmd::Info => info(),
        Cmd::Check { fixtures, device } => check(&fixtures.unwrap_or_else(fixtures::default_dir), &device),
        Cmd::Kernels { check } => compile_kernels(&check),
        Cmd::Bench { suite, device, preset, quantize, json, compare, plot, peer } => {
            kiln_models::Quantize::parse(&quantize).and_then(|q| {
                // The decode and memory suites read FP8 from the preset name's suffix.
                let preset = match q {
                    kiln_models::Quantize::Fp8 if !preset.ends_with("-fp8") => format!("{preset}-fp8"),
                    _ => preset,
                };
                let opts = kiln_bench::harness::Options { peer: peer.as_deref(), preset: &preset };
                bench(&suite, &device, &opts, json.as_deref(), compare.as_deref(), plot.as_deref())
            })
        }
        Cmd::Generate(args) => generate(args).or_else(quiet_broken_pipe),
        Cmd::Vae(args) => vae(args),
        Cmd::Serve(args) => serve(args),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Library events (fallbacks taken, kernel cache problems) go to stderr: warnings by
/// default, more with -v / -vv, or whatever RUST_LOG asks for.
fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "warn,kiln=debug,kiln_models=debug,kiln_bench=debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(true).init();
}

fn info() -> kiln::Result<ExitCode> {
    println!("kiln {}", env!("CARGO_PKG_VERSION"));
    println!("cpu: {} threads", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    match kiln::cuda::availability() {
        Ok(()) => {
            let dev = kiln::cuda::device(0)?;
            println!("{}", dev.info()?);
            let m = dev.memory_stats();
            let (free, total) = dev.driver_mem_info()?;
            println!(
                "  allocator: {} B live (peak {}), {} B reserved (peak {}); driver: {} of {} B used",
                m.live_bytes,
                m.peak_live_bytes,
                m.reserved_bytes,
                m.peak_reserved_bytes,
                total - free,
                total
            );
        }
        Err(why) => println!("cuda: not available ({why}); using the CPU"),
    }
    println!("settings (environment variable = current value: what it does):");
    for s in &kiln::settings::ALL {
        println!("  {} = {}: {}", s.env(), s.current(), s.doc());
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
    let mut results = fixtures::run(dir, device)?;
    results.extend(fixtures::run_models(dir, device));
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
                Ok(None) => println!("ok    {:<14} {arch}", src.name),
                Ok(Some(o)) => {
                    println!("ok    {:<14} {arch}  (KILN_KERNEL_DIR: {})", src.name, o.path.display())
                }
                Err(e) => {
                    failed += 1;
                    println!("FAIL  {:<14} {arch}\n{e}", src.name);
                }
            }
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn bench(
    suite: &str,
    device: &str,
    opts: &kiln_bench::harness::Options,
    json: Option<&std::path::Path>,
    compare: Option<&std::path::Path>,
    plot: Option<&std::path::Path>,
) -> kiln::Result<ExitCode> {
    use kiln_bench::harness;
    let device = Device::parse(device)?;
    let gpu = device.is_cuda() && kiln::cuda::availability().is_ok();
    let suites: Vec<&str> = match suite {
        "default" if gpu => harness::DEFAULT_GPU.to_vec(),
        "default" | "all" if !gpu => {
            let why = kiln::cuda::availability().err().unwrap_or_else(|| "--device cpu".into());
            println!("reduced CPU suite: no GPU in use ({why})");
            harness::DEFAULT_CPU.to_vec()
        }
        "all" => harness::ALL_GPU.to_vec(),
        "ops" => harness::OPS.to_vec(),
        one => vec![one],
    };
    let doc = harness::run(&suites, device, opts)?;
    let io = |path: &std::path::Path, e: std::io::Error| kiln::Error::Io {
        path: path.display().to_string(),
        source: e,
    };
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&doc).expect("JSON values serialise"))
            .map_err(|e| io(path, e))?;
    }
    if let Some(dir) = plot {
        for chart in kiln_bench::plot::write(&doc, dir)? {
            println!("chart: {}", chart.display());
        }
    }
    if let Some(path) = compare {
        let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
        let old: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| kiln::Error::File { path: path.display().to_string(), msg: e.to_string() })?;
        print!("{}", harness::compare(&old, &doc));
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
struct GenerateArgs {
    /// Model folder (config.json, *.safetensors, tokenizer.json), or a llama.cpp GGUF
    /// file (llama, qwen3, qwen3moe; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K
    /// tensors, dequantised to --dtype on load), or a folder holding one GGUF file, or a
    /// Hub id ORG/NAME[@REVISION] found in the Hugging Face cache (HF_HUB_CACHE, HF_HOME).
    #[arg(long)]
    model: String,
    /// The prompt text; `-` reads it from stdin.
    #[arg(long)]
    prompt: String,
    /// Send the prompt as it is, not as a user message in the model's chat template
    /// (which is applied by default when the model has one).
    #[arg(long)]
    no_chat_template: bool,
    /// A system message before the prompt (needs the chat template).
    #[arg(long, conflicts_with = "no_chat_template")]
    system: Option<String>,
    /// The chat template is the default now; kept so that older command lines still run.
    #[arg(long, hide = true)]
    _chat: bool,
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Weights as bf16 or f32 (converted on load); also the activations' dtype. Default:
    /// bf16 on a GPU; on the CPU bf16 where its GEMV reads 16-bit weights at memory speed
    /// (AVX-512: half the bytes, 1.3–1.5× the tokens/s), else f32 (the portable kernel's
    /// widening pass makes bf16 the slower one).
    #[arg(long)]
    dtype: Option<String>,
    /// none, or fp8: quantise each linear weight (attention, MLP, experts) on load to FP8
    /// with per-output-channel scales, about half the memory. FP8 checkpoints (weights
    /// stored as float8_e4m3fn with weight_scale / weight_scale_inv) load as FP8 anyway.
    #[arg(long, default_value = "none")]
    quantize: String,
    /// Queue every decode step's kernels one by one instead of replaying one captured CUDA
    /// graph per step (what greedy decoding on CUDA does by default).
    #[arg(long)]
    eager: bool,
    /// Split the model over N ranks (tensor parallelism: attention heads, MLP and expert
    /// columns, LM-head rows), one thread each: on CUDA rank r uses the device after the
    /// chosen one by r, on the CPU they share it. The ranks meet on the host (no NCCL yet),
    /// so this checks the split rather than speeds it up. Hugging Face folders only.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    tp: u16,
    /// As --tp N, but a MoE model's routed experts go whole to the ranks, E / N each
    /// (expert parallelism), instead of each expert being split by columns.
    #[arg(long, conflicts_with = "tp", value_parser = clap::value_parser!(u16).range(1..))]
    ep: Option<u16>,
    /// 0 = greedy (default: generation_config.json's when it samples, else greedy).
    #[arg(long)]
    temperature: Option<f64>,
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long)]
    top_p: Option<f64>,
    #[arg(long)]
    repetition_penalty: Option<f64>,
    /// Seed of the sampling draws (default: a random one; the stats line shows it).
    #[arg(long)]
    seed: Option<u64>,
}

/// Streams the generated text to stdout; prefill and decode tokens/s go to stderr.
fn generate(a: GenerateArgs) -> kiln::Result<ExitCode> {
    use kiln_models::parallel::ExpertSplit;
    let device = model_device(&a.device)?;
    let dtype = parse_dtype("generate", a.dtype.as_deref().unwrap_or(default_dtype(device)))?;
    let text = prompt::read(&a.prompt)?;
    let dir = kiln_models::hub::resolve(&a.model)?;
    let quantize = kiln_models::Quantize::parse(&a.quantize).map_err(|_| {
        kiln::Error::invalid(
            "generate",
            format!("--quantize {:?} ({})", a.quantize, kiln_models::Quantize::VALUES),
        )
    })?;
    let checkpoint = kiln_models::Checkpoint::open(&dir)?;
    let tok = checkpoint.tokenizer()?;
    let template = if a.no_chat_template { None } else { checkpoint.chat_template()? };
    let prompt = prompt::encode(&tok, template.as_ref(), a.system.as_deref(), &text)?;
    // Drawn once: every rank must sample alike.
    let seed = a.seed.unwrap_or_else(prompt::random_seed);
    let (world, experts) = match a.ep {
        Some(n) => (n, ExpertSplit::Whole),
        None => (a.tp, ExpertSplit::Columns),
    };
    if world > 1 {
        // Every rank runs the same steps; rank 0 speaks for them all.
        let ranks = kiln_models::parallel::run_ranks(world.into(), experts, |comm| {
            let rank = comm.shard().rank;
            let device = match device {
                Device::Cuda(first) => Device::Cuda(first + rank),
                Device::Cpu => Device::Cpu,
            };
            let model = checkpoint.load_parallel(device, dtype, quantize, comm)?;
            if rank == 0 {
                generate_with(&a, &checkpoint, &tok, &model, &prompt, seed)
            } else {
                let opts = generate_options(&a, &checkpoint, &model, seed)?;
                kiln_models::generate(&model, &prompt, &opts, |_| Ok(())).map(|_| ExitCode::SUCCESS)
            }
        })?;
        return Ok(ranks[0]);
    }
    let model = checkpoint.load(device, dtype, quantize)?;
    generate_with(&a, &checkpoint, &tok, &model, &prompt, seed)
}

/// The sampling options of `a` over the model's generation config, drawing from `seed`.
fn generate_options(
    a: &GenerateArgs,
    checkpoint: &kiln_models::Checkpoint,
    model: &kiln_models::Model,
    seed: u64,
) -> kiln::Result<kiln_models::GenerateOptions> {
    let gcfg = checkpoint.generation_config(&model.config)?;
    let sampling = kiln_models::SamplingParams {
        temperature: a.temperature.unwrap_or(if gcfg.do_sample {
            gcfg.temperature.unwrap_or(1.0)
        } else {
            0.0
        }),
        top_k: a.top_k.unwrap_or(if gcfg.do_sample { gcfg.top_k.unwrap_or(50) } else { 0 }),
        top_p: a.top_p.or(gcfg.top_p.filter(|_| gcfg.do_sample)).unwrap_or(1.0),
        repetition_penalty: a.repetition_penalty.or(gcfg.repetition_penalty).unwrap_or(1.0),
        seed,
    };
    let opts = kiln_models::GenerateOptions {
        max_tokens: a.max_tokens,
        sampling,
        eos_token_ids: gcfg.eos_token_ids,
        eager: a.eager,
    };
    Ok(opts)
}

/// Generates with a loaded model (the whole, or rank 0's part), streaming the text to
/// stdout and the stats to stderr.
fn generate_with(
    a: &GenerateArgs,
    checkpoint: &kiln_models::Checkpoint,
    tok: &kiln_models::tokenizer::Tokenizer,
    model: &kiln_models::Model,
    prompt: &[u32],
    seed: u64,
) -> kiln::Result<ExitCode> {
    use std::io::Write;
    let (device, dtype) = (model.device(), model.dtype());
    let w = model.weight_stats();
    let size = |b: usize| match b {
        b if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64),
        b => format!("{:.1} KiB", b as f64 / 1024.0),
    };
    eprintln!(
        "weights: {} ({} B); linear layers {}, of which fp8 {}",
        size(w.total),
        w.total,
        size(w.linear),
        size(w.fp8)
    );
    let opts = generate_options(a, checkpoint, model, seed)?;
    let mut stream = tok.stream();
    let mut out = std::io::stdout().lock();
    let stdout_err = |e| kiln::Error::Io { path: STDOUT.into(), source: e };
    let stats = kiln_models::generate(model, prompt, &opts, |id| {
        write!(out, "{}", stream.push(id)?).and_then(|_| out.flush()).map_err(stdout_err)
    })?;
    writeln!(out).map_err(stdout_err)?;
    if stats.tokens.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let world = model.shard().world;
    let ranks = if world > 1 { format!(" (rank 0 of {world})") } else { String::new() };
    eprintln!(
        "{}{} on {device}{ranks}: prefill {} tokens, {:.1} tokens/s; decode {} tokens, {:.1} tokens/s ({}); seed {seed}",
        dtype,
        if w.fp8 > 0 { " (fp8 weights)" } else { "" },
        stats.prompt_tokens,
        stats.prefill_tokens_per_sec(),
        stats.decode_steps,
        stats.decode_tokens_per_sec(),
        if stats.graph { "CUDA graph" } else { "eager" }
    );
    Ok(ExitCode::SUCCESS)
}

/// What generate's stdout errors name as their path.
const STDOUT: &str = "stdout";

/// A reader of stdout that went away (`kiln generate … | head`) ends the run quietly with
/// success, as it does for other Unix tools (Rust ignores SIGPIPE, so a write fails instead).
fn quiet_broken_pipe(e: kiln::Error) -> kiln::Result<ExitCode> {
    match &e {
        kiln::Error::Io { path, source }
            if path == STDOUT && source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            Ok(ExitCode::SUCCESS)
        }
        _ => Err(e),
    }
}

/// `--device` of the model commands; `auto` that found no usable GPU says why in a warning.
fn model_device(s: &str) -> kiln::Result<Device> {
    let device = Device::parse(s)?;
    if let (Device::Cpu, "auto", Err(why)) = (device, s, kiln::cuda::availability()) {
        tracing::warn!("running on the CPU: no GPU in use ({why})");
    }
    Ok(device)
}

/// `--dtype` of the model commands: bf16 or f32.
fn parse_dtype(op: &'static str, s: &str) -> kiln::Result<kiln::DType> {
    match s {
        "bf16" => Ok(kiln::DType::BF16),
        "f32" => Ok(kiln::DType::F32),
        other => Err(kiln::Error::invalid(op, format!("--dtype {other:?} (bf16, f32)"))),
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum VaeDirection {
    /// Video [B, 3, 1 + 4k, H, W] in [-1, 1] → latent mean [B, z_dim, 1 + k, H/s, W/s].
    Encode,
    /// Latents [B, z_dim, T, h, w] → video [B, 3, 1 + 4(T − 1), h·s, w·s] in [-1, 1].
    Decode,
}

#[derive(clap::Args)]
struct VaeArgs {
    direction: VaeDirection,
    /// Model folder (config.json, diffusion_pytorch_model.safetensors), or its Hub id
    /// ORG/NAME[@REVISION] in the Hugging Face cache.
    #[arg(long)]
    model: String,
    /// A safetensors file holding the input tensor.
    #[arg(long)]
    input: PathBuf,
    /// Which tensor of --input (default: its only one).
    #[arg(long)]
    tensor: Option<String>,
    /// Where to write the result (as f32, named "latents" or "video").
    #[arg(long)]
    output: PathBuf,
    /// cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Weights and activations: bf16 or f32.
    #[arg(long, default_value = "bf16")]
    dtype: String,
}

/// Runs the VAE on one tensor; the time (and on a GPU the memory peaks) go to stderr.
fn vae(a: VaeArgs) -> kiln::Result<ExitCode> {
    use kiln_models::wan_vae::WanVae;
    let device = model_device(&a.device)?;
    let dtype = parse_dtype("vae", &a.dtype)?;
    let model = kiln_models::hub::resolve(&a.model)?;
    let inputs = kiln::io::safetensors::load(&a.input, Device::Cpu)?;
    let file_err = |msg: String| kiln::Error::File { path: a.input.display().to_string(), msg };
    let x = match &a.tensor {
        Some(name) => inputs.get(name).ok_or_else(|| file_err(format!("no tensor {name:?}")))?,
        None if inputs.len() == 1 => inputs.values().next().expect("one tensor"),
        None => {
            let mut names: Vec<&String> = inputs.keys().collect();
            names.sort();
            return Err(file_err(format!("{} tensors ({names:?}); name one with --tensor", names.len())));
        }
    };
    let peaks = kiln_bench::peaks::Peaks::start(device)?;
    let vae = WanVae::load(&model, device, dtype)?;
    let t0 = std::time::Instant::now();
    let (y, name) = match a.direction {
        VaeDirection::Encode => (vae.encode(&x.to_device(device)?)?, "latents"),
        VaeDirection::Decode => (vae.decode(&x.to_device(device)?)?, "video"),
    };
    let y = y.to_dtype(kiln::DType::F32)?.to_device(Device::Cpu)?;
    eprintln!("{name} {:?} in {:.2} s on {device} ({dtype})", y.shape(), t0.elapsed().as_secs_f64());
    if let Some(p) = peaks {
        let m = p.finish();
        eprintln!(
            "memory: peak live {} B, peak reserved {} B, peak driver-used {} B",
            m.live, m.reserved, m.driver_used
        );
    }
    kiln::io::safetensors::save(&a.output, &[(name, &y)])?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Model folder (config.json, *.safetensors, tokenizer.json; a chat template for
    /// /v1/chat/completions), a llama.cpp GGUF file (or a folder holding one), or a Hub
    /// id ORG/NAME[@REVISION] in the Hugging Face cache.
    #[arg(long)]
    model: String,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "auto")]
    device: String,
    /// bf16 or f32 (default: as for generate).
    #[arg(long)]
    dtype: Option<String>,
    /// Most sequences decoded together.
    #[arg(long, default_value_t = 32)]
    max_batch: usize,
    /// Requests that may wait to start; more are answered 503 with Retry-After.
    #[arg(long, default_value_t = 256)]
    queue: usize,
    /// KV cache blocks of 16 positions (default: --max-batch sequences of the whole context).
    #[arg(long)]
    kv_blocks: Option<usize>,
}

/// Serves until Ctrl-C, then lets open requests finish.
fn serve(a: ServeArgs) -> kiln::Result<ExitCode> {
    let device = Device::parse(&a.device)?;
    let dtype = parse_dtype("serve", a.dtype.as_deref().unwrap_or(default_dtype(device)))?;
    let mut opts = kiln_serve::ServeOptions::new(kiln_models::hub::resolve(&a.model)?, device, dtype);
    (opts.host, opts.port, opts.max_batch, opts.queue, opts.kv_blocks) =
        (a.host, a.port, a.max_batch, a.queue, a.kv_blocks);
    kiln_serve::run(opts)?;
    Ok(ExitCode::SUCCESS)
}

/// bf16 on a GPU and where the CPU's GEMV reads 16-bit weights at memory speed, else f32.
fn default_dtype(device: Device) -> &'static str {
    if device.is_cuda() || kiln::cpu::gemv::fast_16bit_weights() {
        "bf16"
    } else {
        "f32"
    }
}
