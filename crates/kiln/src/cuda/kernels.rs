//! NVRTC kernel compilation, the per-device module cache, the on-disk CUBIN cache, and launch
//! helpers.
//!
//! A [`KernelSource`] is compiled once per device, whole (prelude + source), for the device's own
//! architecture (`sm_90a` on an H200) to CUBIN, and loaded as one module. Kernels are looked up by
//! name, so declare them `extern "C" __global__`. The compiled image is kept on disk under
//! `$KILN_CACHE_DIR/kernels` (default `<user cache dir>/kiln/kernels`; `KILN_NO_KERNEL_CACHE=1`
//! disables it), keyed by the SHA-256 of source, target, NVRTC and driver versions and options.
//! Compiles use no fast-math flags: IEEE division and square root, no flush-to-zero (NVRTC's
//! default FMA contraction stays on). For trying a kernel variant without rebuilding kiln,
//! `KILN_KERNEL_DIR=<dir>` compiles `<dir>/<name>.cu` in place of the built-in source of that
//! name wherever the file exists (the launchers are unchanged, so a variant keeps their
//! contract: names, arguments, grid and shared memory).

use std::collections::hash_map::{Entry, HashMap};
use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use cudarc::driver::{CudaFunction, CudaModule, DeviceRepr, LaunchConfig};
use cudarc::nvrtc::{result as nresult, sys as nsys, Ptx};
use sha2::{Digest, Sha256};

use super::availability::{self, quiet_catch};
use super::device::CudaDevice;
use crate::error::{Error, Result};
use crate::settings;

/// A CUDA C++ source compiled as one module. `name` names it in logs, errors and statistics;
/// `src` is compiled after [`PRELUDE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSource {
    /// Module name, also the file name (`<name>.cu`) that `KILN_KERNEL_DIR` may override.
    pub name: &'static str,
    /// CUDA C++ source text.
    pub src: &'static str,
}

/// Largest rank a kernel's [`Strided`] argument holds.
pub const MAX_RANK: usize = 8;

/// Common header put in front of every kernel source (`kernels/common.cuh`): element
/// types, conversions, strided indexing, block reductions. It includes no CUDA headers
/// (f16 / bf16 are converted with PTX), so NVRTC needs no include path.
pub const PRELUDE: &str = include_str!("kernels/common.cuh");

/// Kernel argument mirroring `struct Strided` of `common.cuh` (passed by value): element
/// `i` (row-major) of a view sits at `offset + Σ coord[d]·strides[d]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strided {
    /// Number of dims in use (at most [`MAX_RANK`]).
    pub rank: i32,
    /// Element offset of the view's first element.
    pub offset: i64,
    /// Size of each dim; entries past `rank` are 1.
    pub shape: [i64; MAX_RANK],
    /// Stride of each dim in elements; entries past `rank` are 0.
    pub strides: [i64; MAX_RANK],
}

const _: () = assert!(std::mem::size_of::<Strided>() == 144);
const _: () = assert!(std::mem::align_of::<Strided>() == 8);

// SAFETY: `#[repr(C)]` plain-old-data whose layout (i32 rank, 4 bytes of padding, i64
// offset, two i64[8] arrays; size 144, align 8, checked above) matches `struct Strided`
// of common.cuh under the CUDA ABI.
unsafe impl DeviceRepr for Strided {}

impl Strided {
    /// A view's layout with unit dims dropped and contiguous runs merged (fewer divisions
    /// per element). Kernels that address one particular dim use [`Strided::exact`].
    pub fn of(l: &crate::layout::Layout) -> Result<Strided> {
        Self::exact(&l.coalesced())
    }

    /// The layout dim for dim.
    pub fn exact(l: &crate::layout::Layout) -> Result<Strided> {
        if l.rank() > MAX_RANK {
            return Err(Error::bad_shape(
                "cuda",
                format!("a view of rank {} (at most {MAX_RANK})", l.rank()),
            ));
        }
        let mut s = Strided {
            rank: l.rank() as i32,
            offset: l.offset as i64,
            shape: [1; MAX_RANK],
            strides: [0; MAX_RANK],
        };
        for d in 0..l.rank() {
            s.shape[d] = l.shape[d] as i64;
            s.strides[d] = l.strides[d] as i64;
        }
        Ok(s)
    }
}

