//! Any text as a chat template: rendering must end (fuel and an output bound) in `Ok` or
//! an error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|source: &str| {
    let t = kiln_models::chat::ChatTemplate::from_source(source, "<s>", "</s>");
    let _ = t.render(&[("system", "be brief"), ("user", "hi")], true);
});
