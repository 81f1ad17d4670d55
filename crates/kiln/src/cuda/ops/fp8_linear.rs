//! FP8-weight linear at decode, "w8a16" (`kernels/fp8_linear.cu`, whose header gives the
//! floor and the layout): 1–16 rows of bf16 / f16 activations times a float8_e4m3fn `[N, K]`
//! weight with a per-tensor or per-row f32 scale, bias fused. The activations stay 16-bit;
//! the weight is widened exactly in registers and multiplied on 16-bit tensor cores, so one
//! launch replaces `quantize_rows` + `fp8_gemv`. `Tensor::linear_fp8` routes here; larger
//! M, f32 activations and what [`declines`] names keep the FP8 `scaled_mm` path.
//!
//! Tuning: [`choose`] is the one place that picks a variant per shape;
//! `KILN_FP8_LINEAR_VARIANT=r1_g8_w8` forces one on every call (read once per process).

use super::{copy, dev_of, FP8_LINEAR};
use crate::cuda::{CudaDevice, DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::{settings, DType};

/// Most activation rows (after flattening leading dims) the w8a16 kernel serves.
pub const W8A16_MAX_M: usize = 16;

/// `FP8L_MAX_WARPS` of fp8_linear.cu (its `__launch_bounds__`).
pub(super) const MAX_WARPS: u8 = 8;

/// Warps a launch aims for: about 16 per SM of an H200 (132 SMs), each keeping eight
/// 16-byte weight loads in flight, i.e. ~64 KB in flight per SM.
pub(super) const TARGET_WARPS: usize = 2048;

/// One w8a16 call as `linear_fp8` validated it: `x` `[M, K]` of `dt` (bf16 or f16), `w`
/// `[N, K]` float8_e4m3fn, `scale` dense f32 (one element, or N when `rowwise`), `bias` `[N]`
/// of `dt` (any stride) or none.
pub(crate) struct Fp8Linear<'a> {
    pub x: (&'a DeviceBuffer, &'a Layout),
    pub w: (&'a DeviceBuffer, &'a Layout),
    pub scale: &'a DeviceBuffer,
    pub rowwise: bool,
    pub bias: Option<(&'a DeviceBuffer, &'a Layout)>,
    pub dt: DType,
}

/// One kernel variant, written `r{rt}_g{kw}_w{warps}` (e.g. `r1_g8_w8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// 16-row weight tiles per warp (1 or 2; each step keeps 8 weight loads in flight).
    pub rt: u8,
    /// Warps splitting K for one row group (a power of two, at most 8).
    pub kw: u8,
    /// Warps per block: a multiple of `kw`, at most 8.
    pub warps: u8,
}

impl Variant {
    /// K bytes one warp covers per step (`64 · U`, U = 4 / rt).
    fn step(self) -> usize {
        256 / self.rt as usize
    }

    /// Output features one block computes.
    fn rows_per_block(self) -> usize {
        (self.warps / self.kw) as usize * 16 * self.rt as usize
    }

    /// Shared memory of a block with `mt` 8-row activation tiles: every warp's partial sums
    /// (4 per lane per 16-row tile) when K is split across warps.
    pub(super) fn shared_bytes(self, mt: usize) -> u32 {
        if self.kw > 1 {
            (self.warps as usize * self.rt as usize * mt * 4 * 32 * 4) as u32
        } else {
            0
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "r{}_g{}_w{}", self.rt, self.kw, self.warps)
    }
}

impl std::str::FromStr for Variant {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Variant, String> {
        let bad = || format!("{s:?} is not a w8a16 variant like r1_g8_w8");
        let mut it = s.trim().split('_');
        let mut field = |prefix: char| -> std::result::Result<u8, String> {
            it.next().and_then(|f| f.strip_prefix(prefix)).and_then(|v| v.parse().ok()).ok_or_else(bad)
        };
        let v = Variant { rt: field('r')?, kw: field('g')?, warps: field('w')? };
        if it.next().is_some() {
            return Err(bad());
        }
        if !matches!(v.rt, 1 | 2) {
            return Err(format!("{s}: rt must be 1 or 2"));
        }
        if !v.kw.is_power_of_two() || v.kw > MAX_WARPS {
            return Err(format!("{s}: kw must be a power of two up to {MAX_WARPS}"));
        }
        if v.warps == 0 || v.warps > MAX_WARPS || !v.warps.is_multiple_of(v.kw) {
            return Err(format!("{s}: warps must be 1..={MAX_WARPS} and a multiple of kw"));
        }
        Ok(v)
    }
}

