//! FP8 mixture-of-experts decode (`kernels/fp8_linear.cu`: `fp8_experts_swiglu`,
//! `fp8_experts_sum`): the w8a16 kernel's warp layout with the expert of each slot read on
//! the device, so a decode step's FP8 experts need no host sync and stream only the chosen
//! experts' weights. Stacked values `[E, N, K]` float8_e4m3fn with f32 row scales `[E, N]`.
//! `Tensor::expert_swiglu_fp8` / `expert_linear_sum_fp8` route here.

use super::fp8_linear::{need_fp8, split_k, Variant, MAX_WARPS, TARGET_WARPS};
use super::{copy, dev_of, FP8_LINEAR};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::Result;
use crate::layout::Layout;
use crate::{settings, DType};

/// The device memory a launch reads: x `[rows, K]` (any layout; copied when its rows are not
/// 16-byte aligned), stacked values `[E, N, K]` and scales `[E, N]` (both contiguous), and
/// int64 expert indices (contiguous).
pub(crate) struct Fp8Experts<'a> {
    pub x: (&'a DeviceBuffer, &'a Layout),
    pub w: (&'a DeviceBuffer, &'a Layout),
    pub scale: (&'a DeviceBuffer, &'a Layout),
    pub experts: (&'a DeviceBuffer, &'a Layout),
    pub dt: DType,
}

/// Why the FP8 experts kernels decline `slots` slots against stacked `[E, N, K]` values in
/// activations of `dt` (`None`: they take it).
pub fn experts_declines(slots: usize, wl: &Layout, dt: DType) -> Option<&'static str> {
    if !matches!(dt, DType::BF16 | DType::F16) {
        Some("activations other than bf16 / f16")
    } else if slots == 0 || slots > 65535 {
        Some("slots outside 1..=65535")
    } else if wl.rank() != 3 || !wl.is_contiguous() || !wl.offset.is_multiple_of(16) {
        Some("values are not a contiguous, 16-byte aligned [E, N, K]")
    } else if wl.shape.iter().any(|&d| d == 0 || d > i32::MAX as usize) || !wl.shape[2].is_multiple_of(16) {
        Some("an empty weight, K not a multiple of 16, or E, N or K past i32")
    } else {
        None
    }
}

impl Fp8Experts<'_> {
    /// (E, N, K) of the values.
    fn dims(&self) -> (usize, usize, usize) {
        let s = &self.w.1.shape;
        (s[0], s[1], s[2])
    }

    /// x's rows as the kernels load them (16 bytes at a time); see [`copy::aligned_rows`].
    fn x_rows(&self, k: usize) -> Result<(Option<DeviceBuffer>, u64, i64)> {
        copy::aligned_rows(self.x.0, self.x.1, k, self.dt, 16)
    }

    fn pointers(&self) -> (u64, u64, u64) {
        let (w, wl) = self.w;
        let (s, sl) = self.scale;
        let (e, el) = self.experts;
        (w.ptr() + wl.offset as u64, s.ptr() + (sl.offset * 4) as u64, e.ptr() + (el.offset * 8) as u64)
    }

    fn suffix(&self) -> &'static str {
        if self.dt == DType::BF16 {
            "bf16"
        } else {
            "f16"
        }
    }
}

/// The variant of the gate_up kernel for `slots` slots of `n` outputs (pairs) over `k`:
/// RT = 2 (a gate and an up tile per warp) and as many warps splitting K as bring the launch
/// to at most 2048 warps, each with a whole step; [`settings::FP8_LINEAR_VARIANT`] forces kw
/// and warps.
pub fn swiglu_variant(slots: usize, n: usize, k: usize) -> Result<Variant> {
    if let Some(v) = settings::FP8_LINEAR_VARIANT.get()? {
        return Ok(Variant { rt: 2, ..v });
    }
    // A group of 16 output pairs streams two tiles, so a K step is 128 bytes as for rt = 2.
    // The split rounds down, unlike the dense kernel's: on the H100 (bench/results/
    // 2026-12-07-b866b82-h100) g4 beat g8 where 2048 warps fell between them (Qwen3-30B-A3B
    // 14.12 → 12.21 µs, LFM2-8B-A1B 15.34 → 12.93) and g8 stayed best where 2048 was exact.
    let groups = (slots * n.div_ceil(16)).max(1);
    let per_group = (TARGET_WARPS / groups).max(1);
    Ok(split_k(1 << per_group.ilog2(), k, 2))
}

