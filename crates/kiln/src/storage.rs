//! The bytes behind a tensor, on one device. Views share one `Storage`.

use crate::cpu::CpuBuffer;
use crate::cuda::DeviceBuffer;
use std::sync::atomic::AtomicBool;
use std::sync::RwLock;

pub enum Storage {
    Cpu(CpuBuffer),
    Cuda(DeviceBuffer),
}

/// A storage as its views share it: the bytes, and whether they are frozen
/// ([`crate::Tensor::freeze`]): constant from then on.
pub(crate) struct Shared {
    pub(crate) data: RwLock<Storage>,
    pub(crate) frozen: AtomicBool,
}

impl Shared {
    pub(crate) fn new(storage: Storage) -> Shared {
        Shared { data: RwLock::new(storage), frozen: AtomicBool::new(false) }
    }
}