/// The variant for `n` × `k`: the forced one ([`settings::FP8_LINEAR_VARIANT`]), else one 16-row tile per warp and as many warps
/// splitting K as bring the launch to `TARGET_WARPS`, each with at least one whole step.
/// A starting point from the design; the lead tunes it on the H200.
pub fn choose(n: usize, k: usize) -> Result<Variant> {
    if let Some(v) = settings::FP8_LINEAR_VARIANT.get()? {
        return Ok(v);
    }
    Ok(split_k(TARGET_WARPS.div_ceil(n.div_ceil(16)).next_power_of_two(), k, 1))
}

/// `rt` tiles a warp, `kw` of them (a power of two) splitting K: as many as asked, but each
/// with at least one whole step and at most [`MAX_WARPS`]; at least 4 warps a block.
pub(super) fn split_k(kw: usize, k: usize, rt: u8) -> Variant {
    let steps = (k / Variant { rt, kw: 1, warps: 1 }.step()).max(1);
    let kw = kw.min(1 << steps.ilog2()).min(MAX_WARPS as usize) as u8;
    Variant { rt, kw, warps: kw.max(4) }
}

/// Why `m` × `[n, k]` in `dt` keeps the FP8 path (`None`: the w8a16 kernel takes it). The
/// pointer alignment is checked at launch (the launcher returns `None` when it fails).
pub fn declines(m: usize, n: usize, k: usize, dt: DType) -> Option<&'static str> {
    if !matches!(dt, DType::BF16 | DType::F16) {
        Some("activations other than bf16 / f16")
    } else if m == 0 || m > W8A16_MAX_M {
        Some("rows outside 1..=16")
    } else if n == 0 || k == 0 {
        Some("empty weight")
    } else if !k.is_multiple_of(16) {
        Some("K not a multiple of 16")
    } else if n > i32::MAX as usize || k > (1 << 30) {
        Some("N or K past the kernel's int range")
    } else {
        None
    }
}

pub(super) fn need_fp8(dev: &CudaDevice) -> Result<()> {
    let p = dev.props();
    if (p.cc_major, p.cc_minor) < (8, 9) {
        return Err(Error::invalid(
            "linear_fp8",
            format!(
                "needs FP8 conversions (compute capability 8.9+); {} is {}.{}",
                p.name, p.cc_major, p.cc_minor
            ),
        ));
    }
    Ok(())
}

