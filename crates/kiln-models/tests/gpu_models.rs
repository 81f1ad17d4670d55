//! The fixture models on cuda:0: transformers' prefill logits and greedy tokens with
//! weights in f32 (the fixture tolerances) and in bf16 (bf16 tolerances), through the
//! same `golden::check` that `cargo test` runs on the CPU; and the Wan VAEs against
//! diffusers by PSNR through `wan_vae::check`; greedy decoding replayed as a CUDA graph
//! against eager decoding for every family. Without a GPU: "skipped".

use kiln::testing::Ctx;
use kiln::DType;
use kiln_models::{golden, wan_vae};

fn case(arch: &str, dtype: DType, cx: &Ctx) -> Result<(), String> {
    let dir = kiln_models::config::fixtures_dir().join("models").join(arch);
    let r = golden::check(&dir, cx.dev, dtype).map_err(kiln::testing::e)?;
    println!("      {arch} {dtype}: max |Δlogit| {:.2e}, greedy {:?}", r.max_logit_err, r.greedy);
    golden::verdict(&r, dtype)
}

/// 64 greedy tokens replayed as a CUDA graph are the 64 of eager decoding, token for token.
fn graph_vs_eager(arch: &str, dtype: DType, cx: &Ctx) -> Result<(), String> {
    let dir = kiln_models::config::fixtures_dir().join("models").join(arch);
    let model = kiln_models::Model::load(&dir, cx.dev, dtype).map_err(kiln::testing::e)?;
    let prompt = [1u32, 7, 42, 3, 99, 5];
    let run = |eager: bool| {
        let opts = kiln_models::GenerateOptions { eager, ..kiln_models::GenerateOptions::greedy(64, vec![]) };
        kiln_models::generate(&model, &prompt, &opts, |_| Ok(())).map_err(kiln::testing::e)
    };
    let _graph = kiln::settings::GRAPH_DECODE.scoped(true);
    let (eager, graph) = (run(true)?, run(false)?);
    println!("      {arch} {dtype}: graph {}, {} tokens", graph.graph, graph.tokens.len());
    if !graph.graph || eager.graph {
        let why = graph.graph_declined.unwrap_or_default();
        return Err(format!("graph used: eager run {}, graph run {} {why}", eager.graph, graph.graph));
    }
    if graph.tokens != eager.tokens || graph.tokens.len() != 64 {
        return Err(format!("graph {:?}\n      eager {:?}", graph.tokens, eager.tokens));
    }
    Ok(())
}

/// A Wan VAE fixture through the same `wan_vae::check` as the CPU test.
fn vae(name: &str, dtype: DType, cx: &Ctx) -> Result<(), String> {
    let dir = kiln_models::config::fixtures_dir().join("vae").join(name);
    let r = wan_vae::check(&dir, cx.dev, dtype).map_err(kiln::testing::e)?;
    println!("      {name} {dtype}: PSNR {:.1} / {:.1} / {:.1} dB", r.decoded, r.encoded, r.roundtrip);
    wan_vae::verdict(&r, dtype)
}

macro_rules! cases {
    ($($name:ident => $f:ident($arch:literal, $dt:ident);)*) => {
        $(fn $name(cx: &mut Ctx) -> Result<(), String> { $f($arch, DType::$dt, cx) })*
        const CASES: &[kiln::testing::Case] = &[$((stringify!($name), $name)),*];
    };
}

cases! {
    llama_f32 => case("llama", F32);
    qwen3_f32 => case("qwen3", F32);
    qwen3_moe_f32 => case("qwen3_moe", F32);
    lfm2_moe_f32 => case("lfm2_moe", F32);
    qwen3_5_moe_f32 => case("qwen3_5_moe", F32);
    llama_bf16 => case("llama", BF16);
    qwen3_bf16 => case("qwen3", BF16);
    qwen3_moe_bf16 => case("qwen3_moe", BF16);
    lfm2_moe_bf16 => case("lfm2_moe", BF16);
    llama_graph => graph_vs_eager("llama", BF16);
    qwen3_graph => graph_vs_eager("qwen3", BF16);
    qwen3_moe_graph => graph_vs_eager("qwen3_moe", BF16);
    lfm2_moe_graph => graph_vs_eager("lfm2_moe", BF16);
    qwen3_5_moe_graph => graph_vs_eager("qwen3_5_moe", F32);
    wan21_vae_f32 => vae("wan21_vae_tiny", F32);
    wan22_vae_f32 => vae("wan22_vae_tiny", F32);
    wan22_vae_bf16 => vae("wan22_vae_tiny", BF16);
}

fn main() -> std::process::ExitCode {
    kiln::testing::run("gpu_models", CASES)
}