/// A 1-D launch covering `n_elems` with `threads` per block (clamped to 1..=1024); at least one
/// block, at most 2^31 - 1 (kernels over more elements than that covers need a grid-stride loop).
pub fn launch_cfg(n_elems: usize, threads: u32) -> LaunchConfig {
    let threads = threads.clamp(1, 1024);
    let blocks = n_elems.div_ceil(threads as usize).clamp(1, i32::MAX as usize) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}

// ---- statistics -------------------------------------------------------------------------------

/// How a kernel module was obtained ([`KernelLoad::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelLoadKind {
    /// Compiled with NVRTC (cold).
    Compiled,
    /// Loaded from the on-disk cache (warm).
    DiskCache,
}

/// One module load.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelLoad {
    /// The [`KernelSource::name`] of the module.
    pub name: String,
    /// Ordinal of the device it was loaded on.
    pub ordinal: usize,
    /// NVRTC target it was built for: `sm_XY(a)` (cubin) or `compute_XY` (PTX for the driver to
    /// JIT).
    pub target: String,
    /// Compiled now or read from the disk cache.
    pub kind: KernelLoadKind,
    /// Compile (or disk read) plus module load, in milliseconds.
    pub ms: f64,
    /// The file compiled in place of the built-in source (`KILN_KERNEL_DIR`), if any.
    pub overridden_by: Option<KernelOverride>,
}

/// A kernel source file that `KILN_KERNEL_DIR` put in place of a built-in source: results
/// measured with it are not the commit's (benchmarks record these in their provenance).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelOverride {
    /// The [`KernelSource::name`] it replaced.
    pub name: String,
    /// The file that was compiled.
    pub path: PathBuf,
    /// SHA-256 of the file's text, hex.
    pub sha256: String,
}

/// Module loads of this process so far, with totals per kind ([`kernel_cache_stats`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelCacheStats {
    /// Every load, in order.
    pub loads: Vec<KernelLoad>,
    /// Loads compiled with NVRTC.
    pub compiled: usize,
    /// Loads served from the on-disk cache.
    pub disk_hits: usize,
    /// Milliseconds spent in NVRTC loads.
    pub compiled_ms: f64,
    /// Milliseconds spent in disk-cache loads.
    pub disk_ms: f64,
}

static LOADS: Mutex<Vec<KernelLoad>> = Mutex::new(Vec::new());

/// Every module load of this process so far, cold (compiled) and warm (disk cache).
pub fn kernel_cache_stats() -> KernelCacheStats {
    let loads = LOADS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut s = KernelCacheStats::default();
    for l in &loads {
        match l.kind {
            KernelLoadKind::Compiled => {
                s.compiled += 1;
                s.compiled_ms += l.ms;
            }
            KernelLoadKind::DiskCache => {
                s.disk_hits += 1;
                s.disk_ms += l.ms;
            }
        }
    }
    s.loads = loads;
    s
}

/// The kernel sources this process compiled from `KILN_KERNEL_DIR` instead of its own, once
/// each, in load order.
pub fn kernel_overrides() -> Vec<KernelOverride> {
    let mut seen = Vec::new();
    for o in LOADS.lock().unwrap_or_else(|e| e.into_inner()).iter().filter_map(|l| l.overridden_by.clone()) {
        if !seen.contains(&o) {
            seen.push(o);
        }
    }
    seen
}

// ---- per-device module cache ------------------------------------------------------------------

struct LoadedModule {
    module: Arc<CudaModule>,
    functions: HashMap<String, CudaFunction>,
}

/// Modules of one device, keyed by the address and length of the (static) source.
#[derive(Default)]
pub(crate) struct KernelCache {
    modules: Mutex<HashMap<(usize, usize), LoadedModule>>,
}

