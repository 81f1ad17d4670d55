//! Any bytes as a safetensors file: opening it and loading every tensor it lists must
//! return `Ok` or an error, never panic or abort.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "scratch.rs"]
mod scratch;

fuzz_target!(|data: &[u8]| {
    let path = scratch::file_with(data, "safetensors");
    if let Ok(f) = kiln::io::safetensors::SafetensorsFile::open(&path) {
        for name in f.names() {
            let _ = f.load(&name, kiln::Device::Cpu);
        }
    }
});
