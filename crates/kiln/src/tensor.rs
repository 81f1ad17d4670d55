//! The `Tensor` handle: shared storage plus a strided layout, dtype and device.
//! Op methods live in `ops/`, one file per family.

use crate::backend::{on_backend, Backend};
use crate::cpu::CpuBuffer;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::storage::{Shared, Storage};
use crate::{DType, Device, Elem};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLockReadGuard, RwLockWriteGuard};

/// A strided view of typed storage. Cloning is cheap (shares storage), as are view ops.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) storage: Arc<Shared>,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
    pub(crate) device: Device,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, {}, {})", self.shape(), self.dtype, self.device)
    }
}

impl Tensor {
    pub(crate) fn from_storage(storage: Storage, shape: &[usize], dtype: DType, device: Device) -> Tensor {
        Tensor { storage: Arc::new(Shared::new(storage)), layout: Layout::contiguous(shape), dtype, device }
    }

    pub(crate) fn from_cpu(buf: CpuBuffer, shape: &[usize], dtype: DType) -> Tensor {
        Self::from_storage(Storage::Cpu(buf), shape, dtype, Device::Cpu)
    }

    /// A new view of the same storage.
    pub(crate) fn with_layout(&self, layout: Layout) -> Tensor {
        Tensor { storage: self.storage.clone(), layout, dtype: self.dtype, device: self.device }
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Storage> {
        self.storage.data.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The storage for an in-place write by `op`; refused once it is frozen.
    pub(crate) fn write(&self, op: &'static str) -> Result<RwLockWriteGuard<'_, Storage>> {
        if self.is_frozen() {
            return Err(Error::invalid(op, "the tensor is frozen (Tensor::freeze): its storage is constant"));
        }
        Ok(self.storage.data.write().unwrap_or_else(|e| e.into_inner()))
    }

    /// Declares this tensor's storage (every view of it) constant from now on, as model
    /// parameters are: waits until the kernels queued so far have finished writing it, then
    /// refuses in-place writes (`copy_`, `put_`). Kernels may then read it before the kernel
    /// ahead of them on the stream has finished: `scaled_mm`'s decode kernel starts
    /// streaming a frozen weight while the previous op still runs (programmatic dependent
    /// launch, sm_90+), which in a run of decode ops hides most of each launch's latency.
    /// On the CPU the storage moves onto huge pages where Linux allows
    /// (`CpuBuffer::collapse_huge_pages`), for the same streaming reads.
    pub fn freeze(&self) -> Result<()> {
        match (self.device, &*self.read()) {
            (Device::Cuda(i), _) => crate::cuda::device(i)?.synchronize()?,
            (_, Storage::Cpu(b)) => b.collapse_huge_pages(),
            _ => {}
        }
        self.storage.frozen.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether [`Tensor::freeze`] was called on this storage.
    pub fn is_frozen(&self) -> bool {
        self.storage.frozen.load(Ordering::Acquire)
    }

    /// Size of each dim.
    pub fn shape(&self) -> &[usize] {
        &self.layout.shape
    }

    /// The same as [`Tensor::shape`].
    pub fn dims(&self) -> &[usize] {
        &self.layout.shape
    }

    /// Stride of each dim, in elements of the storage.
    pub fn strides(&self) -> &[usize] {
        &self.layout.strides
    }

    /// Shape, strides and storage offset of this view.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Device of the storage.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.layout.rank()
    }

    /// Number of elements (1 for a rank-0 tensor).
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }

    /// Whether the view is dense and row-major (its storage can be read as one slice).
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// Size of `dim` (negative dims count from the end).
    pub fn size(&self, dim: isize) -> Result<usize> {
        Ok(self.shape()[crate::layout::normalize_dim(dim, self.rank())?])
    }

    /// Bytes of the elements this view covers.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }

    /// True when both handles view the same storage.
    pub fn same_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// A tensor from host values, on `device`.
    pub fn from_vec<T: Elem>(values: Vec<T>, shape: &[usize], device: Device) -> Result<Tensor> {
        if values.len() != crate::layout::numel(shape) {
            return Err(Error::bad_shape(
                "from_vec",
                format!("{} values do not fill shape {:?}", values.len(), shape),
            ));
        }
        Tensor::from_cpu(CpuBuffer::from_vec(values), shape, T::DTYPE).to_device(device)
    }

    /// [`Tensor::from_vec`] of a copy of `values`.
    pub fn from_slice<T: Elem>(values: &[T], shape: &[usize], device: Device) -> Result<Tensor> {
        Self::from_vec(values.to_vec(), shape, device)
    }

    /// A tensor from raw little-endian element bytes (e.g. safetensors data).
    pub fn from_raw_bytes(bytes: &[u8], shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let want = crate::layout::numel(shape) * dtype.size();
        if bytes.len() != want {
            return Err(Error::bad_shape(
                "from_raw_bytes",
                format!("{} bytes for shape {:?} of {dtype} (needs {want})", bytes.len(), shape),
            ));
        }
        let storage = on_backend!(device: device, |B| B::wrap(B::upload(device, bytes)?));
        Ok(Tensor::from_storage(storage, shape, dtype, device))
    }

    /// The elements in row-major order as raw bytes (copies to the host).
    pub fn to_raw_bytes(&self) -> Result<Vec<u8>> {
        let t = self.contiguous()?;
        let start = t.layout.offset * t.dtype.size();
        let bytes = on_backend!(&*t.read(), |B, b| B::read_bytes(b, start, t.nbytes())?);
        Ok(bytes)
    }

    /// The elements in row-major order; `T` must be this tensor's dtype.
    pub fn to_vec<T: Elem>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::DTypeMismatch { op: "to_vec", lhs: self.dtype, rhs: T::DTYPE });
        }
        let bytes = self.to_raw_bytes()?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Every element converted to f64 (complex: real part).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        let bytes = self.to_raw_bytes()?;
        Ok(crate::with_dtype!(self.dtype, T, {
            bytemuck::pod_collect_to_vec::<u8, T>(&bytes).into_iter().map(|v| v.to_f64()).collect()
        }))
    }

    /// The single element of a one-element tensor, as f64.
    pub fn item(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(Error::bad_shape(
                "item",
                format!("tensor of shape {:?} has not one element", self.shape()),
            ));
        }
        Ok(self.to_f64_vec()?[0])
    }

    pub(crate) fn check_same_device(&self, other: &Tensor, op: &'static str) -> Result<()> {
        if self.device != other.device {
            return Err(Error::DeviceMismatch { op, lhs: self.device, rhs: other.device });
        }
        Ok(())
    }
}