impl CudaDevice {
    /// Kernel `kernel_name` of `source`, compiling and loading `source` on first use.
    pub fn function(&self, source: &KernelSource, kernel_name: &str) -> Result<CudaFunction> {
        let key = (source.src.as_ptr() as usize, source.src.len());
        let mut modules = self.kernels.modules.lock().unwrap_or_else(|e| e.into_inner());
        let loaded = match modules.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                e.insert(LoadedModule { module: self.load_source(source)?, functions: HashMap::new() })
            }
        };
        if let Some(f) = loaded.functions.get(kernel_name) {
            return Ok(f.clone());
        }
        let f = loaded.module.load_function(kernel_name).map_err(|e| {
            Error::Cuda(format!("kernel {kernel_name:?} not found in module {}: {e}", source.name))
        })?;
        loaded.functions.insert(kernel_name.to_string(), f.clone());
        Ok(f)
    }

    fn load_source(&self, source: &KernelSource) -> Result<Arc<CudaModule>> {
        let (major, minor) = (self.props().cc_major, self.props().cc_minor);
        let (target, want_cubin) = compile_target(major, minor)?;
        let options = compile_options(&target);
        let file = override_file(source.name)?;
        let full = full_source(source.name, file.as_ref().map_or(source.src, |f| f.text.as_str()));
        let overridden_by = file.map(|f| f.record);
        let (nv_major, nv_minor) = self.nvrtc_version();
        let key = cache_key(&full, &target, (nv_major, nv_minor), self.driver_version(), &options);
        let dir = cache_dir()?;
        let record = |kind, start: Instant| {
            let load = KernelLoad {
                name: source.name.to_string(),
                ordinal: self.ordinal(),
                target: target.clone(),
                kind,
                ms: start.elapsed().as_secs_f64() * 1e3,
                overridden_by: overridden_by.clone(),
            };
            LOADS.lock().unwrap_or_else(|e| e.into_inner()).push(load);
        };

        let start = Instant::now();
        if let Some(dir) = &dir {
            if let Some((image, path)) = read_cached(dir, &key) {
                match self.load_image(image) {
                    Ok(module) => {
                        record(KernelLoadKind::DiskCache, start);
                        return Ok(module);
                    }
                    Err(e) => {
                        tracing::warn!(
                            "kernel cache entry {} failed to load ({e}); recompiling",
                            path.display()
                        );
                        let _ = std::fs::remove_file(&path);
                    }
                }
            }
        }

        let start = Instant::now();
        let image = nvrtc_compile(source.name, &full, &options, want_cubin)?;
        let module = self.load_image(image.clone())?;
        record(KernelLoadKind::Compiled, start);
        if let Some(dir) = &dir {
            if let Err(e) = write_cached(dir, &key, &image) {
                tracing::warn!("cannot write the kernel cache in {}: {e}", dir.display());
            }
        }
        Ok(module)
    }

    fn load_image(&self, image: Image) -> Result<Arc<CudaModule>> {
        let ptx = match image {
            Image::Cubin(bytes) => Ptx::from_binary(bytes),
            Image::Ptx(text) => Ptx::from_src(text),
        };
        Ok(self.context().load_module(ptx)?)
    }
}

/// A kernel source read from `KILN_KERNEL_DIR`.
struct KernelFile {
    text: String,
    record: KernelOverride,
}

/// `$KILN_KERNEL_DIR/<name>.cu` where the variable is set and the file exists.
fn override_file(name: &str) -> Result<Option<KernelFile>> {
    kernel_file(settings::KERNEL_DIR.get()?.as_deref(), name)
}

/// `<dir>/<name>.cu`, if `dir` is given (and not empty) and the file exists.
fn kernel_file(dir: Option<&Path>, name: &str) -> Result<Option<KernelFile>> {
    let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) else { return Ok(None) };
    let path = dir.join(format!("{name}.cu"));
    if !path.exists() {
        return Ok(None);
    }
    tracing::warn!("kernel source {name}: compiling {} instead of the built-in one", path.display());
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::Cuda(format!("KILN_KERNEL_DIR: cannot read {}: {e}", path.display())))?;
    let sha256 = hex(&Sha256::digest(text.as_bytes()));
    Ok(Some(KernelFile { text, record: KernelOverride { name: name.to_string(), path, sha256 } }))
}

