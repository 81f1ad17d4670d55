//! Any bytes as `tokenizer.json`: loading it, then encoding and decoding a prompt, must
//! return `Ok` or an error (a panic inside the tokenizers crate is contained by kiln).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("kiln-fuzz-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), data).unwrap();
    if let Ok(tok) = kiln_models::tokenizer::Tokenizer::load(&dir) {
        let ids = tok.encode("hello <|im_end|> world", true).unwrap_or_default();
        let _ = tok.decode(&ids);
    }
});
