//! Prefill attention (`kernels/attention_prefill.cu`): `scaled_dot_product_attention` for
//! many queries per head as a FlashAttention-2 forward on tensor cores (mma.sync), with
//! causal masking by an offset (top-left or bottom-right), boolean or additive masks read
//! where they lie, and memory O(L) (the output only). [`declines`] is the one place that
//! says which shapes it takes; `ops/attention.rs` sends it what the decode kernel does not
//! take and the rest to the composed path.
//!
//! On by default; [`settings::PREFILL_ATTENTION`] (`KILN_PREFILL_ATTENTION=0`) sends those
//! calls to the composed path instead, for comparison.

use super::attention_decode::{aligned, strides, views, Shape};
use super::{dev_of, suffix, ATTENTION_PREFILL};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::Result;
use crate::layout::Layout;
#[cfg(doc)]
use crate::settings;
use crate::DType;
use cudarc::driver::sys::CUfunction_attribute as FuncAttr;
use cudarc::driver::DeviceRepr;

/// Head dims with a compiled kernel.
pub const HEAD_DIMS: [usize; 6] = [40, 64, 80, 96, 128, 256];
/// `AP_STAGES` of the kernel.
const STAGES: usize = 2;

/// `ApCfg<D>` of the kernel: warps (16 query rows each) and keys per tile.
fn config(d: usize) -> (usize, usize) {
    if d > 128 {
        (4, 32)
    } else {
        (8, 64)
    }
}

/// Dynamic shared memory for head dim `d` (`ApCfg::BYTES`): the query tile and the
/// stages of key and value tiles, rows of the padded head dim + 8 elements.
fn smem_bytes(d: usize) -> usize {
    let (warps, keys) = config(d);
    let pitch = d.div_ceil(16) * 16 + 8;
    (16 * warps + STAGES * 2 * keys) * pitch * 2
}

/// Mirrors `struct ApArgs` of the kernel (passed by value).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ApArgs {
    q: [i64; 3],
    k: [i64; 3],
    v: [i64; 3],
    m: [i64; 4],
    hq: i32,
    g: i32,
    l: i32,
    s: i32,
    tiles: i32,
    causal: i32,
    offset: i32,
    mask: i32,
    scale_log2: f32,
}

// SAFETY: `#[repr(C)]` plain-old-data: thirteen i64, then eight i32 and an f32 (size 144 with
// the tail padding, align 8), as `struct ApArgs` of attention_prefill.cu lays them out.
unsafe impl DeviceRepr for ApArgs {}
const _: () = assert!(std::mem::size_of::<ApArgs>() == 144);

/// An attention mask as the kernel reads it: bool (u8, nonzero attends) or f32 added to the
/// scores, at `offset` elements with strides of (batch, query head, query, key) of the
/// `[B, Hq, L, S]` it broadcasts to (0 where it broadcasts).
pub struct Mask<'a> {
    /// The mask's storage.
    pub buf: &'a DeviceBuffer,
    /// Bool (else f32).
    pub bool: bool,
    /// First element.
    pub offset: usize,
    /// Strides of batch, query head, query, key.
    pub strides: [usize; 4],
}

/// The kernel's view of `q`, `k`, `v`, or why another path takes them: what the decode
/// kernel's checks ask (`attention_decode::views`), at least one query, a head dim of
/// [`HEAD_DIMS`], and the queries 16-byte aligned too.
pub fn declines(q: &Layout, k: &Layout, v: &Layout, dt: DType) -> std::result::Result<Shape, &'static str> {
    let sh = views(q, k, v, dt)?;
    if sh.l == 0 {
        return Err("no queries");
    }
    if !HEAD_DIMS.contains(&sh.e) {
        return Err("head dim other than 40, 64, 80, 96, 128, 256");
    }
    if !aligned(q, dt) {
        return Err("queries not 16-byte aligned");
    }
    Ok(sh)
}

/// The mask's strides over `[B, Hq, L, S]` of `sh` (rank 3 without a batch dim), or `None`
/// where it does not broadcast to that shape.
pub fn mask_strides(m: &Layout, sh: &Shape, batched: bool) -> Option<[usize; 4]> {
    let mut shape = vec![sh.hq, sh.l, sh.s];
    if batched {
        shape.insert(0, sh.batch);
    }
    let b = m.broadcast_to(&shape).ok()?;
    let st = &b.strides;
    Some(if batched { [st[0], st[1], st[2], st[3]] } else { [0, st[0], st[1], st[2]] })
}

