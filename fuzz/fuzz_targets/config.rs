//! Any text as a model's or a VAE's `config.json`: parsing must return `Ok` or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = kiln_models::Config::from_json(text);
    let _ = kiln_models::wan_vae::VaeConfig::parse(text);
});