// ---- compilation ------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum Image {
    Cubin(Vec<u8>),
    Ptx(String),
}

/// `sm_{major}{minor}`, plus `a` (arch-specific features) from compute capability 9.0 on.
pub(crate) fn arch_name(major: i32, minor: i32) -> String {
    let suffix = if major >= 9 { "a" } else { "" };
    format!("sm_{major}{minor}{suffix}")
}

/// Architectures this NVRTC can target, as `major * 10 + minor` (empty if it cannot say).
fn supported_archs() -> &'static [i32] {
    static ARCHS: OnceLock<Vec<i32>> = OnceLock::new();
    ARCHS.get_or_init(|| {
        quiet_catch("nvrtc", || {
            let mut n = 0;
            // SAFETY: `n` is a valid out-pointer.
            if unsafe { nsys::nvrtcGetNumSupportedArchs(&mut n) }.result().is_err() || n <= 0 {
                return Vec::new();
            }
            let mut archs = vec![0i32; n as usize];
            // SAFETY: `archs` has room for the `n` entries NVRTC writes.
            match unsafe { nsys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }.result() {
                Ok(()) => archs,
                Err(_) => Vec::new(),
            }
        })
        .unwrap_or_default()
    })
}

/// What to compile for a device: `(--gpu-architecture value, produce CUBIN)`. A device newer than
/// NVRTC gets PTX for the newest virtual architecture NVRTC knows, for the driver to JIT.
fn compile_target(major: i32, minor: i32) -> Result<(String, bool)> {
    let want = major * 10 + minor;
    let archs = supported_archs();
    if archs.is_empty() || archs.contains(&want) {
        return Ok((arch_name(major, minor), true));
    }
    match archs.iter().copied().filter(|&a| a <= want).max() {
        Some(a) => Ok((format!("compute_{a}"), false)),
        None => Err(Error::Cuda(format!(
            "NVRTC cannot target compute capability {major}.{minor} (knows {archs:?})"
        ))),
    }
}

fn compile_options(target: &str) -> Vec<String> {
    vec!["--std=c++17".to_string(), "-default-device".to_string(), format!("--gpu-architecture={target}")]
}

/// Prelude + the elementwise op codes + source; `#line` makes NVRTC report source lines as
/// `{name}.cu(line)`.
fn full_source(name: &str, src: &str) -> String {
    let codes = crate::ops::kernel_op_codes();
    format!("{PRELUDE}\n{codes}#line 1 \"{name}.cu\"\n{src}")
}

/// Owns an NVRTC program; destroys it on drop.
struct Program(nsys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the handle came from `create_program` and is destroyed exactly once, here.
        let _ = unsafe { nresult::destroy_program(self.0) };
    }
}

fn c_chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn nvrtc_compile(name: &str, src: &str, options: &[String], want_cubin: bool) -> Result<Image> {
    availability::nvrtc_version().map_err(Error::CudaUnavailable)?;
    quiet_catch("nvrtc", || nvrtc_compile_inner(name, src, options, want_cubin)).map_err(Error::Cuda)?
}

