//! Launchers of `kernels/copy.cu`: casts, strided copies, fills, random fills.

use super::{dev_of, dtype_code, grid, size_suffix, Strided, COPY};
use crate::cuda::{device_of, DeviceBuffer, PushKernelArg};
use crate::error::Result;
use crate::layout::Layout;
use crate::ops::RandKind;
use crate::{DType, Device, Elem};

/// x [..., K] as rows K elements long and `stride` apart from storage offset `offset`;
/// `None` when the view is not like that.
pub(super) fn rows_of(xl: &Layout, k: usize) -> Option<(usize, usize)> {
    let r = xl.rank();
    if k > 1 && xl.strides[r - 1] != 1 {
        return None;
    }
    let lead = Layout { shape: xl.shape[..r - 1].to_vec(), strides: xl.strides[..r - 1].to_vec(), offset: 0 }
        .coalesced();
    match lead.rank() {
        0 => Some((xl.offset, k)),
        1 => Some((xl.offset, lead.strides[0])),
        _ => None,
    }
}

/// `x` `[..., K]` as rows of K elements for a kernel that loads them `align` bytes at a time:
/// (a contiguous copy when the view is not such rows, kept alive by the caller until the
/// launch is enqueued; the first row's address; the row stride in elements). Decode
/// activations are small, so the copy is cheap where it happens.
pub(super) fn aligned_rows(
    x: &DeviceBuffer,
    xl: &Layout,
    k: usize,
    dt: DType,
    align: u64,
) -> Result<(Option<DeviceBuffer>, u64, i64)> {
    let (size, rows) = (dt.size(), xl.numel() / k.max(1));
    let aligned = |p: u64, stride: usize| {
        p.is_multiple_of(align) && (rows <= 1 || ((stride * size) as u64).is_multiple_of(align))
    };
    let direct =
        rows_of(xl, k).map(|(off, s)| (x.ptr() + (off * size) as u64, s)).filter(|&(p, s)| aligned(p, s));
    Ok(match direct {
        Some((p, s)) => (None, p, s as i64),
        None => {
            let c = cast(x, xl, dt, dt)?;
            let p = c.ptr();
            (Some(c), p, k as i64)
        }
    })
}

/// Contiguous copy of the view `l` of `src`, converted from `from` to `to`.
pub fn cast(src: &DeviceBuffer, l: &Layout, from: DType, to: DType) -> Result<DeviceBuffer> {
    let dev = dev_of(src)?;
    let n = l.numel();
    let out = dev.alloc(n * to.size())?;
    if n == 0 {
        return Ok(out);
    }
    if from == to && l.is_contiguous() {
        // SAFETY: both ranges lie inside their allocations (the view is in bounds of
        // `src`; `out` holds n elements).
        unsafe { dev.dtod(src.ptr() + (l.offset * from.size()) as u64, out.ptr(), n * to.size())? };
        return Ok(out);
    }
    if from == to {
        let f = dev.function(&COPY, &format!("copy_{}", size_suffix(from)))?;
        let (s, d) = (Strided::of(l)?, Strided::of(&Layout::contiguous(&l.shape))?);
        let (sp, dp, n64) = (src.ptr(), out.ptr(), n as i64);
        // SAFETY: copy_bN reads n elements of `src` through `s` (in bounds: a valid view)
        // and writes n contiguous elements of `out`.
        unsafe { launch_after!(dev, f, grid(&dev, n); sp, s, dp, d, n64)? };
        return Ok(out);
    }
    let f = dev.function(&COPY, "cast_strided")?;
    let (s, sdt, ddt) = (Strided::of(l)?, dtype_code("cast", from)?, dtype_code("cast", to)?);
    let (sp, dp, n64) = (src.ptr(), out.ptr(), n as i64);
    // SAFETY: cast_strided reads n elements of dtype `from` through `s` and writes n
    // elements of dtype `to` to `out`, which holds exactly that many bytes.
    unsafe { launch_after!(dev, f, grid(&dev, n); sp, sdt, s, dp, ddt, n64)? };
    Ok(out)
}

