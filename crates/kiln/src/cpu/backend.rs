//! The CPU's [`Backend`] impl: the reference kernels of `cpu/` behind the seam's
//! signatures. Indices are read on the host, so they are range-checked here.

use super::{cast, index, to_f32_view, CpuBuffer};
use crate::backend::{At, Backend, RotaryCache, RotaryNorm, RotaryStart, ScaledMm};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::{BinaryOp, Gather, RandKind, ReduceOp, Reduction, Scatter, UnaryOp};
use crate::storage::Storage;
use crate::{DType, Device, Elem};

/// The CPU backend.
pub(crate) struct Cpu;

/// The indices of `idx`, negative ones wrapped, each checked against `size`.
fn checked_indices(
    op: &'static str,
    idx: &CpuBuffer,
    il: &Layout,
    idt: DType,
    size: usize,
) -> Result<Vec<usize>> {
    index::indices_as_i64(idx, il, idt).into_iter().map(|i| crate::ops::wrap_index(op, i, size)).collect()
}

/// `n` values `f(i)` in `dt`.
fn from_fn(n: usize, dt: DType, f: impl Fn(usize) -> f64) -> CpuBuffer {
    crate::with_dtype!(dt, T, CpuBuffer::from_vec((0..n).map(|i| T::from_f64(f(i))).collect::<Vec<T>>()))
}

impl Backend for Cpu {
    type Buf = CpuBuffer;

    fn of(s: &Storage) -> Option<&CpuBuffer> {
        match s {
            Storage::Cpu(b) => Some(b),
            _ => None,
        }
    }

    fn wrap(b: CpuBuffer) -> Storage {
        Storage::Cpu(b)
    }

    fn fill(_: Device, n: usize, dt: DType, value: f64) -> Result<CpuBuffer> {
        Ok(crate::with_dtype!(dt, T, CpuBuffer::from_vec(vec![T::from_f64(value); n])))
    }

    fn rand(_: Device, n: usize, dt: DType, seed: u64, kind: RandKind) -> Result<CpuBuffer> {
        use super::random::{normal_f32, uniform_f32};
        Ok(match kind {
            RandKind::Uniform => from_fn(n, dt, |i| uniform_f32(seed, i as u64) as f64),
            RandKind::Normal => from_fn(n, dt, |i| normal_f32(seed, i as u64) as f64),
        })
    }

    fn arange(_: Device, n: usize, dt: DType, start: f64, step: f64) -> Result<CpuBuffer> {
        Ok(from_fn(n, dt, |i| start + i as f64 * step))
    }

    fn upload(_: Device, bytes: &[u8]) -> Result<CpuBuffer> {
        Ok(CpuBuffer::from_bytes(bytes))
    }

    fn read_bytes(x: &CpuBuffer, start: usize, len: usize) -> Result<Vec<u8>> {
        Ok(x.bytes()[start..start + len].to_vec())
    }

    fn cast(x: &CpuBuffer, l: &Layout, from: DType, to: DType) -> Result<CpuBuffer> {
        Ok(cast(x, l, from, to))
    }

    fn copy_into(dst: &mut CpuBuffer, dl: &Layout, src: &CpuBuffer, sl: &Layout, dt: DType) -> Result<()> {
        index::copy_into(dst, dl, src, sl, dt);
        Ok(())
    }

    fn binary(
        op: BinaryOp,
        x: &CpuBuffer,
        xl: &Layout,
        y: &CpuBuffer,
        yl: &Layout,
        dt: DType,
        out: DType,
    ) -> Result<CpuBuffer> {
        Ok(super::elementwise::binary(op, x, xl, y, yl, dt, out))
    }

    fn unary(op: UnaryOp, x: &CpuBuffer, l: &Layout, dt: DType) -> Result<CpuBuffer> {
        Ok(super::elementwise::unary(op, x, l, dt))
    }

    fn where_(
        c: &CpuBuffer,
        cl: &Layout,
        x: &CpuBuffer,
        xl: &Layout,
        y: &CpuBuffer,
        yl: &Layout,
        dt: DType,
    ) -> Result<CpuBuffer> {
        Ok(super::elementwise::where_(c, cl, x, xl, y, yl, dt))
    }

