//! Any bytes as a safetensors file: opening it and loading every tensor it lists must
//! return `Ok` or an error, never panic or abort.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The reader maps a file, so the input goes through one (tmpfs where there is one).
    let dir =
        if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() };
    let path = std::path::Path::new(&dir).join(format!("kiln-fuzz-{}.safetensors", std::process::id()));
    std::fs::write(&path, data).unwrap();
    if let Ok(f) = kiln::io::safetensors::SafetensorsFile::open(&path) {
        for name in f.names() {
            let _ = f.load(&name, kiln::Device::Cpu);
        }
    }
});
