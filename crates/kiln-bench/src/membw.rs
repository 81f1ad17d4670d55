//! The CPU's memory bandwidth, measured in the run that uses it: a copy of a buffer much
//! larger than the last-level cache, split across the rayon pool, counted as the bytes read
//! plus the bytes written. The decode suite on the CPU states tokens/s against it.

use rayon::prelude::*;
use std::time::Instant;

/// Bytes copied per pass: large enough to leave any cache (this suite's machines have up
/// to a few hundred MiB of L3).
const BYTES: usize = 1 << 30;
const PASSES: usize = 5;

/// Median bytes/s (read + written) of `PASSES` copies of `BYTES`, after one unmeasured
/// pass that also faults the pages in.
pub fn measure() -> f64 {
    let src = vec![1u8; BYTES];
    let mut dst = vec![0u8; BYTES];
    let chunk = BYTES / rayon::current_num_threads().max(1) / 16;
    let mut rates: Vec<f64> = (0..=PASSES)
        .map(|_| {
            let t = Instant::now();
            dst.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).for_each(|(d, s)| d.copy_from_slice(s));
            2.0 * BYTES as f64 / t.elapsed().as_secs_f64()
        })
        .skip(1)
        .collect();
    std::hint::black_box(&dst);
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}
