//! CUDA's [`Backend`] impl: the launchers of `cuda/ops/` behind the seam's signatures.
//! Indices stay on the device (no host sync); the kernels' rules for bad ones are in
//! `kernels/index.cu`.

use super::ops;
use super::DeviceBuffer;
use crate::backend::{At, Backend, RotaryCache, RotaryNorm, RotaryStart, ScaledMm};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::{BinaryOp, Gather, RandKind, ReduceOp, Reduction, Scatter, UnaryOp};
use crate::storage::Storage;
use crate::{DType, Device};

/// The CUDA backend.
pub(crate) struct Cuda;

impl Backend for Cuda {
    type Buf = DeviceBuffer;

    fn of(s: &Storage) -> Option<&DeviceBuffer> {
        match s {
            Storage::Cuda(b) => Some(b),
            _ => None,
        }
    }

    fn wrap(b: DeviceBuffer) -> Storage {
        Storage::Cuda(b)
    }

    fn fill(device: Device, n: usize, dt: DType, value: f64) -> Result<DeviceBuffer> {
        ops::fill(device, n, dt, value)
    }

    fn rand(device: Device, n: usize, dt: DType, seed: u64, kind: RandKind) -> Result<DeviceBuffer> {
        ops::rand(device, n, dt, seed, kind)
    }

    fn arange(device: Device, n: usize, dt: DType, start: f64, step: f64) -> Result<DeviceBuffer> {
        ops::arange(device, n, dt, start, step)
    }

    fn upload(device: Device, bytes: &[u8]) -> Result<DeviceBuffer> {
        super::device_of(device)?.htod(bytes)
    }

    fn read_bytes(x: &DeviceBuffer, start: usize, len: usize) -> Result<Vec<u8>> {
        ops::dev_of(x)?.dtoh(x, start, len)
    }

    fn cast(x: &DeviceBuffer, l: &Layout, from: DType, to: DType) -> Result<DeviceBuffer> {
        ops::cast(x, l, from, to)
    }

    fn copy_into(
        dst: &mut DeviceBuffer,
        dl: &Layout,
        src: &DeviceBuffer,
        sl: &Layout,
        dt: DType,
    ) -> Result<()> {
        ops::copy_into(dst, dl, src, sl, dt)
    }

    fn binary(
        op: BinaryOp,
        x: &DeviceBuffer,
        xl: &Layout,
        y: &DeviceBuffer,
        yl: &Layout,
        dt: DType,
        out: DType,
    ) -> Result<DeviceBuffer> {
        ops::binary(op, x, xl, y, yl, dt, out)
    }

    fn unary(op: UnaryOp, x: &DeviceBuffer, l: &Layout, dt: DType) -> Result<DeviceBuffer> {
        ops::unary(op, x, l, dt)
    }

    fn where_(
        c: &DeviceBuffer,
        cl: &Layout,
        x: &DeviceBuffer,
        xl: &Layout,
        y: &DeviceBuffer,
        yl: &Layout,
        dt: DType,
    ) -> Result<DeviceBuffer> {
        ops::where_(c, cl, x, xl, y, yl, dt)
    }

    fn frexp(x: &DeviceBuffer, l: &Layout, dt: DType) -> Result<(DeviceBuffer, DeviceBuffer)> {
        ops::frexp(x, l, dt)
    }

    fn gather(
        _: &'static str,
        how: Gather,
        x: &DeviceBuffer,
        xl: &Layout,
        idx: &DeviceBuffer,
        il: &Layout,
        idt: DType,
        dt: DType,
    ) -> Result<DeviceBuffer> {
        match how {
            Gather::Select(d) => ops::index_select(x, xl, d, idx, il, idt, dt),
            Gather::Along(d) => ops::gather(x, xl, d, idx, il, idt, dt),
            Gather::Flat => ops::take(x, xl, idx, il, idt, dt),
        }
    }

    fn scatter(
        _: &'static str,
        x: &mut DeviceBuffer,
        xl: &Layout,
        how: Scatter,
        idx: &DeviceBuffer,
        il: &Layout,
        idt: DType,
        src: &DeviceBuffer,
        sl: &Layout,
        dt: DType,
    ) -> Result<()> {
        ops::scatter(x, xl, how, idx, il, idt, src, sl, dt)
    }

    fn reduce(
        op: ReduceOp,
        x: &DeviceBuffer,
        dt: DType,
        outer: usize,
        r: usize,
        out: DType,
    ) -> Result<DeviceBuffer> {
        ops::reduce(op, x, dt, outer, r, out)
    }

