//! Decode attention (`kernels/attention_decode.cu`): `scaled_dot_product_attention` for 1–8
//! queries per head over keys and values read where they lie in a KV cache, split over
//! the keys (flash-decoding) with the splits of one group merged inside a thread-block
//! cluster. [`declines`] is the one place that says which shapes it takes;
//! `ops/attention.rs` sends those here and the rest to the composed path.
//!
//! On by default (it passed `gpu_attention`, memcheck and racecheck on an H100,
//! 2026-12-05); [`settings::DECODE_ATTENTION`] (`KILN_DECODE_ATTENTION=0`) sends every
//! call to the composed path instead, for comparison. It is also what makes a decode step
//! capturable: the composed path's key mask is made on the host.

use super::{dev_of, suffix, ATTENTION_DECODE};
use crate::cuda::launch::{dependent_launch, kernel_args, launch, Launch};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::Result;
use crate::layout::Layout;
#[cfg(doc)]
use crate::settings;
use crate::DType;
use cudarc::driver::DeviceRepr;

/// Head dims with a compiled kernel.
pub const HEAD_DIMS: [usize; 5] = [64, 80, 96, 128, 256];
/// The most queries per head.
pub const MAX_QUERIES: usize = 8;
/// Query rows (query heads of a KV head × queries) one block serves: compiled tiles.
const TILES: [usize; 2] = [4, 8];
/// `AD_THREADS` of the kernel.
const THREADS: u32 = 256;
/// Keys a split should have at least (a few steps of every warp).
const MIN_KEYS_PER_SPLIT: usize = 256;
/// `CLUSTER_MAX` of common.cuh.
const MAX_SPLITS: usize = 16;

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
    scale_log2: f32,
}

// SAFETY: `#[repr(C)]` plain-old-data: nine i64, then six i32 and an f32 (size 104, align
// 8), as `struct AdArgs` of attention_decode.cu lays them out under the CUDA ABI.
unsafe impl DeviceRepr for AdArgs {}
const _: () = assert!(std::mem::size_of::<AdArgs>() == 104);

/// q `[B, Hq, L, E]`, k and v `[B, Hkv, S, E]` (or all without the batch dim), as the
/// kernel sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub batch: usize,
    pub hq: usize,
    pub hkv: usize,
    pub l: usize,
    pub s: usize,
    pub e: usize,
}

/// (batch, head, position) strides of a rank-3 or rank-4 view whose last dim is
/// contiguous, the batch stride 0 where the view has no batch or broadcasts it.
fn strides(t: &Layout) -> [usize; 3] {
    let r = t.rank();
    let batch = if r == 4 && t.shape[0] > 1 { t.strides[0] } else { 0 };
    [batch, t.strides[r - 3], t.strides[r - 2]]
}

/// The kernel's view of `q`, `k`, `v`, or why the composed path takes them: ranks 3 or 4
/// alike, batch equal or broadcast from 1 (queries: equal), key heads dividing the query
/// heads, value heads and dims the keys', 1–8 queries, a compiled head dim, a float dtype,
/// rows of E contiguous elements, and keys and values 16-byte aligned.
pub fn declines(q: &Layout, k: &Layout, v: &Layout, dt: DType) -> std::result::Result<Shape, &'static str> {
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
    if l == 0 || l > MAX_QUERIES {
        return Err("queries outside 1..=8");
    }
    if !HEAD_DIMS.contains(&e) {
        return Err("head dim other than 64, 80, 96, 128, 256");
    }
    if [q, k, v].iter().any(|t| t.strides[r - 1] != 1) {
        return Err("rows of E not contiguous");
    }
    if batch * hq * l.max(s) > i32::MAX as usize {
        return Err("past i32 rows");
    }
    let vec = 16 / dt.size();
    let aligned =
        |t: &Layout| t.offset.is_multiple_of(vec) && strides(t).iter().all(|s| s.is_multiple_of(vec));
    if !aligned(k) || !aligned(v) {
        return Err("keys or values not 16-byte aligned");
    }
    Ok(Shape { batch, hq, hkv, l, s, e })
}

/// Query rows per block and blocks per group (splits over the keys) for `sh` on a device
/// of `sms` SMs that has clusters or not.
fn plan(sh: &Shape, sms: usize, clusters: bool) -> (usize, usize, usize) {
    let rows = sh.hq / sh.hkv * sh.l;
    let tile = TILES.into_iter().find(|&t| t >= rows).unwrap_or(MAX_QUERIES);
    let groups = sh.batch * sh.hkv * rows.div_ceil(tile);
    let splits = if clusters {
        (2 * sms).div_ceil(groups).min(sh.s.div_ceil(MIN_KEYS_PER_SPLIT)).clamp(1, MAX_SPLITS)
    } else {
        1
    };
    (tile, groups, splits)
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
    let clusters = dev.props().cc_major >= 9;
    let (tile, groups, splits) = plan(&sh, dev.props().sm_count.max(1) as usize, clusters);
    let name = format!("attention_decode_{}_d{}_r{tile}", suffix("scaled_dot_product_attention", dt)?, sh.e);
    let f = dev.function(&ATTENTION_DECODE, &name)?;
    let st = |l: &Layout| strides(l).map(|s| s as i64);
    let g = sh.hq / sh.hkv;
    let args = AdArgs {
        q: st(ql),
        k: st(kl),
        v: st(vl),
        hkv: sh.hkv as i32,
        g: g as i32,
        l: sh.l as i32,
        s: sh.s as i32,
        tiles: (g * sh.l).div_ceil(tile) as i32,
        causal: causal as i32,
        scale_log2: (scale * std::f64::consts::LOG2_E) as f32,
    };
    let at = |b: &DeviceBuffer, l: &Layout| b.ptr() + (l.offset * size) as u64;
    let (qp, kp, vp, lp, op) = (at(q, ql), at(k, kl), at(v, vl), len.unwrap_or(0), out.ptr());
    let cfg = LaunchConfig {
        grid_dim: ((groups * splits) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let how = Launch {
        cluster: (splits > 1).then_some(splits as u32),
        after_previous: dependent_launch(&dev)?,
        ..Launch::default()
    };
    // SAFETY: q, k and v hold the `sh` views at their layouts' offsets and strides (rows of
    // E contiguous elements; k and v 16-byte aligned, as `declines` checked); `lp` is 0 or
    // the address of one i32 on this device; `out` holds B·Hq·L·E elements. Clusters (of
    // at most 16 blocks, the grid a multiple) only on sm_90+, where the kernel merges them;
    // it waits for the previous kernel before its first global access.
    unsafe { launch(&dev.stream(), &f, cfg, how, &mut kernel_args![qp, kp, vp, lp, op, args])? };
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
        // Llama-3.1-8B at 4K: 8 groups of 4 rows, 16 splits.
        assert_eq!(plan(&sh(32, 8, 1, 4096), 132, true), (4, 8, 16));
        // Short caches split less; no clusters, no splits.
        assert_eq!(plan(&sh(32, 8, 1, 300), 132, true), (4, 8, 2));
        assert_eq!(plan(&sh(32, 8, 1, 4096), 132, false), (4, 8, 1));
        // MQA with 8 queries: 64 rows in 8 tiles of 8.
        assert_eq!(plan(&sh(8, 1, 8, 32768), 132, true), (8, 8, 16));
        assert_eq!(plan(&sh(2, 2, 1, 1), 132, true), (4, 2, 1));
    }
}
