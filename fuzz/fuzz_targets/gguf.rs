//! Any bytes as a GGUF file: opening it, reading its tokenizer and chat template and loading
//! its model on the CPU must return `Ok` or an error, never panic or abort.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The reader maps a file, so the input goes through one (tmpfs where there is one).
    let dir =
        if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() };
    let path = std::path::Path::new(&dir).join(format!("kiln-fuzz-{}.gguf", std::process::id()));
    std::fs::write(&path, data).unwrap();
    if let Ok(g) = kiln_models::gguf::GgufModel::open(&path) {
        let _ = g.tokenizer();
        let _ = g.chat_template();
        let _ = g.load(kiln::Device::Cpu, kiln::DType::F32, kiln_models::Quantize::None);
    }
});