/// The variant of the down + sum kernel for `k` slots a token: one 16-row tile per warp and
/// a warp per slot (up to 8); a block is one row group when that makes 4+ warps (on the
/// H100, g4_w4 beat g4_w8 by 10–12% on all three MoE presets), else as many as fill 8 warps.
/// Or the forced one.
pub fn sum_variant(k: usize) -> Result<Variant> {
    if let Some(v) = settings::FP8_LINEAR_VARIANT.get()? {
        return Ok(v);
    }
    let kw = k.clamp(1, MAX_WARPS as usize) as u8;
    Ok(Variant { rt: 1, kw, warps: if kw >= 4 { kw } else { MAX_WARPS / kw * kw } })
}

/// Blocks along the output rows: a row group covers 16 outputs in the gate_up kernel (its
/// two tiles are the gate and up rows of the same outputs), 16·rt in the down kernel.
fn row_blocks(n: usize, v: Variant, pairs: bool) -> u32 {
    let per_group = if pairs { 16 } else { 16 * v.rt as usize };
    n.div_ceil((v.warps / v.kw) as usize * per_group) as u32
}

/// Slot s multiplies x row s / `per_row` (x `[slots / per_row, K]`) by gate_up expert
/// `experts[s]` of `[E, 2·I, K]` and stores SwiGLU → `[slots, I]`, where
/// [`experts_declines`] said yes.
pub(crate) fn expert_swiglu(p: Fp8Experts<'_>, per_row: usize) -> Result<DeviceBuffer> {
    let dev = dev_of(p.w.0)?;
    need_fp8(&dev)?;
    let (e, n2, k) = p.dims();
    let (n, slots) = (n2 / 2, p.experts.1.numel());
    let v = swiglu_variant(slots, n, k)?;
    let out = dev.alloc(slots * n * p.dt.size())?;
    let (x_copy, xp, ldx) = p.x_rows(k)?;
    let (wp, sp, ip) = p.pointers();
    let f = dev.function(&FP8_LINEAR, &format!("fp8_experts_swiglu_{}", p.suffix()))?;
    let cfg = LaunchConfig {
        grid_dim: (row_blocks(n, v, true), slots as u32, 1),
        block_dim: (32 * v.warps as u32, 1, 1),
        shared_mem_bytes: v.shared_bytes(1),
    };
    let (op, pr, e32, n32, k32, kw) = (out.ptr(), per_row as i32, e as i32, n as i32, k as i32, v.kw as i32);
    // SAFETY: x holds slots / per_row rows of K elements `ldx` apart from `xp` (16-byte
    // aligned: view or copy, alive until the launch is enqueued); values hold E·2I·K bytes
    // from `wp` and scales E·2I f32 from `sp`, read only for an expert in [0, E) after one
    // wrap; `ip` points at `slots` int64; `out` holds slots·I. K % 16 == 0 and the values'
    // alignment are checked by `experts_declines`; `kw` divides `warps` ≤ FP8L_MAX_WARPS
    // (`Variant`), and the shared memory holds every warp's partials.
    unsafe { launch_after!(dev, f, cfg; xp, ldx, pr, wp, sp, ip, e32, op, n32, k32, kw)? };
    drop(x_copy);
    Ok(out)
}

