//! kiln's measurement harness: fixture checks (correctness), runtime figures, and timing
//! helpers shared by the suites.

pub mod decode;
pub mod fixtures;
pub mod report;
pub mod runtime;
pub mod timing;