/// `softmax(q·kᵀ·scale + mask)·v` → `[B, Hq, L, E]` contiguous, where [`declines`] gave
/// `sh`. With `causal = Some(offset)` query i sees keys j ≤ i + offset.
#[allow(clippy::too_many_arguments)]
pub fn sdpa(
    (q, ql): (&DeviceBuffer, &Layout),
    (k, kl): (&DeviceBuffer, &Layout),
    (v, vl): (&DeviceBuffer, &Layout),
    mask: Option<Mask<'_>>,
    sh: Shape,
    dt: DType,
    causal: Option<isize>,
    scale: f64,
) -> Result<DeviceBuffer> {
    let dev = dev_of(q)?;
    let size = dt.size();
    let out = dev.alloc(sh.batch * sh.hq * sh.l * sh.e * size)?;
    let (warps, _) = config(sh.e);
    let tiles = sh.l.div_ceil(16 * warps);
    let ty = suffix("scaled_dot_product_attention", dt)?;
    let f = dev.function(&ATTENTION_PREFILL, &format!("attention_prefill_{ty}_d{}", sh.e))?;
    let smem = smem_bytes(sh.e);
    f.set_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
    let st = |l: &Layout| strides(l).map(|s| s as i64);
    // Offsets past either end mean every key or none; clamped so i + offset stays in i32.
    let offset = causal.unwrap_or(0).clamp(-(sh.l as isize), sh.s as isize) as i32;
    let args = ApArgs {
        q: st(ql),
        k: st(kl),
        v: st(vl),
        m: mask.as_ref().map_or([0; 4], |m| m.strides.map(|s| s as i64)),
        hq: sh.hq as i32,
        g: (sh.hq / sh.hkv) as i32,
        l: sh.l as i32,
        s: sh.s as i32,
        tiles: tiles as i32,
        causal: causal.is_some() as i32,
        offset,
        mask: mask.as_ref().map_or(0, |m| if m.bool { 1 } else { 2 }),
        scale_log2: (scale * std::f64::consts::LOG2_E) as f32,
    };
    let at = |b: &DeviceBuffer, l: &Layout| b.ptr() + (l.offset * size) as u64;
    let mp = mask.as_ref().map_or(0, |m| m.buf.ptr() + (m.offset * if m.bool { 1 } else { 4 }) as u64);
    let (qp, kp, vp, op) = (at(q, ql), at(k, kl), at(v, vl), out.ptr());
    let cfg = LaunchConfig {
        grid_dim: ((tiles * sh.batch * sh.hq) as u32, 1, 1),
        block_dim: (32 * warps as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    // SAFETY: q, k and v hold the `sh` views at their layouts' offsets and strides (rows of
    // E contiguous elements, 16-byte aligned, as `declines` checked); `mp` is 0 or a mask
    // of u8 / f32 elements covering [B, Hq, L, S] at its strides; `out` holds B·Hq·L·E
    // elements, of which the kernel writes rows below L only. The kernel waits for the
    // previous kernel before its first global access.
    unsafe { launch_after!(dev, f, cfg; qp, kp, vp, mp, op, args)? };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declines_says_why() {
        let l = Layout::contiguous;
        // The models' prompt: q a transposed [B, T, H, D] view, keys a cache view.
        let mut q = l(&[1, 100, 32, 128]);
        q.shape.swap(1, 2);
        q.strides.swap(1, 2);
        let mut k = l(&[1, 8, 4096, 128]);
        k.shape[2] = 100;
        assert!(declines(&q, &k, &k, DType::BF16).is_ok());
        let (q40, k40) = (l(&[2, 8, 77, 40]), l(&[2, 8, 91, 40]));
        assert!(declines(&q40, &k40, &k40, DType::F16).is_ok());
        let (q72, k72) = (l(&[1, 8, 64, 72]), l(&[1, 8, 64, 72]));
        assert_eq!(
            declines(&q72, &k72, &k72, DType::BF16).unwrap_err(),
            "head dim other than 40, 64, 80, 96, 128, 256"
        );
        let mut qo = l(&[1, 8, 64, 64]);
        qo.offset = 4;
        let k64 = l(&[1, 8, 64, 64]);
        assert_eq!(declines(&qo, &k64, &k64, DType::BF16).unwrap_err(), "queries not 16-byte aligned");
        assert_eq!(declines(&q, &k, &k, DType::F32).unwrap_err(), "dtype other than f16 / bf16");
    }

    #[test]
    fn masks_broadcast_by_strides() {
        let sh = Shape { batch: 2, hq: 4, hkv: 2, l: 9, s: 11, e: 64 };
        let m = Layout::contiguous(&[9, 11]);
        assert_eq!(mask_strides(&m, &sh, true), Some([0, 0, 11, 1]));
        assert_eq!(mask_strides(&Layout::contiguous(&[2, 1, 9, 11]), &sh, true), Some([99, 0, 11, 1]));
        assert_eq!(mask_strides(&Layout::contiguous(&[4, 9, 11]), &sh, false), Some([0, 99, 11, 1]));
        assert_eq!(mask_strides(&Layout::contiguous(&[3, 1, 9, 11]), &sh, true), None);
    }

    #[test]
    fn shared_memory_fits_two_blocks_an_sm() {
        // 227 KB of shared memory per block on sm_90 (228 per SM), 163 KB on sm_80.
        assert!(HEAD_DIMS.iter().all(|&d| 2 * smem_bytes(d) <= 228 * 1024));
        assert_eq!(smem_bytes(128), (128 + 2 * 2 * 64) * 136 * 2);
        assert_eq!(smem_bytes(40), (128 + 2 * 2 * 64) * 56 * 2);
        assert_eq!(smem_bytes(256), (64 + 2 * 2 * 32) * 264 * 2);
    }
}