/// `out[t] = Σ_j weights[t, j] · scale[e] · w[e] · x[t, j]` (e = experts[t, j]) of x
/// `[T, k, K]`, down values `[E, N, K]` and f32 `weights` (T·k contiguous, from `w_off`) →
/// `[T, N]`, where [`experts_declines`] said yes for T·k slots.
pub(crate) fn expert_linear_sum(
    p: Fp8Experts<'_>,
    weights: &DeviceBuffer,
    w_off: usize,
) -> Result<DeviceBuffer> {
    let dev = dev_of(p.w.0)?;
    need_fp8(&dev)?;
    let (e, n, k) = p.dims();
    let (t, slots) = (p.experts.1.shape[0], p.experts.1.shape[1]);
    let v = sum_variant(slots)?;
    let out = dev.alloc(t * n * p.dt.size())?;
    let (x_copy, xp, ldx) = p.x_rows(k)?;
    let (wp, sp, ip) = p.pointers();
    let f = dev.function(&FP8_LINEAR, &format!("fp8_experts_sum_{}_r{}", p.suffix(), v.rt))?;
    let cfg = LaunchConfig {
        grid_dim: (row_blocks(n, v, false), t as u32, 1),
        block_dim: (32 * v.warps as u32, 1, 1),
        shared_mem_bytes: v.shared_bytes(1),
    };
    let wtp = weights.ptr() + (w_off * 4) as u64;
    let (op, s32, e32, n32, k32, kw) = (out.ptr(), slots as i32, e as i32, n as i32, k as i32, v.kw as i32);
    // SAFETY: x holds T·k rows of K elements `ldx` apart from `xp` (16-byte aligned, alive
    // until the launch is enqueued); values hold E·N·K bytes from `wp` and scales E·N f32
    // from `sp`, read only for an expert in [0, E) after one wrap; `ip` and `wtp` point at
    // T·k int64 / f32; `out` holds T·N. T ≤ 65535 and the values' alignment are checked by
    // `experts_declines`; warps and shared memory as in `expert_swiglu`.
    unsafe { launch_after!(dev, f, cfg; xp, ldx, wp, sp, ip, wtp, s32, e32, op, n32, k32, kw)? };
    drop(x_copy);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_fill_the_gpu_and_are_compiled() {
        let _auto = settings::FP8_LINEAR_VARIANT.scoped(None);
        // Qwen3-30B-A3B gate_up: 8 slots x 48 pair groups, 2048 / 384 warps rounds down to 4;
        // K = 2048 has 16 steps.
        assert_eq!(swiglu_variant(8, 768, 2048).unwrap(), Variant { rt: 2, kw: 4, warps: 4 });
        // Qwen3.6-35B-A3B: 8 x 32 groups, exactly 8 each. LFM2-8B-A1B: 4 x 112, 4 each.
        assert_eq!(swiglu_variant(8, 512, 2048).unwrap(), Variant { rt: 2, kw: 8, warps: 8 });
        assert_eq!(swiglu_variant(4, 1792, 2048).unwrap(), Variant { rt: 2, kw: 4, warps: 4 });
        // More groups than target warps: no split.
        assert_eq!(swiglu_variant(8, 8192, 2048).unwrap(), Variant { rt: 2, kw: 1, warps: 4 });
        // Short K: no warp without a whole step.
        assert_eq!(swiglu_variant(8, 768, 256).unwrap(), Variant { rt: 2, kw: 2, warps: 4 });
        assert_eq!(sum_variant(8).unwrap(), Variant { rt: 1, kw: 8, warps: 8 });
        assert_eq!(sum_variant(4).unwrap(), Variant { rt: 1, kw: 4, warps: 4 });
        assert_eq!(sum_variant(3).unwrap(), Variant { rt: 1, kw: 3, warps: 6 });
        for s in ["bf16", "f16"] {
            assert!(FP8_LINEAR.src.contains(&format!("KILN_FP8_LINEAR_T({s}, ")));
        }
        for rt in [1, 2] {
            assert!(FP8_LINEAR.src.contains(&format!("KILN_FP8_EXPERTS_SUM(S, T, {rt})")));
        }
    }

    /// The kernels' n0 = (block · groups + group) · rows of a group: the grid covers every
    /// output once (a gate_up group computes 16 outputs from its two 16-row tiles).
    #[test]
    fn grid_covers_every_output() {
        for n in [1, 15, 16, 17, 768, 2049] {
            for v in [Variant { rt: 2, kw: 8, warps: 8 }, Variant { rt: 2, kw: 1, warps: 4 }] {
                let groups = (v.warps / v.kw) as usize;
                let covered = row_blocks(n, v, true) as usize * groups * 16;
                assert!(covered >= n && covered < n + groups * 16, "pairs {n} {v}");
            }
            for v in [Variant { rt: 1, kw: 8, warps: 8 }, Variant { rt: 2, kw: 2, warps: 8 }] {
                let groups = (v.warps / v.kw) as usize;
                let covered = row_blocks(n, v, false) as usize * groups * 16 * v.rt as usize;
                assert!(covered >= n && covered < n + groups * 16 * v.rt as usize, "sum {n} {v}");
            }
        }
    }

    #[test]
    fn routing() {
        let w = Layout::contiguous(&[128, 1536, 2048]);
        assert_eq!(experts_declines(8, &w, DType::BF16), None);
        assert!(experts_declines(8, &w, DType::F32).is_some());
        assert!(experts_declines(0, &w, DType::BF16).is_some());
        assert!(experts_declines(8, &Layout::contiguous(&[128, 1536, 2040]), DType::BF16).is_some());
        assert!(experts_declines(8, &Layout::contiguous(&[1536, 2048]), DType::BF16).is_some());
    }
}
