//! The fixture models on cuda:0: transformers' prefill logits and greedy tokens with
//! weights in f32 (the fixture tolerances) and in bf16 (bf16 tolerances), through the
//! same `golden::check` that `cargo test` runs on the CPU. Without a GPU: "skipped".

#[path = "../../kiln/tests/common/mod.rs"]
mod common;

use common::Ctx;
use kiln::DType;
use kiln_models::golden;

fn case(arch: &str, dtype: DType, cx: &Ctx) -> Result<(), String> {
    let dir = kiln_models::config::fixtures_dir().join("models").join(arch);
    let r = golden::check(&dir, cx.gpu, dtype).map_err(common::e)?;
    println!("      {arch} {dtype}: max |Δlogit| {:.2e}, greedy {:?}", r.max_logit_err, r.greedy);
    golden::verdict(&r, dtype)
}

macro_rules! cases {
    ($($name:ident => $arch:literal, $dt:ident;)*) => {
        $(fn $name(cx: &mut Ctx) -> Result<(), String> { case($arch, DType::$dt, cx) })*
        const CASES: &[common::Case] = &[$((stringify!($name), $name)),*];
    };
}

cases! {
    llama_f32 => "llama", F32;
    qwen3_f32 => "qwen3", F32;
    qwen3_moe_f32 => "qwen3_moe", F32;
    lfm2_moe_f32 => "lfm2_moe", F32;
    qwen3_5_moe_f32 => "qwen3_5_moe", F32;
    llama_bf16 => "llama", BF16;
    qwen3_bf16 => "qwen3", BF16;
    qwen3_moe_bf16 => "qwen3_moe", BF16;
    lfm2_moe_bf16 => "lfm2_moe", BF16;
}

fn main() -> std::process::ExitCode {
    common::run("gpu_models", CASES)
}