    fn frexp(x: &CpuBuffer, l: &Layout, dt: DType) -> Result<(CpuBuffer, CpuBuffer)> {
        Ok(super::elementwise::frexp(x, l, dt))
    }

    fn gather(
        op: &'static str,
        how: Gather,
        x: &CpuBuffer,
        xl: &Layout,
        idx: &CpuBuffer,
        il: &Layout,
        idt: DType,
        dt: DType,
    ) -> Result<CpuBuffer> {
        Ok(match how {
            Gather::Select(d) => {
                let size = xl.shape.get(d).copied().unwrap_or(1);
                index::index_select(x, xl, d, &checked_indices(op, idx, il, idt, size)?, dt)
            }
            Gather::Along(d) => {
                index::gather(x, xl, d, &checked_indices(op, idx, il, idt, xl.shape[d])?, &il.shape, dt)
            }
            Gather::Flat => index::take(x, xl, &checked_indices(op, idx, il, idt, xl.numel())?, dt),
        })
    }

    fn scatter(
        op: &'static str,
        x: &mut CpuBuffer,
        xl: &Layout,
        how: Scatter,
        idx: &CpuBuffer,
        il: &Layout,
        idt: DType,
        src: &CpuBuffer,
        sl: &Layout,
        dt: DType,
    ) -> Result<()> {
        match how {
            Scatter::Flat { accumulate } => {
                let i = checked_indices(op, idx, il, idt, xl.numel())?;
                index::put(x, xl, &i, src, sl, dt, accumulate);
            }
            Scatter::Along(d) => {
                let i = checked_indices(op, idx, il, idt, xl.shape[d])?;
                index::index_copy(x, xl, d, &i, src, sl, dt);
            }
        }
        Ok(())
    }

    fn reduce(
        op: ReduceOp,
        x: &CpuBuffer,
        dt: DType,
        outer: usize,
        r: usize,
        out: DType,
    ) -> Result<CpuBuffer> {
        Ok(super::reduce::reduce(op, x, dt, outer, r, out))
    }

    fn var_mean(
        x: &CpuBuffer,
        dt: DType,
        outer: usize,
        r: usize,
        correction: f64,
    ) -> Result<(CpuBuffer, CpuBuffer)> {
        Ok(super::reduce::var_mean(x, dt, outer, r, correction))
    }

    fn softmax(x: &CpuBuffer, dt: DType, _outer: usize, r: usize, log: bool) -> Result<CpuBuffer> {
        Ok(super::nn::softmax(x, dt, r, log))
    }

    fn rms_norm(
        x: &CpuBuffer,
        w: Option<&CpuBuffer>,
        dt: DType,
        _outer: usize,
        r: usize,
        eps: f64,
    ) -> Result<CpuBuffer> {
        Ok(super::nn::rms_norm(x, w, dt, r, eps))
    }

    fn topk(
        x: &CpuBuffer,
        dt: DType,
        outer: usize,
        r: usize,
        k: usize,
        largest: bool,
    ) -> Result<(CpuBuffer, CpuBuffer)> {
        Ok(super::topk::topk(x, dt, outer, r, k, largest))
    }

    fn router_topk(
        x: &CpuBuffer,
        dt: DType,
        bias: Option<&CpuBuffer>,
        outer: usize,
        r: usize,
        k: usize,
        sigmoid: bool,
        norm_eps: Option<f64>,
    ) -> Result<(CpuBuffer, CpuBuffer)> {
        let bias = bias.map(|b| b.as_slice::<f32>());
        Ok(super::topk::router_topk(x, dt, bias, outer, r, k, sigmoid, norm_eps))
    }

    fn mse(x: &CpuBuffer, y: &CpuBuffer, dt: DType, n: usize, red: Reduction) -> Result<CpuBuffer> {
        Ok(super::loss::mse(x, y, dt, n, red))
    }

    fn bincount(x: &CpuBuffer, w: Option<(&CpuBuffer, DType)>, n: usize, nbins: usize) -> Result<CpuBuffer> {
        Ok(super::histogram::bincount(x, w, n, nbins))
    }

