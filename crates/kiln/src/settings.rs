//! Every process-wide setting of kiln in one place: each is typed, read from its `KILN_*`
//! environment variable at first use (else its default), settable for the whole process and
//! overridable for a scope (tests and benchmarks compare paths that way). `kiln info` lists
//! them with their current values ([`ALL`]).
//!
//! ```
//! use kiln::settings;
//! let _pdl_off = settings::AFTER_PREVIOUS.scoped(false); // restored when dropped
//! assert!(!settings::AFTER_PREVIOUS.get().unwrap());
//! ```

use crate::cuda::ops::{gemv, BlockSync, Fp8Gemm, Fp8LinearVariant, SoftmaxPath};
use crate::error::{Error, Result};
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::{RwLock, RwLockReadGuard};

/// A setting of type `T`: environment variable, documentation, default and current value.
pub struct Setting<T: 'static> {
    env: &'static str,
    doc: &'static str,
    default: fn() -> T,
    parse: fn(&str) -> std::result::Result<T, String>,
    /// `None` until first read; an invalid environment value is kept as the error every
    /// read reports (so a typo is never silently ignored).
    value: RwLock<Option<std::result::Result<T, String>>>,
}

impl<T: Clone + Debug + Send + Sync + 'static> Setting<T> {
    const fn new(
        env: &'static str,
        doc: &'static str,
        default: fn() -> T,
        parse: fn(&str) -> std::result::Result<T, String>,
    ) -> Self {
        Setting { env, doc, default, parse, value: RwLock::new(None) }
    }

    /// The current value: the last [`set`](Setting::set) / [`scoped`](Setting::scoped) value,
    /// else the environment variable's (an error if it does not parse), else the default.
    pub fn get(&self) -> Result<T> {
        if let Some(v) = self.read().as_ref() {
            return v.clone().map_err(|m| Error::invalid(self.env, m));
        }
        let mut slot = self.value.write().unwrap_or_else(|e| e.into_inner());
        let v = slot.get_or_insert_with(|| match std::env::var(self.env) {
            Ok(s) if !s.trim().is_empty() => (self.parse)(s.trim()),
            _ => Ok((self.default)()),
        });
        v.clone().map_err(|m| Error::invalid(self.env, m))
    }

    /// Sets the value for the rest of the process (the environment variable is not read).
    pub fn set(&self, v: T) {
        *self.value.write().unwrap_or_else(|e| e.into_inner()) = Some(Ok(v));
    }

    /// Sets the value until the returned guard is dropped, which restores the previous one.
    pub fn scoped(&'static self, v: T) -> Scoped<T> {
        let mut slot = self.value.write().unwrap_or_else(|e| e.into_inner());
        let previous = slot.replace(Ok(v));
        Scoped { setting: self, previous }
    }

    fn read(&self) -> RwLockReadGuard<'_, Option<std::result::Result<T, String>>> {
        self.value.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// Guard of [`Setting::scoped`].
pub struct Scoped<T: 'static> {
    setting: &'static Setting<T>,
    previous: Option<std::result::Result<T, String>>,
}

impl<T: 'static> Drop for Scoped<T> {
    fn drop(&mut self) {
        *self.setting.value.write().unwrap_or_else(|e| e.into_inner()) = self.previous.take();
    }
}

/// What `kiln info` shows of a setting, whatever its type.
pub trait Describe: Sync {
    /// Its environment variable.
    fn env(&self) -> &'static str;
    /// What it controls and which values it takes.
    fn doc(&self) -> &'static str;
    /// Its current value, or the error its environment value gives.
    fn current(&self) -> String;
}

impl<T: Clone + Debug + Send + Sync + 'static> Describe for Setting<T> {
    fn env(&self) -> &'static str {
        self.env
    }
    fn doc(&self) -> &'static str {
        self.doc
    }
    fn current(&self) -> String {
        match self.get() {
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("error: {e}"),
        }
    }
}

