//! Sizes checked before memory is taken. A shape whose byte count overflows, or a host
//! allocation the machine cannot make, is a typed error here instead of an abort
//! ("memory allocation of N bytes failed") or a capacity-overflow panic in a kernel.
//! Ops whose output size comes from an argument (creation, padding, resizing, counting,
//! convolution) call [`check_output`] before they compute.

use crate::error::{Error, Result};
use crate::{DType, Device};

/// The bytes of a `shape` tensor of `dtype`, or [`Error::SizeOverflow`].
pub fn nbytes(op: &'static str, shape: &[usize], dtype: DType) -> Result<usize> {
    shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Error::SizeOverflow { op, shape: shape.to_vec() })
}

/// Whether the host can give `bytes` now: the reservation is made and released at once
/// (address space only; no page is touched), so an impossible request is
/// [`Error::HostOutOfMemory`] before any kernel allocates it.
pub fn host_can_allocate(op: &'static str, bytes: usize) -> Result<()> {
    Vec::<u8>::new().try_reserve_exact(bytes).map_err(|_| Error::HostOutOfMemory { op, bytes })
}

/// A `shape` / `dtype` output on `device`: its size must not overflow, and on the CPU the
/// host must be able to hold it (a GPU's allocator reports its own exhaustion).
pub fn check_output(op: &'static str, shape: &[usize], dtype: DType, device: Device) -> Result<()> {
    let bytes = nbytes(op, shape, dtype)?;
    match device {
        Device::Cpu => host_can_allocate(op, bytes),
        Device::Cuda(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_sizes_are_errors() {
        let e = nbytes("t", &[1 << 40, 1 << 40], DType::F32).unwrap_err();
        assert!(matches!(e, Error::SizeOverflow { .. }), "{e}");
        let e = check_output("t", &[1 << 61], DType::U8, Device::Cpu).unwrap_err();
        assert!(matches!(e, Error::HostOutOfMemory { bytes, .. } if bytes == 1 << 61), "{e}");
        check_output("t", &[3, 5], DType::F64, Device::Cpu).unwrap();
        let e = crate::Tensor::zeros(&[1 << 62, 4], DType::F32, Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("overflows"), "{e}");
        let e = crate::Tensor::logspace(0.0, 1.0, 1 << 60, 10.0, DType::F32, Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("cannot allocate"), "{e}");
    }
}
