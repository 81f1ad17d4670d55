//! kiln's measurement harness: fixture checks (correctness), runtime figures, and timing
//! helpers shared by the suites.

pub mod fixtures;
pub mod fp8;
pub mod report;
pub mod runtime;
pub mod timing;