fn parse_bool(s: &str) -> std::result::Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (1 / 0, true / false, on / off)")),
    }
}

fn parse_auto<T: std::str::FromStr<Err = String>>(s: &str) -> std::result::Result<Option<T>, String> {
    if s.eq_ignore_ascii_case("auto") {
        Ok(None)
    } else {
        s.parse().map(Some)
    }
}

fn some_path(s: &str) -> std::result::Result<Option<PathBuf>, String> {
    Ok(Some(PathBuf::from(s)))
}

fn some_string(s: &str) -> std::result::Result<Option<String>, String> {
    Ok(Some(s.to_string()))
}

// ---- the runtime ------------------------------------------------------------------------------

/// Programmatic dependent launch (sm_90+): kernels that can start while the one before them
/// finishes do so. On by default; benchmarks measure both.
pub static AFTER_PREVIOUS: Setting<bool> = Setting::new(
    "KILN_PDL",
    "programmatic dependent launch on sm_90+ (on / off; default on)",
    || true,
    parse_bool,
);

/// A forced GEMV variant for every decode `linear` (`None`: chosen by shape).
pub static GEMV_VARIANT: Setting<Option<gemv::Variant>> = Setting::new(
    "KILN_GEMV_VARIANT",
    "GEMV variant of every decode linear, e.g. b16_r2_u4_g1_w4 (default auto: by shape)",
    || None,
    parse_auto,
);

/// A forced variant of the FP8 weight-only linear kernel (`None`: chosen by shape).
pub static FP8_LINEAR_VARIANT: Setting<Option<Fp8LinearVariant>> = Setting::new(
    "KILN_FP8_LINEAR_VARIANT",
    "FP8-weight linear kernel variant, e.g. r1_g4_w8 (default auto: by shape)",
    || None,
    parse_auto,
);

/// `scaled_dot_product_attention` takes the decode path where it fits: the split-KV kernel
/// on CUDA, the one-pass kernel on the CPU (`0` sends every call to the composed path, for
/// comparison).
pub static DECODE_ATTENTION: Setting<bool> = Setting::new(
    "KILN_DECODE_ATTENTION",
    "decode attention for 1-8 queries: split-KV kernel on CUDA, one pass on the CPU (0: composed)",
    || true,
    parse_bool,
);

/// `scaled_dot_product_attention` on CUDA takes the prefill kernel (flash attention,
/// `cuda/ops/attention_prefill.rs`) where it fits and the decode kernel does not; 0 sends
/// those calls to the composed path, for comparison.
pub static PREFILL_ATTENTION: Setting<bool> = Setting::new(
    "KILN_PREFILL_ATTENTION",
    "prefill attention on CUDA: flash-attention kernel, scores never materialised (0: composed)",
    || true,
    parse_bool,
);

/// `kiln generate` on CUDA replays its greedy decode steps as one captured CUDA graph
/// (kiln-models `graph_decode`); on by default since `gpu_models`' `*_graph` cases gave the
/// eager tokens on every fixture family on an H100. `--eager` (or `KILN_GRAPH_DECODE=0`)
/// keeps the step-by-step path.
pub static GRAPH_DECODE: Setting<bool> = Setting::new(
    "KILN_GRAPH_DECODE",
    "greedy decode steps on CUDA replayed as one CUDA graph (0: eager, as --eager)",
    || true,
    parse_bool,
);

/// Which GEMM serves FP8 `scaled_mm` for M > 16.
pub static FP8_GEMM: Setting<Fp8Gemm> = Setting::new(
    "KILN_FP8_GEMM",
    "GEMM of scaled_mm for M > 16: auto (kiln's for large row-wise products), own, cublaslt",
    || Fp8Gemm::Auto,
    |s| match s.to_ascii_lowercase().as_str() {
        "auto" => Ok(Fp8Gemm::Auto),
        "own" => Ok(Fp8Gemm::Own),
        "cublaslt" => Ok(Fp8Gemm::CublasLt),
        _ => Err(format!("{s:?} is not auto, own or cublaslt")),
    },
);

