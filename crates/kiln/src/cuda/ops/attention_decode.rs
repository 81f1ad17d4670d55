//! Decode attention (`kernels/attention_decode.cu`): `scaled_dot_product_attention` for 1–8
//! queries per head over keys and values read where they lie in a KV cache, on tensor
//! cores (mma.sync), split over the keys (flash-decoding) with the splits of one group
//! merged by a second kernel through a scratch buffer. [`declines`] is the one place that
//! says which shapes it takes; `ops/attention.rs` sends those here and the rest to the
//! composed path.
//!
//! On by default; [`settings::DECODE_ATTENTION`] (`KILN_DECODE_ATTENTION=0`) sends every
//! call to the composed path instead, for comparison. It is also what makes a decode step
//! capturable: the composed path's key mask is made on the host.

use super::{dev_of, suffix, ATTENTION_DECODE};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::Result;
use crate::layout::Layout;
#[cfg(doc)]
use crate::settings;
use crate::DType;
use cudarc::driver::sys::CUfunction_attribute as FuncAttr;
use cudarc::driver::DeviceRepr;

/// Head dims with a compiled kernel.
pub const HEAD_DIMS: [usize; 5] = [64, 80, 96, 128, 256];
/// The most queries per head.
pub const MAX_QUERIES: usize = 8;
/// Query rows (query heads of a KV head × queries) one block serves: `AD_ROWS`.
const ROWS: usize = 16;
/// `AD_KEYS`: keys a warp takes at a time.
const KEYS: usize = 16;
/// `AD_WARPS`, `AD_THREADS`, `AD_STAGES` of the kernel.
const WARPS: usize = 4;
const THREADS: u32 = 32 * WARPS as u32;
const STAGES: usize = 2;
/// `AD_MAX_SPLITS`.
const MAX_SPLITS: usize = 64;
/// Blocks to aim for per SM (the kernel's shared memory lets 2–3 stay resident).
const BLOCKS_PER_SM: usize = 2;

/// Dynamic shared memory of the kernel for head dim `d` (`AdSmem` of attention_decode.cu):
/// the query tile, then the larger of the warps' key / value stages and their states.
fn smem_bytes(d: usize) -> usize {
    let pitch = d + 8;
    let stages = WARPS * STAGES * 2 * KEYS * pitch * 2;
    let merge = WARPS * ROWS * (d + 2) * 4;
    ROWS * pitch * 2 + stages.max(merge)
}

/// Mirrors `struct AdArgs` of the kernel (passed by value).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct AdArgs {
    q: [i64; 3],
    k: [i64; 3],
    v: [i64; 3],
    hkv: i32,
    g: i32,
    l: i32,
    s: i32,
    tiles: i32,
    causal: i32,
    splits: i32,
    scale_log2: f32,
}

// SAFETY: `#[repr(C)]` plain-old-data: nine i64, then seven i32 and an f32 (size 104, align
// 8), as `struct AdArgs` of attention_decode.cu lays them out under the CUDA ABI.
unsafe impl DeviceRepr for AdArgs {}
const _: () = assert!(std::mem::size_of::<AdArgs>() == 104);

/// q `[B, Hq, L, E]`, k and v `[B, Hkv, S, E]` (or all without the batch dim), as the
/// kernel sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Batch size (1 without a batch dim).
    pub batch: usize,
    /// Query heads.
    pub hq: usize,
    /// Key / value heads; divides `hq`.
    pub hkv: usize,
    /// Queries per head (1 to [`MAX_QUERIES`]).
    pub l: usize,
    /// Keys per head.
    pub s: usize,
    /// Head dim, one of [`HEAD_DIMS`].
    pub e: usize,
}

/// (batch, head, position) strides of a rank-3 or rank-4 view whose last dim is
/// contiguous, the batch stride 0 where the view has no batch or broadcasts it.
pub(crate) fn strides(t: &Layout) -> [usize; 3] {
    let r = t.rank();
    let batch = if r == 4 && t.shape[0] > 1 { t.strides[0] } else { 0 };
    [batch, t.strides[r - 3], t.strides[r - 2]]
}

/// The kernel's view of `q`, `k`, `v`, or why the composed path takes them: the
/// layout checks of `views`, 1–8 queries and a head dim of [`HEAD_DIMS`].
pub fn declines(q: &Layout, k: &Layout, v: &Layout, dt: DType) -> std::result::Result<Shape, &'static str> {
    let sh = views(q, k, v, dt)?;
    if sh.l == 0 || sh.l > MAX_QUERIES {
        return Err("queries outside 1..=8");
    }
    if !HEAD_DIMS.contains(&sh.e) {
        return Err("head dim other than 64, 80, 96, 128, 256");
    }
    Ok(sh)
}

