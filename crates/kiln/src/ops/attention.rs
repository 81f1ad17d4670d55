//! `scaled_dot_product_attention` with PyTorch's semantics (`F.scaled_dot_product_attention`
//! without dropout): batch dims broadcast, grouped-query heads (`enable_gqa`), top-left
//! causal masking, additive or boolean masks, rows that every key is masked from give 0
//! (the math backend's safe softmax) instead of NaN. Composed of kiln ops (matmul, softmax,
//! where), so it runs on every device they do; it is the reference dedicated attention
//! kernels are checked against.

use crate::backend::{buf, Backend, Route};
use crate::cpu::Cpu;
use crate::cuda::Cuda;
use crate::error::{Error, Result};
use crate::{DType, Tensor};

/// Options of [`Tensor::scaled_dot_product_attention`]; `Sdpa::default()` is PyTorch's.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sdpa<'a> {
    /// Broadcastable to `[..., Hq, L, S]`: bool (true = the query attends to the key) or a
    /// float dtype (added to the scores, in f32).
    pub attn_mask: Option<&'a Tensor>,
    /// Query `i` attends to keys `0..=i + causal_offset` (top-left aligned when L ≠ S, as
    /// PyTorch); not together with `attn_mask`.
    pub is_causal: bool,
    /// With `is_causal`, where the diagonal starts (kiln's own; PyTorch's is 0): `S − L`
    /// aligns it bottom-right, as a decoder's `L` new queries after `S − L` cached keys
    /// see the cache and themselves up to their own position. Kernels read it as a number,
    /// so no `[L, S]` mask is made. Rows it leaves with no key (a negative offset) give 0.
    pub causal_offset: isize,
    /// Multiplies the scores; `None` is `1 / sqrt(E)`.
    pub scale: Option<f64>,
    /// Key and value heads (dim −3) each serve `Hq / Hkv` consecutive query heads.
    pub enable_gqa: bool,
    /// A one-element i32 tensor on the inputs' device: only the first `min(kv_len, S)` keys
    /// count (kiln's own; PyTorch has none). The length is read on the device, never on the
    /// host, so a captured CUDA graph attends over a growing KV cache without re-capture.
    /// Not together with `attn_mask`; a row left with no key gives 0.
    pub kv_len: Option<&'a Tensor>,
}

const OP: &str = "scaled_dot_product_attention";