/// Row-wise FP8 products with M > 16 scale in kiln's epilogue even where cuBLASLt could.
pub static FP8_FORCE_EPILOGUE: Setting<bool> = Setting::new(
    "KILN_FP8_FORCE_EPILOGUE",
    "row-wise scaled_mm always through kiln's scaling epilogue (default off)",
    || false,
    parse_bool,
);

/// A forced softmax kernel (`None`: chosen by shape).
pub static SOFTMAX_PATH: Setting<Option<SoftmaxPath>> = Setting::new(
    "KILN_SOFTMAX_PATH",
    "softmax kernel: auto, rows, warp, split, cluster, poll (default auto: by shape)",
    || None,
    parse_auto,
);

/// How the blocks of a one-row-over-many-blocks reduction meet.
pub static BLOCK_SYNC: Setting<BlockSync> = Setting::new(
    "KILN_BLOCK_SYNC",
    "how blocks of one reduction meet: one (one launch) or multi (a second launch)",
    || BlockSync::OneLaunch,
    |s| match s.to_ascii_lowercase().as_str() {
        "one" => Ok(BlockSync::OneLaunch),
        "multi" => Ok(BlockSync::MultiLaunch),
        _ => Err(format!("{s:?} is not one or multi")),
    },
);

/// A folder whose `<name>.cu` files replace the built-in kernel sources of those names.
pub static KERNEL_DIR: Setting<Option<PathBuf>> = Setting::new(
    "KILN_KERNEL_DIR",
    "folder of kernel sources (<name>.cu) compiled instead of the built-in ones",
    || None,
    some_path,
);

/// Where compiled kernels are cached (`kernels/` under it).
pub static CACHE_DIR: Setting<Option<PathBuf>> = Setting::new(
    "KILN_CACHE_DIR",
    "cache folder of compiled kernels (default: the user's cache folder, kiln/)",
    || None,
    some_path,
);

/// Turns the compiled-kernel disk cache off.
pub static NO_KERNEL_CACHE: Setting<bool> = Setting::new(
    "KILN_NO_KERNEL_CACHE",
    "compile every kernel afresh, never reading or writing the disk cache (default off)",
    || false,
    parse_bool,
);

// ---- tests and the bench ----------------------------------------------------------------------

/// The fixtures folder of the tests, `kiln check` and the bench (`None`: the repository's).
pub static FIXTURES: Setting<Option<PathBuf>> = Setting::new(
    "KILN_FIXTURES",
    "fixtures folder of the tests, kiln check and the bench (default: the repository's fixtures/)",
    || None,
    some_path,
);

/// Where tests keep the real model files they fetch (`None`: the temp dir's `kiln-cache`).
pub static MODEL_CACHE: Setting<Option<PathBuf>> = Setting::new(
    "KILN_CACHE",
    "where tests keep the real models they fetch (default: the system temp dir's kiln-cache)",
    || None,
    some_path,
);

/// The SmolLM2-135M GGUF file the real-model tests run (`None`: fetched into the cache).
pub static SMOLLM2_GGUF: Setting<Option<PathBuf>> = Setting::new(
    "KILN_SMOLLM2_GGUF",
    "SmolLM2-135M-Instruct Q4_1 GGUF for the real-model tests (default: fetched into KILN_CACHE)",
    || None,
    some_path,
);

/// Where the bench finds its PyTorch peer scripts (`None`: the repository's `bench/`).
pub static BENCH_DIR: Setting<Option<PathBuf>> = Setting::new(
    "KILN_BENCH_DIR",
    "folder of the bench's PyTorch peer scripts (default: the repository's bench/)",
    || None,
    some_path,
);

/// The commit a bench result is recorded under (`None`: asked of git).
pub static COMMIT: Setting<Option<String>> = Setting::new(
    "KILN_COMMIT",
    "commit recorded in bench results (default: git's HEAD, -dirty when changed)",
    || None,
    some_string,
);