/// What the attention kernels (this one and `attention_prefill`) need of `q`, `k`, `v`:
/// ranks 3 or 4 alike, batch equal or broadcast from 1 (queries: equal), key heads dividing
/// the query heads, value heads and dims the keys', f16 / bf16, rows of E contiguous
/// elements, and keys and values 16-byte aligned.
pub(crate) fn views(
    q: &Layout,
    k: &Layout,
    v: &Layout,
    dt: DType,
) -> std::result::Result<Shape, &'static str> {
    if !matches!(dt, DType::F16 | DType::BF16) {
        return Err("dtype other than f16 / bf16");
    }
    let r = q.rank();
    if !(3..=4).contains(&r) || k.rank() != r || v.rank() != r {
        return Err("not three or four dims each");
    }
    let dim = |t: &Layout, i: usize| t.shape[t.rank() - i];
    let batch = if r == 4 { q.shape[0] } else { 1 };
    if r == 4 && [k, v].iter().any(|t| t.shape[0] != batch && t.shape[0] != 1) {
        return Err("key or value batch neither the query's nor 1");
    }
    let (hq, hkv, l, s, e) = (dim(q, 3), dim(k, 3), dim(q, 2), dim(k, 2), dim(q, 1));
    if dim(v, 3) != hkv || dim(v, 2) != s || dim(v, 1) != e || dim(k, 1) != e {
        return Err("values shaped unlike the keys");
    }
    if hkv == 0 || hq < hkv || !hq.is_multiple_of(hkv) {
        return Err("key heads do not divide the query heads");
    }
    if [q, k, v].iter().any(|t| t.strides[r - 1] != 1) {
        return Err("rows of E not contiguous");
    }
    if batch * hq * l.max(s) > i32::MAX as usize {
        return Err("past i32 rows");
    }
    if !aligned(k, dt) || !aligned(v, dt) {
        return Err("keys or values not 16-byte aligned");
    }
    Ok(Shape { batch, hq, hkv, l, s, e })
}

/// Whether every row of `t` (a view [`views`] accepts) starts on 16 bytes.
pub(crate) fn aligned(t: &Layout, dt: DType) -> bool {
    let vec = 16 / dt.size();
    t.offset.is_multiple_of(vec) && strides(t).iter().all(|s| s.is_multiple_of(vec))
}

/// Row tiles per group, groups, and blocks per group (splits over the keys) for `sh` on a
/// device of `sms` SMs: enough blocks to fill it, each split at least a tile per warp. The
/// kernel runs fewer (`AD_MIN_TILES` tiles each at least) where the keys are fewer.
fn plan(sh: &Shape, sms: usize) -> (usize, usize, usize) {
    let tiles = (sh.hq / sh.hkv * sh.l).div_ceil(ROWS);
    let groups = sh.batch * sh.hkv * tiles;
    let splits = (BLOCKS_PER_SM * sms).div_ceil(groups).min(sh.s.div_ceil(KEYS * WARPS)).clamp(1, MAX_SPLITS);
    (tiles, groups, splits)
}