impl Tensor {
    /// `softmax(self · keyᵀ · scale + mask) · value` for `self` `[..., Hq, L, E]`, `key`
    /// `[..., Hkv, S, E]`, `value` `[..., Hkv, S, Ev]`; the output is `[..., Hq, L, Ev]` in
    /// the inputs' dtype. The scores are computed in that dtype and taken to f32 for the
    /// mask and softmax. With `enable_gqa` the query heads of one key head are folded into
    /// its rows, so keys and values are read as they lie (no repeat).
    ///
    /// On CUDA, 1–8 queries per head without `attn_mask` (and top-left if causal) take the
    /// decode attention kernel (`cuda/ops/attention_decode.rs`, which says which shapes
    /// fit); other calls without `kv_len` take the prefill (flash) kernel where
    /// `cuda/ops/attention_prefill.rs` says they fit. On the CPU, the decode kernel's calls
    /// with `[B, H, S, E]` operands take `cpu/attention.rs`, computed in f32 and rounded
    /// once. The rest are composed (`KILN_DECODE_ATTENTION=0`, `KILN_PREFILL_ATTENTION=0`).
    pub fn scaled_dot_product_attention(&self, key: &Tensor, value: &Tensor, o: &Sdpa<'_>) -> Result<Tensor> {
        let q = self;
        check(q, key, value, o)?;
        let (r, l, e) = (q.rank(), q.shape()[q.rank() - 2], q.shape()[q.rank() - 1]);
        let s = key.shape()[key.rank() - 2];
        let scale = o.scale.unwrap_or(1.0 / (e as f64).sqrt());
        if let Some(out) = decode_kernel(q, key, value, o, scale)? {
            return Ok(out);
        }
        if let Some(out) = prefill_kernel(q, key, value, o, scale)? {
            return Ok(out);
        }
        if let Some(out) = cpu_decode(q, key, value, o, scale)? {
            return Ok(out);
        }
        let causal =
            if o.is_causal { Some(Sdpa::causal_mask(l, s, o.causal_offset, q.device())?) } else { None };
        let bias = match (o.attn_mask, causal, o.kv_len) {
            (Some(m), _, _) => Some(additive(m)?),
            (None, c, Some(n)) => {
                let first = Tensor::arange(0.0, s as f64, 1.0, DType::I32, q.device())?.lt(n)?;
                let b = additive(&first)?;
                Some(match c {
                    Some(c) => c.add(&b)?,
                    None => b,
                })
            }
            (None, c, None) => c,
        };
        // Grouped heads: [..., Hkv·g, L, E] viewed as [..., Hkv, g·L, E].
        let g = if o.enable_gqa { q.shape()[r - 3] / key.shape()[key.rank() - 3] } else { 1 };
        let qf = if g > 1 {
            let mut sh = q.shape()[..r - 3].to_vec();
            sh.extend([q.shape()[r - 3] / g, g * l, e]);
            q.reshape(&sh)?
        } else {
            q.clone()
        };
        let mut scores = qf.matmul(&key.transpose(-1, -2)?)?.mul_scalar(scale)?.to_dtype(DType::F32)?;
        if let Some(b) = &bias {
            scores = if g > 1 { grouped_add(&scores, b, g, l, s)? } else { scores.add(b)? };
        }
        let mut probs = scores.softmax(-1)?;
        if o.attn_mask.is_some() || o.kv_len.is_some() || (o.is_causal && o.causal_offset < 0) {
            // Every key masked: 0, not softmax's NaN.
            let dead = scores.max(&[-1], true)?.eq_scalar(f64::NEG_INFINITY)?;
            probs = Tensor::where_cond(&dead, &Tensor::scalar(0.0, DType::F32, q.device())?, &probs)?;
        }
        let out = probs.to_dtype(q.dtype())?.matmul(value)?;
        if g == 1 {
            return Ok(out);
        }
        let mut sh = out.shape()[..out.rank() - 2].to_vec();
        let hkv = sh.pop().expect("folded output has a head dim");
        sh.extend([hkv * g, l, value.shape()[value.rank() - 1]]);
        out.reshape(&sh)
    }
}

/// The CUDA decode kernel's result, or `None` where the composed path takes the call.
fn decode_kernel(q: &Tensor, k: &Tensor, v: &Tensor, o: &Sdpa<'_>, scale: f64) -> Result<Option<Tensor>> {
    use crate::cuda::ops::attention_decode;
    if !matches!(q.device(), crate::Device::Cuda(_))
        || o.attn_mask.is_some()
        || (o.is_causal && o.causal_offset != 0)
        || !crate::settings::DECODE_ATTENTION.get()?
    {
        return Ok(None);
    }
    let Some(sh) =
        kernel_shape(q, k, o, attention_decode::declines(q.layout(), k.layout(), v.layout(), q.dtype()))
    else {
        return Ok(None);
    };
    let len_ptr = match o.kv_len {
        Some(n) => Some(buf::<Cuda>(&n.read(), OP)?.ptr() + (n.layout().offset * 4) as u64),
        None => None,
    };
    let (gq, gk, gv) = (q.read(), k.read(), v.read());
    let y = attention_decode::sdpa(
        (buf::<Cuda>(&gq, OP)?, q.layout()),
        (buf::<Cuda>(&gk, OP)?, k.layout()),
        (buf::<Cuda>(&gv, OP)?, v.layout()),
        len_ptr,
        sh,
        q.dtype(),
        o.is_causal,
        scale,
    )?;
    Ok(Some(kernel_output(q, y, sh)))
}

