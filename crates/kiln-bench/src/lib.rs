//! kiln's measurement harness: fixture checks (correctness), runtime figures, and timing
//! helpers shared by the suites.

pub mod attention;
pub mod cpu;
pub mod cpu_decode;
pub mod decode;
pub mod experts;
pub mod fixtures;
pub mod fp8;
pub mod grouped;
pub mod harness;
pub mod linalg;
pub mod linear;
pub mod long_decode;
pub mod membw;
pub mod peaks;
pub mod peer;
pub mod plot;
pub mod progress;
pub mod reductions;
pub mod report;
pub mod runtime;
pub mod timing;
pub mod vae;
