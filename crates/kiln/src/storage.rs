//! The bytes behind a tensor, on one device. Views share one `Storage`.

use crate::cpu::CpuBuffer;
use crate::cuda::DeviceBuffer;

pub enum Storage {
    Cpu(CpuBuffer),
    Cuda(DeviceBuffer),
}