    fn var_mean(
        x: &DeviceBuffer,
        dt: DType,
        outer: usize,
        r: usize,
        correction: f64,
    ) -> Result<(DeviceBuffer, DeviceBuffer)> {
        ops::var_mean(x, dt, outer, r, correction)
    }

    fn softmax(x: &DeviceBuffer, dt: DType, outer: usize, r: usize, log: bool) -> Result<DeviceBuffer> {
        ops::softmax(x, dt, outer, r, log)
    }

    fn rms_norm(
        x: &DeviceBuffer,
        w: Option<&DeviceBuffer>,
        dt: DType,
        outer: usize,
        r: usize,
        eps: f64,
    ) -> Result<DeviceBuffer> {
        ops::rms_norm(x, w, dt, outer, r, eps)
    }

    fn topk(
        x: &DeviceBuffer,
        dt: DType,
        outer: usize,
        r: usize,
        k: usize,
        largest: bool,
    ) -> Result<(DeviceBuffer, DeviceBuffer)> {
        ops::topk(x, dt, outer, r, k, largest)
    }

    fn router_topk(
        x: &DeviceBuffer,
        dt: DType,
        bias: Option<&DeviceBuffer>,
        outer: usize,
        r: usize,
        k: usize,
        sigmoid: bool,
        norm_eps: Option<f64>,
    ) -> Result<(DeviceBuffer, DeviceBuffer)> {
        ops::router_topk(x, dt, bias, outer, r, k, sigmoid, norm_eps)
    }

    fn mse(x: &DeviceBuffer, y: &DeviceBuffer, dt: DType, n: usize, red: Reduction) -> Result<DeviceBuffer> {
        ops::mse_loss(x, y, dt, n, red)
    }

    fn bincount(
        x: &DeviceBuffer,
        w: Option<(&DeviceBuffer, DType)>,
        n: usize,
        nbins: usize,
    ) -> Result<DeviceBuffer> {
        ops::bincount(x, w, n, nbins)
    }

    fn expert_groups(
        _: &'static str,
        idx: &DeviceBuffer,
        n: usize,
        k: usize,
        num_experts: usize,
    ) -> Result<(DeviceBuffer, DeviceBuffer, DeviceBuffer)> {
        ops::expert_groups(idx, n, k, num_experts)
    }

    fn matmul(
        x: &DeviceBuffer,
        xl: &Layout,
        y: &DeviceBuffer,
        yl: &Layout,
        dt: DType,
    ) -> Result<DeviceBuffer> {
        ops::matmul(x, xl, y, yl, dt)
    }

    fn rotary(
        op: &'static str,
        x: &DeviceBuffer,
        xl: &Layout,
        norm: Option<RotaryNorm<'_, Self>>,
        cache: Option<RotaryCache<'_, Self>>,
        [cos, sin]: [&DeviceBuffer; 2],
        positions: usize,
        r: usize,
        start: RotaryStart<'_, Self>,
        dt: DType,
    ) -> Result<DeviceBuffer> {
        let (d, max_d) = (xl.shape[xl.rank() - 1], ops::rotary_max_head_dim(dt));
        if d > max_d {
            return Err(Error::bad_shape(op, format!("rows of {d} past the CUDA kernel's {max_d}")));
        }
        ops::rotary(x, xl, norm, cache, cos, sin, positions, r, start, dt)
    }

    fn scaled_mm(p: ScaledMm<'_, Self>) -> Result<DeviceBuffer> {
        ops::scaled_mm(p)
    }

    fn causal_conv(
        x: At<Self>,
        state: (&mut DeviceBuffer, usize),
        w: At<Self>,
        bias: Option<At<Self>>,
        dims: [usize; 4],
        silu: bool,
        dt: DType,
    ) -> Result<DeviceBuffer> {
        ops::causal_conv(x, (&*state.0, state.1), w, bias, dims, silu, dt)
    }

    fn gated_delta_step(
        [qkv, b, a, z]: [At<Self>; 4],
        state: (&mut DeviceBuffer, usize),
        [neg_a, dt_bias, norm]: [At<Self>; 3],
        dims: [usize; 5],
        eps: f64,
        dt: DType,
    ) -> Result<DeviceBuffer> {
        let state = (&*state.0, state.1);
        let bufs = ops::GatedDeltaBuffers { qkv, b, a, z, state, neg_a, dt_bias, norm };
        ops::gated_delta_step(bufs, dims, eps, dt)
    }
}