/// `dst[dl] = src[sl]` for two views of one dtype and shape.
pub fn copy_into(
    dst: &mut DeviceBuffer,
    dl: &Layout,
    src: &DeviceBuffer,
    sl: &Layout,
    dt: DType,
) -> Result<()> {
    let dev = dev_of(dst)?;
    let n = dl.numel();
    if n == 0 {
        return Ok(());
    }
    let f = dev.function(&COPY, &format!("copy_{}", size_suffix(dt)))?;
    let (s, d) = (Strided::exact(sl)?, Strided::exact(dl)?);
    let (sp, dp, n64) = (src.ptr(), dst.ptr(), n as i64);
    // SAFETY: both views are in bounds of their buffers and have n elements.
    unsafe { launch!(dev.stream(), f, grid(&dev, n); sp, s, dp, d, n64)? };
    Ok(())
}

/// n elements of `dtype`, all `value` (rounded on the host exactly as the CPU does).
pub fn fill(device: Device, n: usize, dtype: DType, value: f64) -> Result<DeviceBuffer> {
    let dev = device_of(device)?;
    let out = dev.alloc(n * dtype.size())?;
    if n == 0 {
        return Ok(out);
    }
    let bits: u64 = crate::with_dtype!(dtype, T, {
        let mut b = [0u8; 8];
        b[..dtype.size()].copy_from_slice(bytemuck::bytes_of(&T::from_f64(value)));
        u64::from_le_bytes(b)
    });
    let f = dev.function(&COPY, &format!("fill_{}", size_suffix(dtype)))?;
    let (p, n64) = (out.ptr(), n as i64);
    let stream = dev.stream();
    let mut b = stream.raw().launch_builder(&f);
    b.arg(&p);
    let (v1, v2, v4) = (bits as u8, bits as u16, bits as u32);
    match dtype.size() {
        1 => b.arg(&v1),
        2 => b.arg(&v2),
        4 => b.arg(&v4),
        _ => b.arg(&bits),
    };
    b.arg(&n64);
    // SAFETY: fill_bN writes n elements of the matching size into `out`.
    unsafe { b.launch(grid(&dev, n)).map_err(launch_error!())? };
    Ok(out)
}

/// `start + i·step` for i in 0..n, made on the device (a graph capture can hold it: no
/// host copy).
pub fn arange(device: Device, n: usize, dtype: DType, start: f64, step: f64) -> Result<DeviceBuffer> {
    let dev = device_of(device)?;
    let out = dev.alloc(n * dtype.size())?;
    if n == 0 {
        return Ok(out);
    }
    let f = dev.function(&COPY, "arange_fill")?;
    let (p, ddt, n64) = (out.ptr(), dtype_code("arange", dtype)?, n as i64);
    // SAFETY: arange_fill writes n elements of `dtype` into `out`.
    unsafe { launch!(dev.stream(), f, grid(&dev, n); p, ddt, start, step, n64)? };
    Ok(out)
}

/// n seeded random values (same generator as the CPU, see ops/create.rs).
pub fn rand(device: Device, n: usize, dtype: DType, seed: u64, kind: RandKind) -> Result<DeviceBuffer> {
    let dev = device_of(device)?;
    let out = dev.alloc(n * dtype.size())?;
    if n == 0 {
        return Ok(out);
    }
    let f = dev.function(&COPY, "rand_fill")?;
    let (p, ddt, k, n64) =
        (out.ptr(), dtype_code("rand", dtype)?, (kind == RandKind::Normal) as i32, n as i64);
    // SAFETY: rand_fill writes n elements of `dtype` into `out`.
    unsafe { launch!(dev.stream(), f, grid(&dev, n); p, ddt, seed, k, n64)? };
    Ok(out)
}
