//! Where a tensor lives.

use crate::error::Result;

/// Where a tensor's storage lives and its ops run. Displays as `cpu` / `cuda:N`, as
/// [`Device::parse`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory; ops run on the CPU backend.
    Cpu,
    /// The CUDA device with this ordinal.
    Cuda(usize),
}

impl Device {
    /// The first CUDA device when one works, else the CPU. Why CUDA is unusable is in
    /// `cuda::availability()`.
    pub fn best() -> Device {
        if crate::cuda::availability().is_ok() {
            Device::Cuda(0)
        } else {
            Device::Cpu
        }
    }

    /// Parses `cpu`, `cuda`, `cuda:N` and `auto`.
    pub fn parse(s: &str) -> Result<Device> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "auto" => Ok(Device::best()),
            "cuda" => Ok(Device::Cuda(0)),
            _ => match s.strip_prefix("cuda:").and_then(|n| n.parse().ok()) {
                Some(i) => Ok(Device::Cuda(i)),
                None => Err(crate::Error::invalid(
                    "device",
                    format!("unknown device {s:?} (cpu, cuda, cuda:N, auto)"),
                )),
            },
        }
    }

    /// Whether this is a CUDA device.
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}