/// A kernel's shape where `declined` accepted the views and their heads fit `o`: heads
/// that only broadcast (without `enable_gqa`) must be 1 or equal. `None` (logged): composed.
fn kernel_shape(
    q: &Tensor,
    k: &Tensor,
    o: &Sdpa<'_>,
    declined: std::result::Result<crate::cuda::ops::attention_decode::Shape, &'static str>,
) -> Option<crate::cuda::ops::attention_decode::Shape> {
    match declined {
        Ok(sh) if o.enable_gqa || sh.hkv == 1 || sh.hkv == sh.hq => Some(sh),
        Ok(_) => None,
        Err(why) => {
            Route::of(format_args!("{OP} {:?} {:?}", q.shape(), k.shape()), Some(why));
            None
        }
    }
}

/// A kernel's `[..., Hq, L, E]` output buffer as a tensor.
fn kernel_output(
    q: &Tensor,
    buf: crate::cuda::DeviceBuffer,
    sh: crate::cuda::ops::attention_decode::Shape,
) -> Tensor {
    let mut shape = q.shape()[..q.rank() - 2].to_vec();
    shape.extend([sh.l, sh.e]);
    Tensor::from_storage(Cuda::wrap(buf), &shape, q.dtype(), q.device())
}

/// The CUDA prefill (flash) kernel's result, or `None` where the composed path takes the
/// call: no `kv_len`, a mask that broadcasts to `[B, Hq, L, S]` without widening the batch.
/// Float masks other than f32 are widened to f32 first (as the composed path adds them).
fn prefill_kernel(q: &Tensor, k: &Tensor, v: &Tensor, o: &Sdpa<'_>, scale: f64) -> Result<Option<Tensor>> {
    use crate::cuda::ops::attention_prefill::{self, Mask};
    if !matches!(q.device(), crate::Device::Cuda(_))
        || o.kv_len.is_some()
        || !crate::settings::PREFILL_ATTENTION.get()?
    {
        return Ok(None);
    }
    let Some(sh) =
        kernel_shape(q, k, o, attention_prefill::declines(q.layout(), k.layout(), v.layout(), q.dtype()))
    else {
        return Ok(None);
    };
    let mask = match o.attn_mask {
        Some(m) if m.dtype() == DType::Bool || m.dtype() == DType::F32 => Some(m.clone()),
        Some(m) => Some(m.to_dtype(DType::F32)?),
        None => None,
    };
    let strides = match &mask {
        Some(m) => match attention_prefill::mask_strides(m.layout(), &sh, q.rank() == 4) {
            Some(st) => Some(st),
            None => return Ok(None),
        },
        None => None,
    };
    let mask_storage = mask.as_ref().map(|m| m.read());
    let mask_arg = match (&mask_storage, &mask, strides) {
        (Some(g), Some(m), Some(strides)) => {
            let b = buf::<Cuda>(g, OP)?;
            Some(Mask { buf: b, bool: m.dtype() == DType::Bool, offset: m.layout().offset, strides })
        }
        _ => None,
    };
    let causal = o.is_causal.then_some(o.causal_offset);
    let (gq, gk, gv) = (q.read(), k.read(), v.read());
    let y = attention_prefill::sdpa(
        (buf::<Cuda>(&gq, OP)?, q.layout()),
        (buf::<Cuda>(&gk, OP)?, k.layout()),
        (buf::<Cuda>(&gv, OP)?, v.layout()),
        mask_arg,
        sh,
        q.dtype(),
        causal,
        scale,
    )?;
    Ok(Some(kernel_output(q, y, sh)))
}