/// `x` `[M, K]` · `w` `[N, K]`ᵀ · scale + bias → `[M, N]` of `dt`, where [`declines`] said
/// yes. `Ok(None)` when the weight rows are not 16-byte aligned (the caller then runs the
/// FP8 path, which copies them); activations that are not are copied here (≤ 16 rows).
pub(crate) fn fp8_linear(p: Fp8Linear<'_>) -> Result<Option<DeviceBuffer>> {
    let (xl, wl) = (p.x.1, p.w.1);
    let (m, k, n) = (xl.shape[0], xl.shape[1], wl.shape[0]);
    let wp = p.w.0.ptr() + wl.offset as u64;
    if wl.strides != [k, 1] || !wp.is_multiple_of(16) {
        tracing::debug!("linear_fp8 {m}x[{n}, {k}]: weight rows not 16-byte aligned; FP8 path");
        return Ok(None);
    }
    let dev = dev_of(p.w.0)?;
    need_fp8(&dev)?;
    let size = p.dt.size();
    let (x_copy, xp, ldx) = copy::aligned_rows(p.x.0, xl, k, p.dt, 16)?;

    let v = choose(n, k)?;
    let mt = if m > 8 { 2 } else { 1 };
    let suffix = if p.dt == DType::BF16 { "bf16" } else { "f16" };
    let f = dev.function(&FP8_LINEAR, &format!("fp8_linear_{suffix}_r{}_m{mt}", v.rt))?;
    let out = dev.alloc(m * n * size)?;
    let (bp, ldb) =
        p.bias.map_or((0u64, 0i64), |(b, l)| (b.ptr() + (l.offset * size) as u64, l.strides[0] as i64));
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(v.rows_per_block()) as u32, 1, 1),
        block_dim: (32 * v.warps as u32, 1, 1),
        shared_mem_bytes: v.shared_bytes(mt),
    };
    let (ldw, sp, rowwise, op) = (k as i64, p.scale.ptr(), p.rowwise as i32, out.ptr());
    let (m32, n32, k32, kw) = (m as i32, n as i32, k as i32, v.kw as i32);
    // SAFETY: the kernel reads M rows of K elements of `dt`, `ldx` apart, from `xp` (the view's
    // storage or its contiguous copy, alive until the launch is enqueued and released
    // stream-ordered after it) and N rows of K bytes, `ldw` apart, from `wp`: both 16-byte
    // aligned with K % 16 == 0 (checked above / by `declines`), so every 16-byte load lies
    // inside a row. It reads 1 or (rowwise) N f32 scales at `sp`, N bias values `ldb` apart
    // from `bp` when non-zero, and writes the M·N elements of `out`. Block size is a
    // multiple of 32 up to FP8L_MAX_WARPS warps (`Variant` checks), `kw` divides the block's
    // warps, and `smem` holds the partial sums of every warp when `kw` > 1.
    unsafe { launch_after!(dev, f, cfg; xp, ldx, wp, ldw, sp, rowwise, bp, ldb, op, m32, n32, k32, kw)? };
    drop(x_copy);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_names_round_trip_and_reject_bad_ones() {
        let v: Variant = "r2_g4_w8".parse().unwrap();
        assert_eq!(v, Variant { rt: 2, kw: 4, warps: 8 });
        assert_eq!(v.to_string(), "r2_g4_w8");
        for bad in ["", "r1_g4", "r3_g1_w4", "r1_g3_w4", "r1_g4_w6", "r1_g16_w16", "r1_g1_w9", "x1_g1_w4"] {
            assert!(bad.parse::<Variant>().is_err(), "{bad}");
        }
    }

    #[test]
    fn choice_fills_the_gpu_and_keeps_whole_steps() {
        let _auto = settings::FP8_LINEAR_VARIANT.scoped(None);
        // 4096 x 4096: 256 row groups, K split over 8 warps, 2048 warps.
        assert_eq!(choose(4096, 4096).unwrap(), Variant { rt: 1, kw: 8, warps: 8 });
        // MLP up: enough row groups that 4 warps per K suffice.
        assert_eq!(choose(14336, 4096).unwrap(), Variant { rt: 1, kw: 4, warps: 4 });
        // Short K: no warp without a whole step.
        assert_eq!(choose(1024, 512).unwrap(), Variant { rt: 1, kw: 2, warps: 4 });
        assert_eq!(choose(7, 16).unwrap(), Variant { rt: 1, kw: 1, warps: 4 });
        for (n, k) in [(1, 16), (33, 1040), (4104, 4096), (200, 48), (151936, 4096)] {
            let v = choose(n, k).unwrap();
            assert_eq!(v.to_string().parse::<Variant>(), Ok(v));
            assert!(v.kw == 1 || k / v.step() >= v.kw as usize, "{n}x{k}: {v}");
        }
    }

    #[test]
    fn routing() {
        assert_eq!(declines(1, 4096, 4096, DType::BF16), None);
        assert_eq!(declines(16, 7, 16, DType::F16), None);
        assert!(declines(17, 4096, 4096, DType::BF16).is_some());
        assert!(declines(0, 4096, 4096, DType::BF16).is_some());
        assert!(declines(1, 4096, 4096, DType::F32).is_some());
        assert!(declines(1, 64, 40, DType::BF16).is_some());
        assert!(declines(1, 0, 64, DType::BF16).is_some());
    }

    #[test]
    fn every_variant_is_compiled() {
        for s in ["bf16", "f16"] {
            for rt in [1, 2] {
                for mt in [1, 2] {
                    let t = if s == "bf16" { "kbf" } else { "kh" };
                    assert!(FP8_LINEAR.src.contains(&format!("KILN_FP8_LINEAR_T({s}, {t})")), "{s}");
                    assert!(
                        FP8_LINEAR.src.contains(&format!("KILN_FP8_LINEAR(S, T, {rt}, {mt})")),
                        "{rt} {mt}"
                    );
                }
            }
        }
        assert!(FP8_LINEAR.src.contains(&format!("#define FP8L_MAX_WARPS {MAX_WARPS}")));
    }

    // ---- a CPU model of the kernel's fragments (kernels/fp8_linear.cu) ----

    /// What `W8<kbf>::widen` computes before its `· 2^120`: bf16x2 bits of bytes (0, 2), (1, 3).
    fn widen_bf16_bits(v: u32) -> (u32, u32) {
        let mag = 0x07F0_07F0u32;
        let s = v & 0x8080_8080;
        (((v << 4) & mag) | ((s << 8) & !mag), ((v >> 4) & mag) | (s & !mag))
    }

    /// `prmt.b32 d, a, b, sel` (default mode: each selector nibble picks one of the 8 bytes).
    fn prmt(a: u32, b: u32, sel: u32) -> u32 {
        let bytes = ((b as u64) << 32 | a as u64).to_le_bytes();
        (0..4).fold(0, |d, i| d | (bytes[((sel >> (4 * i)) & 7) as usize] as u32) << (8 * i))
    }

    fn bf16_value(h: u32) -> f64 {
        half::bf16::from_bits(h as u16).to_f64()
    }

    fn f16_value(h: u32) -> f64 {
        half::f16::from_bits(h as u16).to_f64()
    }

    fn e4m3(b: u32) -> f64 {
        crate::convert::e4m3_to_f32(b as u8) as f64
    }

    #[test]
    fn bf16_widening_is_exact_and_flags_nan() {
        for b in 0u32..256 {
            // Byte b in each position of the word: lo holds bytes 0 and 2, hi bytes 1 and 3.
            let v = b | (b << 8) | (b << 16) | (b << 24);
            let (lo, hi) = widen_bf16_bits(v);
            let want = e4m3(b);
            for h in [lo & 0xFFFF, lo >> 16, hi & 0xFFFF, hi >> 16] {
                let got = bf16_value(h) * 2f64.powi(120);
                if want.is_nan() {
                    assert_eq!(got.abs(), 480.0, "byte {b:#x}: the NaN the kernel flags separately");
                } else {
                    assert_eq!(got.to_bits(), want.to_bits(), "byte {b:#x}");
                }
            }
            // The kernel's NaN test: bit 7 of ((b & 0x7F) + 1), i.e. (v - signs) + 0x01010101.
            let flag = (v - (v & 0x8080_8080)).wrapping_add(0x0101_0101) & 0x8080_8080;
            assert_eq!(flag != 0, want.is_nan(), "byte {b:#x}");
        }
    }

    /// mma.m16n8k16 (.bf16 / .f16, row.col) from per-lane registers, by the PTX ISA's fragment
    /// tables (lane = 4g + t): A element e (register e / 2, low half first) is
    /// A[g + 8·((e / 2) % 2)][2t + e % 2 + 8·(e / 4)]; B element e is B[2t + e % 2 + 8·(e / 2)][g];
    /// D element e is D[g + 8·(e / 2)][2t + e % 2]. Checks every A / B element is given once
    /// and returns D (16 × 8) per lane layout, i.e. d[lane][e].
    fn mma(a: &[[[f64; 2]; 4]; 32], b: &[[[f64; 2]; 2]; 32]) -> [[f64; 4]; 32] {
        let (mut am, mut bm) = ([[f64::NAN; 16]; 16], [[f64::NAN; 8]; 16]);
        for lane in 0..32 {
            let (g, t) = (lane / 4, lane % 4);
            for e in 0..8 {
                let (r, c) = (g + 8 * ((e / 2) % 2), 2 * t + e % 2 + 8 * (e / 4));
                assert!(am[r][c].is_nan());
                am[r][c] = a[lane][e / 2][e % 2];
            }
            for e in 0..4 {
                let (r, c) = (2 * t + e % 2 + 8 * (e / 2), g);
                assert!(bm[r][c].is_nan());
                bm[r][c] = b[lane][e / 2][e % 2];
            }
        }
        let mut d = [[0f64; 4]; 32];
        for (lane, dl) in d.iter_mut().enumerate() {
            let (g, t) = (lane / 4, lane % 4);
            for (e, de) in dl.iter_mut().enumerate() {
                let (r, c) = (g + 8 * (e / 2), 2 * t + e % 2);
                *de = (0..16).map(|kk| am[r][kk] * bm[kk][c]).sum();
            }
        }
        d
    }

    /// One 64-byte chunk of K through the kernel's data flow: lane (g, t) holds bytes
    /// [16t, 16t + 16) of weight rows g and g + 8 and the 16 x values of rows mt·8 + g at the
    /// same k; weight word j feeds mma j. The result must be the plain dot products.
    fn chunk_matches_dot_products(bf16: bool) {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        // Weight bytes: any e4m3 code but NaN; x: small exact values in both 16-bit types.
        let w: Vec<[u8; 64]> = (0..16)
            .map(|_| {
                std::array::from_fn(|_| loop {
                    let b = next() as u8;
                    if b & 0x7F != 0x7F {
                        break b;
                    }
                })
            })
            .collect();
        let xv: Vec<[f64; 64]> =
            (0..16).map(|_| std::array::from_fn(|_| (next() % 64) as f64 / 8.0 - 4.0)).collect();
        let bits = |v: f64| -> u32 {
            if bf16 {
                half::bf16::from_f64(v).to_bits() as u32
            } else {
                half::f16::from_f64(v).to_bits() as u32
            }
        };
        let val = |h: u32| if bf16 { bf16_value(h) } else { f16_value(h) };
        let word = |row: &[u8; 64], i: usize| u32::from_le_bytes(row[4 * i..4 * i + 4].try_into().unwrap());
        for mt in 0..2 {
            let mut d = [[0f64; 4]; 32];
            for j in 0..4 {
                let mut a = [[[0f64; 2]; 4]; 32];
                let mut b = [[[0f64; 2]; 2]; 32];
                for lane in 0..32 {
                    let (g, t) = (lane / 4, lane % 4);
                    // x words 2j, 2j+1 of row mt·8 + g at k = 16t + 4j ...
                    let xr = &xv[mt * 8 + g];
                    let xw = |i: usize| bits(xr[16 * t + 2 * i]) | bits(xr[16 * t + 2 * i + 1]) << 16;
                    let (w0, w1) = (xw(2 * j), xw(2 * j + 1));
                    let (b0, b1) = if bf16 { (prmt(w0, w1, 0x5410), prmt(w0, w1, 0x7632)) } else { (w0, w1) };
                    let pair = |r: u32| [val(r & 0xFFFF), val(r >> 16)];
                    b[lane] = [pair(b0), pair(b1)];
                    // ... and weight word j (bytes 16t + 4j ..) of rows g, g + 8.
                    let halves = |v: u32| -> ([f64; 2], [f64; 2]) {
                        if bf16 {
                            let (lo, hi) = widen_bf16_bits(v);
                            let s = 2f64.powi(120);
                            (
                                [bf16_value(lo & 0xFFFF) * s, bf16_value(lo >> 16) * s],
                                [bf16_value(hi & 0xFFFF) * s, bf16_value(hi >> 16) * s],
                            )
                        } else {
                            // cvt.rn.f16x2.e4m3x2 of the low / high 16 bits (low byte -> low half).
                            ([e4m3(v & 0xFF), e4m3((v >> 8) & 0xFF)], [e4m3((v >> 16) & 0xFF), e4m3(v >> 24)])
                        }
                    };
                    let (lo0, hi0) = halves(word(&w[g], 4 * t + j));
                    let (lo1, hi1) = halves(word(&w[g + 8], 4 * t + j));
                    a[lane] = [lo0, lo1, hi0, hi1];
                }
                let dj = mma(&a, &b);
                for (dl, djl) in d.iter_mut().zip(&dj) {
                    dl.iter_mut().zip(djl).for_each(|(acc, v)| *acc += v);
                }
            }
            // The store map of the epilogue: n = g (+8 for e >= 2), m = mt·8 + 2t + e % 2.
            for (lane, dl) in d.iter().enumerate() {
                let (g, t) = (lane / 4, lane % 4);
                for (e, &got) in dl.iter().enumerate() {
                    let (n, m) = (g + if e >= 2 { 8 } else { 0 }, mt * 8 + 2 * t + e % 2);
                    let want: f64 = (0..64).map(|kk| e4m3(w[n][kk] as u32) * val(bits(xv[m][kk]))).sum();
                    assert!((got - want).abs() <= 1e-9 * want.abs().max(1.0), "n {n} m {m}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn fragments_and_k_permutation_match_dot_products() {
        chunk_matches_dot_products(true);
        chunk_matches_dot_products(false);
    }

    #[test]
    fn model_constants_are_the_kernels() {
        for c in ["0x07F007F0u", "0x80808080u", "0x01010101u", "0x7B807B80u", "0x5410u", "0x7632u"] {
            assert!(FP8_LINEAR.src.contains(c), "{c}");
        }
        assert!(FP8_LINEAR.src.contains("lo = ((v << 4) & mag) | ((s << 8) & ~mag);"));
        assert!(FP8_LINEAR.src.contains("hi = ((v >> 4) & mag) | (s & ~mag);"));
    }
}
