//! The counter-based generator of `Tensor::rand`: element i's value is a hash of (seed, i),
//! so the CPU and `kernels/copy.cu` produce the same numbers for a seed.

/// splitmix64 of (seed, counter): the generator shared with `kernels/copy.cu`.
pub(crate) fn hash_u64(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i.wrapping_add(0x632B_E59B_D9B4_E019);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in [0, 1) from the top 24 bits, as f32 (exactly representable).
pub(crate) fn uniform_f32(seed: u64, i: u64) -> f32 {
    (hash_u64(seed, i) >> 40) as f32 * (1.0 / 16_777_216.0)
}

/// Standard normal by Box–Muller on two uniforms, computed in f32.
pub(crate) fn normal_f32(seed: u64, i: u64) -> f32 {
    let u1 = 1.0 - uniform_f32(seed, 2 * i); // (0, 1]
    let u2 = uniform_f32(seed, 2 * i + 1);
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::normal_f32;

    #[test]
    fn randn_has_unit_moments() {
        let v: Vec<f64> = (0..100_000).map(|i| normal_f32(7, i) as f64).collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.02, "mean {mean} var {var}");
    }
}
