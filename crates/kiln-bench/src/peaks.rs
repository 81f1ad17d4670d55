//! The memory family over a stretch of work on a CUDA device, at the three levels
//! DESIGN.md keeps apart: live tensors, the allocator's pool, what the driver reports used.

use kiln::cuda::{CudaDevice, DriverPeakProbe};
use kiln::{Device, Result};
use serde_json::{json, Value};
use std::sync::Arc;

/// Peaks being measured since [`Peaks::start`].
pub struct Peaks {
    dev: Arc<CudaDevice>,
    probe: DriverPeakProbe,
}

/// The three peaks, in bytes.
#[derive(Clone, Copy, Debug)]
pub struct MemoryPeaks {
    /// Peak bytes held by live tensors.
    pub live: u64,
    /// Peak bytes the allocator's pool held from the driver.
    pub reserved: u64,
    /// Peak device memory the driver reported used (all processes).
    pub driver_used: u64,
}

impl Peaks {
    /// Starts sampling the driver and resets the allocator's peaks; `None` on the CPU.
    pub fn start(device: Device) -> Result<Option<Peaks>> {
        let Device::Cuda(i) = device else { return Ok(None) };
        let dev = kiln::cuda::device(i)?;
        let probe = dev.driver_peak_probe()?;
        dev.reset_peak();
        Ok(Some(Peaks { dev, probe }))
    }

    pub(crate) fn device(&self) -> &CudaDevice {
        &self.dev
    }

    /// Stops sampling and returns the three peaks since [`Peaks::start`].
    pub fn finish(self) -> MemoryPeaks {
        let m = self.dev.memory_stats();
        MemoryPeaks {
            live: m.peak_live_bytes,
            reserved: m.peak_reserved_bytes,
            driver_used: self.probe.finish(),
        }
    }
}

/// The peaks of a suite run: printed as `  {label}: peak live …`, returned as JSON; null
/// on the CPU.
pub fn report(peaks: Option<Peaks>, label: &str) -> Value {
    let Some(p) = peaks else { return Value::Null };
    let m = p.finish();
    println!("  {label}: {m}");
    m.to_json()
}

impl MemoryPeaks {
    pub(crate) fn to_json(self) -> Value {
        json!({ "peak_live_bytes": self.live, "peak_reserved_bytes": self.reserved,
                "peak_driver_used_bytes": self.driver_used })
    }
}

impl std::fmt::Display for MemoryPeaks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "peak live {:.2} GiB, peak reserved {:.2} GiB, peak driver-used {:.2} GiB",
            gib(self.live),
            gib(self.reserved),
            gib(self.driver_used)
        )
    }
}

pub(crate) fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}