/// The CPU decode attention's result, or `None` where the composed path takes the call:
/// 1–8 queries, no `attn_mask`, rank-4 operands with equal batch, heads equal or grouped
/// (`enable_gqa`), the last dim contiguous.
fn cpu_decode(q: &Tensor, k: &Tensor, v: &Tensor, o: &Sdpa<'_>, scale: f64) -> Result<Option<Tensor>> {
    use crate::cpu::attention::{decode, Shape, View};
    use half::{bf16, f16};
    let [qs, ks, vs] = [q, k, v].map(|t| t.shape());
    let fits = q.device() == crate::Device::Cpu
        && o.attn_mask.is_none()
        && !(o.is_causal && o.causal_offset != 0)
        && [qs, ks, vs].iter().all(|s| s.len() == 4 && s[0] == qs[0])
        && (1..=8).contains(&qs[2])
        && vs[1] == ks[1]
        && (qs[1] == ks[1] || o.enable_gqa)
        && crate::settings::DECODE_ATTENTION.get()?;
    if !fits {
        return Ok(None);
    }
    let sh = Shape { b: qs[0], hq: qs[1], hkv: ks[1], l: qs[2], s: ks[2], e: qs[3], ev: vs[3] };
    let keys = match o.kv_len {
        Some(n) => n.to_vec::<i32>()?[0].max(0) as usize,
        None => sh.s,
    };
    let dt = q.dtype();
    // The queries in f32 (a few rows); keys and values as they lie when f32, bf16 or f16
    // (the kernel widens them as it reads), else widened once (f64).
    let cache_dt = if matches!(dt, DType::F32 | DType::BF16 | DType::F16) { dt } else { DType::F32 };
    let q = q.to_dtype(DType::F32)?;
    let [k, v] = [k, v].map(|t| t.to_dtype(cache_dt));
    let [q, k, v] = [q, k?, v?].map(|t| if t.layout().strides[3] == 1 { Ok(t) } else { t.contiguous() });
    let (q, k, v) = (q?, k?, v?);
    let (gq, gk, gv) = (q.read(), k.read(), v.read());
    let (bq, bk, bv) = (buf::<Cpu>(&gq, OP)?, buf::<Cpu>(&gk, OP)?, buf::<Cpu>(&gv, OP)?);
    fn view<'a, T: crate::Elem>(t: &Tensor, b: &'a crate::cpu::CpuBuffer) -> View<'a, T> {
        let l = t.layout();
        View {
            data: b.as_slice::<T>(),
            offset: l.offset,
            strides: [l.strides[0], l.strides[1], l.strides[2]],
        }
    }
    let (vq, causal, scale) = (view::<f32>(&q, bq), o.is_causal, scale as f32);
    let y = match cache_dt {
        DType::BF16 => decode(&vq, &view::<bf16>(&k, bk), &view(&v, bv), sh, keys, causal, scale),
        DType::F16 => decode(&vq, &view::<f16>(&k, bk), &view(&v, bv), sh, keys, causal, scale),
        _ => decode(&vq, &view::<f32>(&k, bk), &view(&v, bv), sh, keys, causal, scale),
    };
    Tensor::from_vec(y, &[sh.b, sh.hq, sh.l, sh.ev], q.device())?.to_dtype(dt).map(Some)
}

