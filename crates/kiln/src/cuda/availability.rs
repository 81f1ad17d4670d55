//! Can CUDA be used here, and which driver and NVRTC are there. cudarc loads libcuda and libnvrtc
//! lazily and panics when one is missing, so every first touch goes through [`quiet_catch`].

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{result as dresult, sys as dsys};
use cudarc::nvrtc::sys as nsys;

/// Oldest driver accepted, as `cuDriverGetVersion` reports it (CUDA 12.0).
pub(crate) const MIN_DRIVER_VERSION: i32 = 12000;

/// Whether CUDA can be used in this process: libcuda loads, the driver supports CUDA ≥ 12.0,
/// there is at least one device, and libnvrtc loads. Probed once; `Err` holds the reason.
pub fn availability() -> std::result::Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE.get_or_init(probe).clone()
}

fn probe() -> Result<(), String> {
    let version = driver_version()?;
    if version < MIN_DRIVER_VERSION {
        return Err(format!(
            "the CUDA driver supports CUDA {} but kiln needs {} or newer; update the NVIDIA driver",
            version_string(version),
            version_string(MIN_DRIVER_VERSION)
        ));
    }
    let count = quiet_catch("cuInit", || -> Result<i32, String> {
        dresult::init().map_err(|e| format!("cuInit failed: {e}"))?;
        dresult::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e}"))
    })??;
    if count < 1 {
        return Err("the CUDA driver is installed but reports no CUDA device".into());
    }
    nvrtc_version()?;
    Ok(())
}

/// The newest CUDA version the driver supports, e.g. 13000 for 13.0 (`cuDriverGetVersion`).
pub(crate) fn driver_version() -> Result<i32, String> {
    static VERSION: OnceLock<Result<i32, String>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            // SAFETY: only tries to dlopen the candidate library names; calls nothing in them.
            if !unsafe { dsys::is_culib_present() } {
                return Err("no libcuda: the CUDA driver library (libcuda.so.1) could not be loaded; \
                            is an NVIDIA driver installed and on the library path?"
                    .into());
            }
            quiet_catch("no libcuda", || {
                let mut v = 0i32;
                // SAFETY: `v` is a valid out-pointer for the duration of the call.
                unsafe { dsys::cuDriverGetVersion(&mut v) }
                    .result()
                    .map(|()| v)
                    .map_err(|e| format!("cuDriverGetVersion failed: {e}"))
            })?
        })
        .clone()
}

/// NVRTC's (major, minor) version.
pub(crate) fn nvrtc_version() -> Result<(i32, i32), String> {
    static VERSION: OnceLock<Result<(i32, i32), String>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            // SAFETY: only tries to dlopen the candidate library names; calls nothing in them.
            if !unsafe { nsys::is_culib_present() } {
                return Err("no libnvrtc: the NVRTC library (libnvrtc.so) could not be loaded; \
                            install the CUDA runtime compiler (cuda-nvrtc) and put it on the library path"
                    .into());
            }
            quiet_catch("no libnvrtc", || {
                let (mut major, mut minor) = (0i32, 0i32);
                // SAFETY: both out-pointers are valid for the duration of the call.
                unsafe { nsys::nvrtcVersion(&mut major, &mut minor) }
                    .result()
                    .map(|()| (major, minor))
                    .map_err(|e| format!("nvrtcVersion failed: {e:?}"))
            })?
        })
        .clone()
}

/// `13000` → `"13.0"`, `12080` → `"12.8"`.
pub(crate) fn version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Runs `f`, turning a panic into `Err("{what}: {message}")`. The panic message is not printed
/// (only panics on the calling thread are silenced, and only while `f` runs); cudarc panics when a
/// shared library or symbol is missing, which is an expected outcome here.
pub(crate) fn quiet_catch<R>(what: &str, f: impl FnOnce() -> R) -> Result<R, String> {
    static HOOK_SWAP: Mutex<()> = Mutex::new(());
    let _serial = HOOK_SWAP.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::thread::current().id();
    let prev = Arc::new(panic::take_hook());
    let forward = Arc::clone(&prev);
    panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() != me {
            forward(info)
        }
    }));
    let outcome = panic::catch_unwind(AssertUnwindSafe(f));
    drop(panic::take_hook()); // drops our hook and with it `forward`
    match Arc::try_unwrap(prev) {
        Ok(hook) => panic::set_hook(hook),
        Err(shared) => panic::set_hook(Box::new(move |info| shared(info))),
    }
    outcome.map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        format!("{what}: {msg}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn availability_reports_a_reason_without_panicking() {
        match availability() {
            Ok(()) => {}
            Err(reason) => assert!(!reason.is_empty()),
        }
        // Cached: same answer the second time.
        assert_eq!(availability(), availability());
    }

    #[test]
    fn quiet_catch_turns_panics_into_errors() {
        let r: Result<(), String> = quiet_catch("probe", || panic!("boom"));
        assert_eq!(r.unwrap_err(), "probe: boom");
        assert_eq!(quiet_catch("probe", || 3), Ok(3));
    }

    #[test]
    fn versions_format() {
        assert_eq!(version_string(13000), "13.0");
        assert_eq!(version_string(12080), "12.8");
    }
}