fn nvrtc_compile_inner(name: &str, src: &str, options: &[String], want_cubin: bool) -> Result<Image> {
    let compile_err = |log: String| Error::KernelCompile { name: name.to_string(), log };
    let c_src = CString::new(src).map_err(|_| compile_err("the source contains a NUL byte".into()))?;
    let c_name =
        CString::new(format!("{name}.cu")).map_err(|_| compile_err("the name contains a NUL byte".into()))?;
    let prog = Program(
        nresult::create_program(&c_src, Some(&c_name))
            .map_err(|e| Error::Cuda(format!("nvrtcCreateProgram({name}): {e}")))?,
    );
    // SAFETY: `prog` is a live program; `c_src` and `c_name` outlive it.
    let compiled = unsafe { nresult::compile_program(prog.0, options) };
    // SAFETY: `prog` is a live program.
    let log = unsafe { nresult::get_program_log(prog.0) }.map(|l| c_chars_to_string(&l)).unwrap_or_default();
    if let Err(e) = compiled {
        return Err(compile_err(format!("{}\n({e:?}; options {options:?})", log.trim_end())));
    }
    if !log.trim().is_empty() {
        tracing::debug!("nvrtc log for {name}:\n{log}");
    }
    if want_cubin {
        let mut size = 0usize;
        // SAFETY: `prog` is a live, compiled program; `size` is a valid out-pointer.
        if unsafe { nsys::nvrtcGetCUBINSize(prog.0, &mut size) }.result().is_ok() && size > 0 {
            let mut cubin = vec![0u8; size];
            // SAFETY: `cubin` has the `size` bytes NVRTC reported.
            if unsafe { nsys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()) }.result().is_ok() {
                return Ok(Image::Cubin(cubin));
            }
        }
    }
    // SAFETY: `prog` is a live, compiled program.
    let ptx =
        unsafe { nresult::get_ptx(prog.0) }.map_err(|e| Error::Cuda(format!("nvrtcGetPTX({name}): {e}")))?;
    Ok(Image::Ptx(c_chars_to_string(&ptx)))
}

/// Compiles `src` (after [`PRELUDE`]) with NVRTC for `arch` (e.g. `sm_80`, `sm_90a`) without a
/// GPU or driver, for CI checks. Errors carry the NVRTC log.
pub fn compile_to_ptx_check(src: &str, arch: &str) -> Result<()> {
    nvrtc_compile("check", &full_source("check", src), &compile_options(arch), false).map(|_| ())
}

/// [`compile_to_ptx_check`] for a [`KernelSource`], naming it in errors; like a load, it takes
/// `$KILN_KERNEL_DIR/<name>.cu` in place of the built-in source where that exists, and says
/// so by returning the file's record.
pub fn compile_check(source: &KernelSource, arch: &str) -> Result<Option<KernelOverride>> {
    let file = override_file(source.name)?;
    let text = file.as_ref().map_or(source.src, |f| f.text.as_str());
    nvrtc_compile(source.name, &full_source(source.name, text), &compile_options(arch), false)?;
    Ok(file.map(|f| f.record))
}

// ---- disk cache -------------------------------------------------------------------------------

fn cache_dir() -> Result<Option<PathBuf>> {
    if settings::NO_KERNEL_CACHE.get()? {
        return Ok(None);
    }
    Ok(match settings::CACHE_DIR.get()? {
        Some(dir) => Some(dir.join("kernels")),
        None => dirs::cache_dir().map(|d| d.join("kiln").join("kernels")),
    })
}