fn check(q: &Tensor, k: &Tensor, v: &Tensor, o: &Sdpa<'_>) -> Result<()> {
    for t in [k, v].into_iter().chain(o.attn_mask).chain(o.kv_len) {
        q.check_same_device(t, OP)?;
    }
    if !q.dtype().is_float() {
        return Err(Error::DTypeNotSupported { op: OP, got: q.dtype(), expected: "a floating dtype" });
    }
    for t in [k, v] {
        if t.dtype() != q.dtype() {
            return Err(Error::DTypeMismatch { op: OP, lhs: q.dtype(), rhs: t.dtype() });
        }
    }
    let shapes = format!("{:?}, {:?}, {:?}", q.shape(), k.shape(), v.shape());
    let min_rank = if o.enable_gqa { 3 } else { 2 };
    if [q, k, v].iter().any(|t| t.rank() < min_rank) {
        return Err(Error::bad_shape(
            OP,
            format!(
                "query, key and value need at least {min_rank} dims{}, got {shapes}",
                if o.enable_gqa { " with enable_gqa ([..., heads, L, E])" } else { " ([..., L, E])" },
            ),
        ));
    }
    let dim = |t: &Tensor, i: usize| t.shape()[t.rank() - i];
    if dim(q, 1) != dim(k, 1) {
        return Err(Error::bad_shape(OP, format!("query and key need the same E ([..., E]): got {shapes}")));
    }
    if dim(k, 2) != dim(v, 2) {
        return Err(Error::bad_shape(
            OP,
            format!("key and value need the same S ([..., S, ·]): got {shapes}"),
        ));
    }
    if o.enable_gqa {
        let (hq, hk, hv) = (dim(q, 3), dim(k, 3), dim(v, 3));
        if hk != hv || hk == 0 || !hq.is_multiple_of(hk) {
            return Err(Error::bad_shape(
                OP,
                format!("enable_gqa needs key and value heads alike, dividing the query's {hq}: got {hk} and {hv}"),
            ));
        }
    }
    if o.is_causal && o.attn_mask.is_some() {
        return Err(Error::invalid(OP, "an explicit attn_mask and is_causal = true do not go together"));
    }
    if o.causal_offset != 0 && !o.is_causal {
        return Err(Error::invalid(OP, "causal_offset needs is_causal = true"));
    }
    if let Some(n) = o.kv_len {
        if o.attn_mask.is_some() {
            return Err(Error::invalid(OP, "an explicit attn_mask and kv_len do not go together"));
        }
        if n.dtype() != DType::I32 || n.numel() != 1 {
            return Err(Error::bad_shape(
                OP,
                format!("kv_len must be one i32, got {:?} {}", n.shape(), n.dtype()),
            ));
        }
    }
    if let Some(m) = o.attn_mask {
        if m.dtype() != DType::Bool && !m.dtype().is_float() {
            return Err(Error::DTypeNotSupported {
                op: OP,
                got: m.dtype(),
                expected: "bool or a floating dtype",
            });
        }
    }
    Ok(())
}

/// The mask as f32 to add to the scores: bool masks become 0 / −inf.
fn additive(m: &Tensor) -> Result<Tensor> {
    if m.dtype() != DType::Bool {
        return m.to_dtype(DType::F32);
    }
    let (zero, ninf) = (
        Tensor::scalar(0.0, DType::F32, m.device())?,
        Tensor::scalar(f64::NEG_INFINITY, DType::F32, m.device())?,
    );
    Tensor::where_cond(m, &zero, &ninf)
}

impl Sdpa<'_> {
    /// The additive causal mask `[L, S]` (f32): 0 where query `i` may see key `j ≤ i +
    /// offset`, −inf elsewhere: the composed path's form of `is_causal` with
    /// `causal_offset`. Kernels read the offset instead.
    pub fn causal_mask(l: usize, s: usize, offset: isize, device: crate::Device) -> Result<Tensor> {
        let m: Vec<f32> = (0..l)
            .flat_map(|i| {
                (0..s).map(move |j| if j as isize <= i as isize + offset { 0.0 } else { f32::NEG_INFINITY })
            })
            .collect();
        Tensor::from_vec(m, &[l, s], device)
    }
}

/// `scores` `[..., Hkv, g·L, S]` + `bias` broadcastable to `[..., Hkv·g, L, S]`: both
/// viewed with the group as its own dim, `[..., Hkv, g, L, S]`.
fn grouped_add(scores: &Tensor, bias: &Tensor, g: usize, l: usize, s: usize) -> Result<Tensor> {
    let r = scores.rank();
    let hkv = scores.shape()[r - 3];
    let mut sh = scores.shape()[..r - 2].to_vec();
    sh.extend([g, l, s]);
    let br = bias.rank();
    let b = match (br >= 3).then(|| bias.shape()[br - 3]) {
        // Per query head: split into (key head, group).
        Some(h) if h == hkv * g => {
            let mut bs = bias.shape()[..br - 3].to_vec();
            bs.extend([hkv, g]);
            bs.extend_from_slice(&bias.shape()[br - 2..]);
            bias.reshape(&bs)?
        }
        Some(1) => bias.unsqueeze(-3)?,
        Some(h) => {
            return Err(Error::bad_shape(
                OP,
                format!("attn_mask {:?} has {h} heads, the query {}", bias.shape(), hkv * g),
            ))
        }
        None => bias.clone(),
    };
    let sum = scores.reshape(&sh)?.add(&b)?;
    // The mask may broadcast batch dims that the scores lacked.
    let mut out_sh = sum.shape()[..sum.rank() - 4].to_vec();
    out_sh.extend_from_slice(&scores.shape()[r - 3..]);
    sum.reshape(&out_sh)
}

