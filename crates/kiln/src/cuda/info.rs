//! [`DeviceInfo`]: what `kiln info` prints about a device.

use super::availability::version_string;
use super::device::CudaDevice;
use crate::error::Result;

/// What `kiln info` prints about one device ([`CudaDevice::info`]); `Display` gives the
/// human-readable form, `Serialize` the JSON one.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceInfo {
    /// Device ordinal (`cuda:N`).
    pub ordinal: usize,
    /// Device name as the driver reports it.
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    /// NVRTC target used for kernels, e.g. `sm_90a`.
    pub arch: String,
    /// Number of streaming multiprocessors.
    pub sm_count: i32,
    /// Total device memory in bytes.
    pub total_mem: usize,
    /// Free device memory in bytes when the info was taken (`cuMemGetInfo`).
    pub free_mem: usize,
    /// L2 cache size in bytes.
    pub l2_bytes: i32,
    /// Shared memory per block a kernel may opt in to, in bytes.
    pub max_shared_mem_per_block_optin: i32,
    /// Newest CUDA version the driver supports (`cuDriverGetVersion`), e.g. `"13.0"`.
    pub driver_version: String,
    /// Kernel-module driver release (e.g. `"580.159.03"`) from `/proc/driver/nvidia/version`,
    /// when readable.
    pub driver_release: Option<String>,
    /// NVRTC version, e.g. `"13.0"`.
    pub nvrtc_version: String,
}

/// The release number in `/proc/driver/nvidia/version` ("... Kernel Module  580.159.03  ...").
fn driver_release() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let line = text.lines().next()?;
    line.split_whitespace()
        .find(|w| {
            w.split('.').count() >= 2
                && w.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

impl CudaDevice {
    /// Static properties plus current free memory.
    pub fn info(&self) -> Result<DeviceInfo> {
        let (free_mem, total_mem) = self.driver_mem_info()?;
        let p = self.props();
        let (nv_major, nv_minor) = self.nvrtc_version();
        Ok(DeviceInfo {
            ordinal: self.ordinal(),
            name: p.name.clone(),
            cc: (p.cc_major, p.cc_minor),
            arch: self.arch(),
            sm_count: p.sm_count,
            total_mem,
            free_mem,
            l2_bytes: p.l2_bytes,
            max_shared_mem_per_block_optin: p.max_shared_mem_per_block_optin,
            driver_version: version_string(self.driver_version()),
            driver_release: driver_release(),
            nvrtc_version: format!("{nv_major}.{nv_minor}"),
        })
    }
}

impl std::fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const GIB: f64 = (1u64 << 30) as f64;
        writeln!(
            f,
            "cuda:{}: {} (compute capability {}.{}, {})",
            self.ordinal, self.name, self.cc.0, self.cc.1, self.arch
        )?;
        writeln!(f, "  SMs: {}, L2: {} MiB", self.sm_count, self.l2_bytes >> 20)?;
        writeln!(
            f,
            "  memory: {:.1} GiB total, {:.1} GiB free",
            self.total_mem as f64 / GIB,
            self.free_mem as f64 / GIB
        )?;
        writeln!(f, "  shared memory per block (opt-in): {} KiB", self.max_shared_mem_per_block_optin >> 10)?;
        let release = self.driver_release.as_deref().map(|r| format!(" (driver {r})")).unwrap_or_default();
        write!(f, "  CUDA driver API {}{release}, NVRTC {}", self.driver_version, self.nvrtc_version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display() {
        let info = DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            cc: (9, 0),
            arch: "sm_90a".into(),
            sm_count: 132,
            total_mem: 150 << 30,
            free_mem: 149 << 30,
            l2_bytes: 60 << 20,
            max_shared_mem_per_block_optin: 227 << 10,
            driver_version: "13.0".into(),
            driver_release: Some("580.159.03".into()),
            nvrtc_version: "13.0".into(),
        };
        let s = info.to_string();
        assert!(s.contains("NVIDIA H200") && s.contains("sm_90a") && s.contains("580.159.03"), "{s}");
    }
}