    fn expert_groups(
        op: &'static str,
        idx: &CpuBuffer,
        n: usize,
        k: usize,
        num_experts: usize,
    ) -> Result<(CpuBuffer, CpuBuffer, CpuBuffer)> {
        let idx = checked_indices(op, idx, &Layout::contiguous(&[n]), DType::I64, num_experts)?;
        let (rows, slot_rows, ends) = super::experts::expert_groups(&idx, k, num_experts);
        Ok((CpuBuffer::from_vec(rows), CpuBuffer::from_vec(slot_rows), CpuBuffer::from_vec(ends)))
    }

    fn matmul(x: &CpuBuffer, xl: &Layout, y: &CpuBuffer, yl: &Layout, dt: DType) -> Result<CpuBuffer> {
        use super::matmul::matmul;
        Ok(match dt {
            DType::F64 => CpuBuffer::from_vec(matmul(x.as_slice::<f64>(), xl, y.as_slice::<f64>(), yl)),
            DType::C64 => {
                CpuBuffer::from_vec(matmul(x.as_slice::<gemm::c32>(), xl, y.as_slice::<gemm::c32>(), yl))
            }
            DType::F32 => CpuBuffer::from_vec(matmul(x.as_slice::<f32>(), xl, y.as_slice::<f32>(), yl)),
            // 16-bit floats multiply in f32 and round once.
            _ if dt.is_float() => {
                let ((x32, cx), (y32, cy)) = (to_f32_view(x, xl, dt), to_f32_view(y, yl, dt));
                let v = matmul(x32.as_slice::<f32>(), &cx, y32.as_slice::<f32>(), &cy);
                let n = [v.len()];
                cast(&CpuBuffer::from_vec(v), &Layout::contiguous(&n), DType::F32, dt)
            }
            _ => return Err(Error::NotImplemented { op: "matmul", device: Device::Cpu, dtype: dt }),
        })
    }

    fn rotary(
        op: &'static str,
        x: &CpuBuffer,
        xl: &Layout,
        norm: Option<RotaryNorm<'_, Self>>,
        cache: Option<RotaryCache<'_, Self>>,
        [cos, sin]: [&CpuBuffer; 2],
        positions: usize,
        r: usize,
        start: RotaryStart<'_, Self>,
        dt: DType,
    ) -> Result<CpuBuffer> {
        if norm.is_some() || cache.is_some() {
            return Err(Error::NotImplemented { op, device: Device::Cpu, dtype: dt });
        }
        let p = match start {
            RotaryStart::At(p) => p,
            RotaryStart::Device(b, at) => usize::try_from(b.as_slice::<i64>()[at]).unwrap_or(usize::MAX),
        };
        let (t, d) = (xl.shape[xl.rank() - 2], xl.shape[xl.rank() - 1]);
        if p.saturating_add(t) > positions {
            let msg = format!("tokens at positions {p}..+{t} past the tables' {positions}");
            return Err(Error::bad_shape(op, msg));
        }
        let dense = (!xl.is_contiguous() || xl.offset != 0).then(|| cast(x, xl, dt, dt));
        Ok(super::rotary::rotary(dense.as_ref().unwrap_or(x), cos, sin, r, t, d, p, dt))
    }

    fn scaled_mm(p: ScaledMm<'_, Self>) -> Result<CpuBuffer> {
        let bias =
            p.bias.map(|b| cast(b, &Layout::contiguous(&[b.len_bytes() / p.out.size()]), p.out, DType::F32));
        let (sa, sb) = (p.scale_a.as_slice::<f32>(), p.scale_b.as_slice::<f32>());
        Ok(super::scaled_mm::scaled_mm(p.a, p.b, sa, sb, bias.as_ref().map(|b| b.as_slice::<f32>()), p.out))
    }

    fn causal_conv(
        x: At<Self>,
        state: (&mut CpuBuffer, usize),
        w: At<Self>,
        bias: Option<At<Self>>,
        dims: [usize; 4],
        silu: bool,
        dt: DType,
    ) -> Result<CpuBuffer> {
        Ok(super::causal_conv::causal_conv_buffers(x, state.0, state.1, w, bias, dims, silu, dt))
    }

    fn gated_delta_step(
        ins: [At<Self>; 4],
        state: (&mut CpuBuffer, usize),
        params: [At<Self>; 3],
        dims: [usize; 5],
        eps: f64,
        dt: DType,
    ) -> Result<CpuBuffer> {
        Ok(super::gated_delta::gated_delta_step(ins, state, params, dims, eps, dt))
    }
}