#[cfg(test)]
mod tests {
    use super::Sdpa;
    use crate::{DType, Device, Tensor};

    const CPU: Device = Device::Cpu;

    /// The definition, element by element in f64, with keys and values repeated per group.
    fn naive(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, causal: bool, gqa: bool) -> Vec<f64> {
        let (b, hq, l, e) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
        let (bk, hk, s, ev) = (k.shape()[0], k.shape()[1], k.shape()[2], v.shape()[3]);
        let g = if gqa { hq / hk } else { 1 };
        let (qv, kv, vv) = (q.to_f64_vec().unwrap(), k.to_f64_vec().unwrap(), v.to_f64_vec().unwrap());
        let mv = mask.map(|m| {
            m.broadcast_to(&[b, hq, l, s]).unwrap().to_dtype(DType::F64).unwrap().to_f64_vec().unwrap()
        });
        let bool_mask = mask.is_some_and(|m| m.dtype() == DType::Bool);
        let mut out = vec![0.0; b * hq * l * ev];
        for (bi, h, i) in (0..b).flat_map(|bi| (0..hq).flat_map(move |h| (0..l).map(move |i| (bi, h, i)))) {
            let kb = if bk == 1 { 0 } else { bi };
            let kh = if hk == 1 && !gqa { 0 } else { h / g };
            let kvrow = |j: usize| (kb * hk + kh) * s + j;
            let mut w: Vec<f64> = (0..s)
                .map(|j| {
                    let dot: f64 =
                        (0..e).map(|x| qv[((bi * hq + h) * l + i) * e + x] * kv[kvrow(j) * e + x]).sum();
                    let mut sc = dot / (e as f64).sqrt();
                    if causal && j > i {
                        sc = f64::NEG_INFINITY;
                    }
                    if let Some(m) = &mv {
                        let mval = m[((bi * hq + h) * l + i) * s + j];
                        sc = if bool_mask {
                            if mval != 0.0 {
                                sc
                            } else {
                                f64::NEG_INFINITY
                            }
                        } else {
                            sc + mval
                        };
                    }
                    sc
                })
                .collect();
            let top = w.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            if top == f64::NEG_INFINITY {
                continue; // every key masked: 0
            }
            w.iter_mut().for_each(|x| *x = (*x - top).exp());
            let z: f64 = w.iter().sum();
            for c in 0..ev {
                out[((bi * hq + h) * l + i) * ev + c] =
                    (0..s).map(|j| w[j] / z * vv[kvrow(j) * ev + c]).sum();
            }
        }
        out
    }