/// Rows of `x` in the linear suite's products.
pub static LINEAR_ROWS: Setting<usize> = Setting::new(
    "KILN_LINEAR_ROWS",
    "linear suite: rows of x in every product (default 1, the decode case)",
    || 1,
    |s| s.parse().map_err(|_| format!("{s:?} is not a count")),
);

/// Only the linear-suite shapes whose label contains this text.
pub static LINEAR_FILTER: Setting<String> = Setting::new(
    "KILN_LINEAR_FILTER",
    "linear suite: only shapes whose label contains this text (default: all)",
    String::new,
    |s| Ok(s.to_string()),
);

/// The linear suite times every GEMV variant per shape.
pub static GEMV_SWEEP: Setting<bool> = Setting::new(
    "KILN_GEMV_SWEEP",
    "linear suite: time every GEMV variant of every shape (default off)",
    || false,
    parse_bool,
);

/// Every setting, for `kiln info`.
pub static ALL: [&dyn Describe; 21] = [
    &AFTER_PREVIOUS,
    &GEMV_VARIANT,
    &FP8_LINEAR_VARIANT,
    &FP8_GEMM,
    &FP8_FORCE_EPILOGUE,
    &DECODE_ATTENTION,
    &PREFILL_ATTENTION,
    &GRAPH_DECODE,
    &SOFTMAX_PATH,
    &BLOCK_SYNC,
    &KERNEL_DIR,
    &CACHE_DIR,
    &NO_KERNEL_CACHE,
    &FIXTURES,
    &MODEL_CACHE,
    &SMOLLM2_GGUF,
    &BENCH_DIR,
    &COMMIT,
    &LINEAR_ROWS,
    &LINEAR_FILTER,
    &GEMV_SWEEP,
];

#[cfg(test)]
mod tests {
    use super::*;

    static FLAG: Setting<bool> = Setting::new("KILN_TEST_FLAG_UNSET", "test", || true, parse_bool);
    static BAD: Setting<bool> = Setting::new("KILN_TEST_BAD_BOOL", "test", || true, parse_bool);

    #[test]
    fn default_scoped_and_set() {
        assert!(FLAG.get().unwrap());
        {
            let _off = FLAG.scoped(false);
            assert!(!FLAG.get().unwrap());
            {
                let _on = FLAG.scoped(true);
                assert!(FLAG.get().unwrap());
            }
            assert!(!FLAG.get().unwrap());
        }
        assert!(FLAG.get().unwrap());
        FLAG.set(false);
        assert!(!FLAG.get().unwrap());
    }

    #[test]
    fn a_bad_environment_value_is_an_error_naming_the_variable() {
        std::env::set_var("KILN_TEST_BAD_BOOL", "maybe");
        let e = BAD.get().unwrap_err().to_string();
        assert!(e.contains("KILN_TEST_BAD_BOOL") && e.contains("maybe"), "{e}");
        let _fixed = BAD.scoped(false);
        assert!(!BAD.get().unwrap());
    }

    #[test]
    fn every_setting_is_listed_once_with_its_variable() {
        let mut envs: Vec<_> = ALL.iter().map(|s| s.env()).collect();
        envs.sort();
        envs.dedup();
        assert_eq!(envs.len(), ALL.len());
        assert!(envs.iter().all(|e| e.starts_with("KILN_")));
        assert!(ALL.iter().all(|s| !s.doc().is_empty() && !s.current().is_empty()));
    }

    #[test]
    fn parsers() {
        assert_eq!(parse_bool("ON"), Ok(true));
        assert_eq!(parse_bool("0"), Ok(false));
        assert!(parse_bool("2").is_err());
        assert_eq!(parse_auto::<gemv::Variant>("auto"), Ok(None));
        assert!(parse_auto::<gemv::Variant>("nonsense").is_err());
    }
}