fn cache_key(full_src: &str, target: &str, nvrtc: (i32, i32), driver: i32, options: &[String]) -> String {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(b"kiln-kernel-cache-v1");
    field(full_src.as_bytes());
    field(target.as_bytes());
    field(format!("nvrtc {}.{}", nvrtc.0, nvrtc.1).as_bytes());
    field(format!("driver {driver}").as_bytes());
    for o in options {
        field(o.as_bytes());
    }
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn read_cached(dir: &Path, key: &str) -> Option<(Image, PathBuf)> {
    let cubin = dir.join(format!("{key}.cubin"));
    if let Ok(bytes) = std::fs::read(&cubin) {
        return Some((Image::Cubin(bytes), cubin));
    }
    let ptx = dir.join(format!("{key}.ptx"));
    std::fs::read_to_string(&ptx).ok().map(|text| (Image::Ptx(text), ptx))
}

/// Writes to a temporary file in `dir`, then renames it into place (atomic; safe with several
/// processes filling the cache at once).
fn write_cached(dir: &Path, key: &str, image: &Image) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let (bytes, ext) = match image {
        Image::Cubin(b) => (b.as_slice(), "cubin"),
        Image::Ptx(t) => (t.as_bytes(), "ptx"),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(".{key}.{}.{nanos}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, dir.join(format!("{key}.{ext}"))).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_dir_overrides_only_the_files_it_holds() {
        let dir = std::env::temp_dir().join(format!("kiln-kernel-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("copy.cu"), "// variant").unwrap();
        let f = kernel_file(Some(&dir), "copy").unwrap().unwrap();
        assert_eq!(f.text, "// variant");
        assert_eq!(f.record.name, "copy");
        assert_eq!(f.record.path, dir.join("copy.cu"));
        // sha256sum of the 10 bytes "// variant"
        assert_eq!(f.record.sha256, "8b2de86e6cf796fb56eda3ae4e54cd053618f17363499308c6213ecc11b1c0e4");
        assert!(kernel_file(Some(&dir), "gemv").unwrap().is_none());
        assert!(kernel_file(Some(Path::new("")), "copy").unwrap().is_none());
        assert!(kernel_file(None, "copy").unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn arch_names() {
        assert_eq!(arch_name(9, 0), "sm_90a");
        assert_eq!(arch_name(8, 0), "sm_80");
        assert_eq!(arch_name(8, 9), "sm_89");
        assert_eq!(arch_name(12, 0), "sm_120a");
    }

    #[test]
    fn cache_key_depends_on_every_input() {
        let opts = vec!["--std=c++17".to_string()];
        let base = cache_key("src", "sm_90a", (13, 0), 13000, &opts);
        assert_eq!(base.len(), 64);
        assert!(base.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(base, cache_key("src", "sm_90a", (13, 0), 13000, &opts));
        assert_ne!(base, cache_key("src2", "sm_90a", (13, 0), 13000, &opts));
        assert_ne!(base, cache_key("src", "sm_80", (13, 0), 13000, &opts));
        assert_ne!(base, cache_key("src", "sm_90a", (12, 8), 13000, &opts));
        assert_ne!(base, cache_key("src", "sm_90a", (13, 0), 12080, &opts));
        assert_ne!(base, cache_key("src", "sm_90a", (13, 0), 13000, &[]));
        // Field boundaries are unambiguous.
        assert_ne!(cache_key("ab", "c", (1, 0), 1, &[]), cache_key("a", "bc", (1, 0), 1, &[]));
    }

    #[test]
    fn disk_cache_round_trip() {
        let dir = std::env::temp_dir().join(format!("kiln-kcache-test-{}", std::process::id()));
        let key = "00ff";
        write_cached(&dir, key, &Image::Ptx("ptx text".into())).unwrap();
        let (img, path) = read_cached(&dir, key).unwrap();
        assert_eq!(img, Image::Ptx("ptx text".into()));
        assert!(path.ends_with("00ff.ptx"));
        write_cached(&dir, key, &Image::Cubin(vec![1, 2, 3])).unwrap();
        assert_eq!(read_cached(&dir, key).unwrap().0, Image::Cubin(vec![1, 2, 3]));
        let leftovers = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".tmp"));
        assert_eq!(leftovers.count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn strided_arg_keeps_dims_or_merges_them() {
        let l = crate::layout::Layout::contiguous(&[2, 3]);
        let a = Strided::exact(&l).unwrap();
        assert_eq!((a.rank, &a.shape[..3], &a.strides[..3]), (2, &[2, 3, 1][..], &[3, 1, 0][..]));
        assert_eq!(Strided::of(&l).unwrap().rank, 1);
        assert!(Strided::exact(&crate::layout::Layout::contiguous(&[1; 9])).is_err());
    }

    #[test]
    fn launch_config() {
        let c = launch_cfg(1000, 256);
        assert_eq!((c.grid_dim, c.block_dim), ((4, 1, 1), (256, 1, 1)));
        assert_eq!(launch_cfg(0, 256).grid_dim.0, 1);
        assert_eq!(launch_cfg(10, 4096).block_dim.0, 1024);
    }

    #[test]
    fn compile_check_without_nvrtc_is_an_error_not_a_panic() {
        if availability::nvrtc_version().is_err() {
            let e = compile_to_ptx_check("extern \"C\" __global__ void k() {}", "sm_80").unwrap_err();
            assert!(matches!(e, Error::CudaUnavailable(_)), "{e}");
        }
    }
}