    fn close(got: &Tensor, want: &[f64]) {
        let got = got.to_f64_vec().unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "element {i}: {a} vs {b}");
        }
    }

    #[test]
    fn matches_the_definition_with_broadcasting_gqa_causal_and_masks() {
        let r = |shape: &[usize], seed| Tensor::randn(shape, seed, DType::F32, CPU).unwrap();
        // (q, k, v shapes, causal, gqa): batch broadcast, GQA with L ≠ S (top-left causal),
        // one shared key head broadcast over the query heads.
        let cases = [
            ([2, 3, 5, 8], [1, 3, 7, 8], 6, false, false),
            ([1, 6, 5, 4], [1, 2, 9, 4], 3, true, true),
            ([2, 4, 3, 8], [2, 1, 3, 8], 5, true, false),
            ([3, 4, 1, 16], [3, 2, 33, 16], 16, false, true),
        ];
        for (n, (qs, ks, ev, causal, gqa)) in cases.into_iter().enumerate() {
            let seed = 10 * n as u64;
            let (q, k) = (r(&qs, seed), r(&ks, seed + 1));
            let v = r(&[ks[0], ks[1], ks[2], ev], seed + 2);
            let o = Sdpa { is_causal: causal, enable_gqa: gqa, ..Sdpa::default() };
            let y = q.scaled_dot_product_attention(&k, &v, &o).unwrap();
            assert_eq!(y.shape(), &[qs[0].max(ks[0]), qs[1], qs[2], ev], "case {n}");
            close(&y, &naive(&q, &k, &v, None, causal, gqa));
        }
    }

    #[test]
    fn masks_add_or_select_and_fully_masked_rows_give_zero() {
        let r = |shape: &[usize], seed| Tensor::randn(shape, seed, DType::F32, CPU).unwrap();
        let (q, k, v) = (r(&[2, 4, 3, 8], 1), r(&[2, 2, 6, 8], 2), r(&[2, 2, 6, 5], 3));
        // Additive, per query head (split over the groups) and broadcast over the batch.
        let add = r(&[1, 4, 3, 6], 4);
        let o = Sdpa { attn_mask: Some(&add), enable_gqa: true, ..Sdpa::default() };
        close(
            &q.scaled_dot_product_attention(&k, &v, &o).unwrap(),
            &naive(&q, &k, &v, Some(&add), false, true),
        );
        // Boolean [L, S] with query row 1 seeing no key at all.
        let keep: Vec<f32> = (0..18).map(|i| if i / 6 == 1 { 0.0 } else { (i % 2) as f32 }).collect();
        let keep = Tensor::from_vec(keep, &[3, 6], CPU).unwrap().to_dtype(DType::Bool).unwrap();
        let o = Sdpa { attn_mask: Some(&keep), enable_gqa: true, ..Sdpa::default() };
        let y = q.scaled_dot_product_attention(&k, &v, &o).unwrap();
        let want = naive(&q, &k, &v, Some(&keep), false, true);
        close(&y, &want);
        let row1 = y.narrow(2, 1, 1).unwrap().to_f64_vec().unwrap();
        assert!(row1.iter().all(|&x| x == 0.0), "fully masked row: {row1:?}");
    }

    #[test]
    fn causal_offset_moves_the_diagonal() {
        let r = |shape: &[usize], seed| Tensor::randn(shape, seed, DType::F32, CPU).unwrap();
        // Bottom-right (S − L), past S, negative (the first rows see nothing): L of 1–8 (the
        // CPU decode path's sizes) and more, grouped heads.
        for (n, (l, s, off)) in
            [(3, 7, 4), (12, 20, 8), (5, 5, 9), (6, 4, -2), (10, 10, -10)].into_iter().enumerate()
        {
            let seed = 40 + 3 * n as u64;
            let (q, k, v) = (r(&[2, 4, l, 8], seed), r(&[2, 2, s, 8], seed + 1), r(&[2, 2, s, 5], seed + 2));
            let keep: Vec<f32> = (0..l * s)
                .map(|x| if (x % s) as isize <= (x / s) as isize + off { 1.0 } else { 0.0 })
                .collect();
            let keep = Tensor::from_vec(keep, &[l, s], CPU).unwrap().to_dtype(DType::Bool).unwrap();
            let o = Sdpa { is_causal: true, causal_offset: off, enable_gqa: true, ..Sdpa::default() };
            let y = q.scaled_dot_product_attention(&k, &v, &o).unwrap();
            close(&y, &naive(&q, &k, &v, Some(&keep), false, true));
            if off < 0 {
                let dead = y.narrow(2, 0, (-off) as usize).unwrap().to_f64_vec().unwrap();
                assert!(dead.iter().all(|&x| x == 0.0), "rows before the diagonal: {dead:?}");
            }
        }
        let (q, k) = (r(&[1, 2, 3, 8], 1), r(&[1, 2, 5, 8], 2));
        let o = Sdpa { causal_offset: 2, ..Sdpa::default() };
        let err = q.scaled_dot_product_attention(&k, &k, &o).unwrap_err().to_string();
        assert!(err.contains("causal_offset needs is_causal"), "{err}");
    }

    #[test]
    fn the_scale_replaces_one_over_sqrt_e() {
        let r = |shape: &[usize], seed| Tensor::randn(shape, seed, DType::F32, CPU).unwrap();
        let (q, k, v) = (r(&[1, 2, 3, 4], 5), r(&[1, 2, 3, 4], 6), r(&[1, 2, 3, 4], 7));
        let y =
            q.scaled_dot_product_attention(&k, &v, &Sdpa { scale: Some(0.3), ..Sdpa::default() }).unwrap();
        // 0.3 = 1/sqrt(E) for q scaled by 0.6 (E = 4).
        close(&y, &naive(&q.mul_scalar(0.6).unwrap(), &k, &v, None, false, false));
    }

    #[test]
    fn kv_len_attends_to_the_first_keys_only() {
        let r = |shape: &[usize], seed| Tensor::randn(shape, seed, DType::F32, CPU).unwrap();
        let (q, k, v) = (r(&[1, 4, 3, 8], 8), r(&[1, 2, 9, 8], 9), r(&[1, 2, 9, 5], 10));
        for (n, causal) in [(4, false), (4, true), (9, false), (20, true), (0, false)] {
            let len = Tensor::from_vec(vec![n as i32], &[1], CPU).unwrap();
            let o = Sdpa { kv_len: Some(&len), is_causal: causal, enable_gqa: true, ..Sdpa::default() };
            let y = q.scaled_dot_product_attention(&k, &v, &o).unwrap();
            let m = n.min(9);
            let (kn, vn) = (k.narrow(2, 0, m).unwrap(), v.narrow(2, 0, m).unwrap());
            close(&y, &naive(&q, &kn, &vn, None, causal, true));
        }
        let bad = Tensor::from_vec(vec![1i64, 2], &[2], CPU).unwrap();
        let o = Sdpa { kv_len: Some(&bad), ..Sdpa::default() };
        assert!(q.scaled_dot_product_attention(&k, &v, &o).unwrap_err().to_string().contains("one i32"));
    }

    #[test]
    fn bad_inputs_are_refused_with_reasons() {
        let r = |shape: &[usize]| Tensor::randn(shape, 1, DType::F32, CPU).unwrap();
        let (q, k, v) = (r(&[1, 6, 3, 8]), r(&[1, 4, 5, 8]), r(&[1, 4, 5, 8]));
        let err = |q: &Tensor, k: &Tensor, v: &Tensor, o: Sdpa| {
            q.scaled_dot_product_attention(k, v, &o).expect_err("must be refused").to_string()
        };
        let gqa = Sdpa { enable_gqa: true, ..Sdpa::default() };
        assert!(err(&q, &k, &v, gqa).contains("dividing"));
        assert!(err(&q, &r(&[1, 4, 5, 7]), &v, Sdpa::default()).contains("same E"));
        assert!(err(&q, &k, &r(&[1, 4, 6, 8]), Sdpa::default()).contains("same S"));
        assert!(err(&r(&[3, 8]), &r(&[5, 8]), &r(&[5, 8]), gqa).contains("at least 3 dims"));
        let m = r(&[3, 5]);
        let both = Sdpa { attn_mask: Some(&m), is_causal: true, ..Sdpa::default() };
        assert!(err(&r(&[1, 4, 3, 8]), &k, &v, both).contains("is_causal"));
        let bf = k.to_dtype(DType::BF16).unwrap();
        assert!(q.scaled_dot_product_attention(&bf, &v, &Sdpa::default()).is_err());
        let im = Tensor::zeros(&[3, 5], DType::I64, CPU).unwrap();
        let int_mask = Sdpa { attn_mask: Some(&im), ..Sdpa::default() };
        assert!(err(&r(&[1, 4, 3, 8]), &k, &v, int_mask).contains("bool or a floating dtype"));
    }
}