/// `softmax(q·kᵀ·scale)·v` → `[B, Hq, L, E]` contiguous, where [`declines`] gave `sh`.
/// `len`: the address of an i32 on the device; only the first min(len, S) keys count.
/// `causal`: query i sees keys 0..=i (top-left).
#[allow(clippy::too_many_arguments)]
pub fn sdpa(
    (q, ql): (&DeviceBuffer, &Layout),
    (k, kl): (&DeviceBuffer, &Layout),
    (v, vl): (&DeviceBuffer, &Layout),
    len: Option<u64>,
    sh: Shape,
    dt: DType,
    causal: bool,
    scale: f64,
) -> Result<DeviceBuffer> {
    let dev = dev_of(q)?;
    let size = dt.size();
    let out = dev.alloc(sh.batch * sh.hq * sh.l * sh.e * size)?;
    let (tiles, groups, splits) = plan(&sh, dev.props().sm_count.max(1) as usize);
    let ty = suffix("scaled_dot_product_attention", dt)?;
    let f = dev.function(&ATTENTION_DECODE, &format!("attention_decode_{ty}_d{}", sh.e))?;
    let smem = smem_bytes(sh.e);
    f.set_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
    let st = |l: &Layout| strides(l).map(|s| s as i64);
    let args = AdArgs {
        q: st(ql),
        k: st(kl),
        v: st(vl),
        hkv: sh.hkv as i32,
        g: (sh.hq / sh.hkv) as i32,
        l: sh.l as i32,
        s: sh.s as i32,
        tiles: tiles as i32,
        causal: causal as i32,
        splits: splits as i32,
        scale_log2: (scale * std::f64::consts::LOG2_E) as f32,
    };
    // Each split's (max, sum) and unnormalised sums per row, for the merge.
    let scratch = if splits > 1 {
        let slots = groups * splits * ROWS;
        Some((dev.alloc(slots * sh.e * 4)?, dev.alloc(slots * 2 * 4)?))
    } else {
        None
    };
    let at = |b: &DeviceBuffer, l: &Layout| b.ptr() + (l.offset * size) as u64;
    let (qp, kp, vp, lp, op) = (at(q, ql), at(k, kl), at(v, vl), len.unwrap_or(0), out.ptr());
    let (pp, mp) = scratch.as_ref().map_or((0, 0), |(p, m)| (p.ptr(), m.ptr()));
    let cfg = LaunchConfig {
        grid_dim: ((groups * splits) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    // SAFETY: q, k and v hold the `sh` views at their layouts' offsets and strides (rows of
    // E contiguous elements; k and v 16-byte aligned, as `declines` checked); `lp` is 0 or
    // the address of one i32 on this device; `out` holds B·Hq·L·E elements; with splits,
    // `pp` and `mp` hold groups·splits·16 rows of E and of 2 floats. The kernel waits for
    // the previous kernel before its first global access.
    unsafe { launch_after!(dev, f, cfg; qp, kp, vp, lp, op, pp, mp, args)? };
    if splits > 1 {
        let f = dev.function(&ATTENTION_DECODE, &format!("attention_decode_merge_{ty}_d{}", sh.e))?;
        // A block per (group, row); rows past a group's exit.
        let blocks = (groups * ROWS) as u32;
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: as above; the merge reads the scratch the first kernel wrote (it waits
        // for it) and `lp` as the first kernel does, and writes `out`; the scratch rows are
        // 16-byte aligned (E a multiple of 4).
        unsafe { launch_after!(dev, f, cfg; pp, mp, lp, op, args)? };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(shape: &[usize]) -> Layout {
        Layout::contiguous(shape)
    }

    #[test]
    fn declines_says_why() {
        let (q, k) = (layout(&[1, 32, 1, 128]), layout(&[1, 8, 4096, 128]));
        assert!(declines(&q, &k, &k, DType::BF16).is_ok());
        assert_eq!(declines(&q, &k, &k, DType::F32).unwrap_err(), "dtype other than f16 / bf16");
        let q9 = layout(&[1, 32, 9, 128]);
        assert_eq!(declines(&q9, &k, &k, DType::BF16).unwrap_err(), "queries outside 1..=8");
        let k5 = layout(&[1, 5, 4096, 128]);
        assert_eq!(
            declines(&q, &k5, &k5, DType::BF16).unwrap_err(),
            "key heads do not divide the query heads"
        );
        let (q72, k72) = (layout(&[1, 32, 1, 72]), layout(&[1, 8, 64, 72]));
        assert!(declines(&q72, &k72, &k72, DType::BF16).is_err());
        // A cache view: positions 0..100 of a capacity of 4096, any offset of whole rows.
        let mut view = layout(&[1, 8, 4096, 128]);
        view.shape[2] = 100;
        view.offset = 128;
        assert!(declines(&q, &view, &view, DType::BF16).is_ok());
        view.offset = 3;
        assert_eq!(
            declines(&q, &view, &view, DType::BF16).unwrap_err(),
            "keys or values not 16-byte aligned"
        );
    }

    #[test]
    fn the_plan_fills_the_gpu_and_covers_every_row() {
        let sh = |hq, hkv, l, s| Shape { batch: 1, hq, hkv, l, s, e: 128 };
        // Llama-3.1-8B at 4K: 8 groups of one 16-row tile, 33 splits for 264 blocks.
        assert_eq!(plan(&sh(32, 8, 1, 4096), 132), (1, 8, 33));
        // Qwen3.6: 2 groups, capped at 64 splits; a short cache splits less.
        assert_eq!(plan(&sh(16, 2, 1, 4096), 132), (1, 2, 64));
        assert_eq!(plan(&sh(32, 8, 1, 300), 132), (1, 8, 5));
        // MQA with 8 queries: 64 rows in 4 tiles.
        assert_eq!(plan(&sh(8, 1, 8, 32768), 132), (4, 4, 64));
        assert_eq!(plan(&sh(2, 2, 1, 1), 132), (1, 2, 1));
    }

    #[test]
    fn shared_memory_fits_a_block() {
        // 227 KB of shared memory per block on sm_90, 163 KB on sm_80.
        assert!(crate::cuda::ops::attention_decode::HEAD_DIMS.iter().all(|&d| smem_bytes(d) <= 163 * 1024));
        assert_eq!(smem_bytes(128), 16 * 136 * 2 + 4 * 2 * 2 * 16 * 136 * 2);
    }
}
