//! Any bytes as a GGUF file: opening it, reading its tokenizer and chat template and loading
//! its model on the CPU must return `Ok` or an error, never panic or abort.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "scratch.rs"]
mod scratch;

fuzz_target!(|data: &[u8]| {
    let path = scratch::file_with(data, "gguf");
    if let Ok(g) = kiln_models::gguf::GgufModel::open(&path) {
        let _ = g.tokenizer();
        let _ = g.chat_template();
        let _ = g.load(kiln::Device::Cpu, kiln::DType::F32, kiln_models::Quantize::None);
    }
});
