//! The backend seam: what a backend computes, one method per op with one signature for
//! every backend (candle's `BackendStorage`, MLX's `eval_cpu` / `eval_gpu`).
//!
//! `ops/` checks an op's rules once, then [`on_backend!`] picks the backend that holds
//! the operands and runs one body, written once, against its [`Backend`] impl
//! (`cpu::Cpu` in `cpu/backend.rs`, `cuda::Cuda` in `cuda/backend.rs`). A backend that
//! lacks a method does not compile; there is no `unreachable!` arm per op. Buffers of the
//! other operands come from [`buf`], an error (not a panic) if an operand
//! sits on another backend.
//!
//! Ops that have a dedicated kernel on one backend only (the fused decode kernels, small
//! linear algebra) are not in the trait: `ops/` takes them through a [`Route`], the typed
//! choice between that kernel and the composed ops, logged where it is taken.

use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::{BinaryOp, Gather, RandKind, Recipe, ReduceOp, Reduction, Scatter, UnaryOp};
use crate::storage::Storage;
use crate::{DType, Device};

/// A buffer and the element its contiguous view starts at.
pub(crate) type At<'a, B> = (&'a <B as Backend>::Buf, usize);

/// One `scaled_mm` call as `ops/scaled_mm.rs` validated it: `a` `[M, K]` row-major, `b`
/// `[K, N]` column-major (both float8), dense f32 scales, dense bias of `out` or none.
pub(crate) struct ScaledMm<'a, B: Backend + ?Sized> {
    /// `[M, K]`: buffer, view, dtype.
    pub a: (&'a B::Buf, &'a Layout, DType),
    /// `[K, N]`.
    pub b: (&'a B::Buf, &'a Layout, DType),
    /// `b`'s storage is frozen (`Tensor::freeze`): the CUDA decode kernel may start reading
    /// it before the kernel ahead of it on the stream has finished.
    pub b_frozen: bool,
    /// f32 scales, dense, shaped as `recipe` says.
    pub scale_a: &'a B::Buf,
    /// f32 scales of `b`.
    pub scale_b: &'a B::Buf,
    /// Which scale shapes these are.
    pub recipe: Recipe,
    /// `[N]` in `out`, dense.
    pub bias: Option<&'a B::Buf>,
    /// The result's dtype.
    pub out: DType,
}

/// Where the first token of a rotary call sits.
pub(crate) enum RotaryStart<'a, B: Backend + ?Sized> {
    /// A position known on the host (checked against the tables).
    At(usize),
    /// The int64 at this buffer's element `offset`, read where it lives.
    Device(&'a B::Buf, usize),
}

/// The per-head RMS norms before the turn: rows of heads (dim -3) below `split` take the
/// contiguous `[D]` weight `weights[0]`, the rest `weights[1]`.
pub(crate) struct RotaryNorm<'a, B: Backend + ?Sized> {
    /// Dense `[D]` weights in the input's dtype.
    pub weights: [&'a B::Buf; 2],
    /// The first head of `weights[1]`.
    pub split: usize,
    /// The norms' epsilon.
    pub eps: f64,
}

/// KV caches `[B, kv_heads, capacity, D]` (contiguous) that take the key and value heads of
/// a rotary input `[B, q_heads + 2·kv_heads, T, D]` at positions start + t; the queries
/// alone go to the output. The kernel writes them in place.
pub(crate) struct RotaryCache<'a, B: Backend + ?Sized> {
    /// The key cache.
    pub keys: &'a B::Buf,
    /// The value cache.
    pub values: &'a B::Buf,
    /// Query heads of the input (its first ones).
    pub q_heads: usize,
    /// Key (and value) heads.
    pub kv_heads: usize,
    /// Positions each cache holds.
    pub capacity: usize,
}

/// Every op a backend computes. Inputs arrive checked (shapes, dtypes, devices, index
/// ranges where the host can see them); a method only computes, into fresh buffers unless
/// it says it writes in place.
pub(crate) trait Backend {
    /// The bytes of a tensor on this backend.
    type Buf;

    /// This backend's buffer in `s`, if `s` is on this backend.
    fn of(s: &Storage) -> Option<&Self::Buf>;
    /// A storage holding `b`.
    fn wrap(b: Self::Buf) -> Storage;

    // Creation and copies.
    /// `n` elements of `value` in `dt`.
    fn fill(device: Device, n: usize, dt: DType, value: f64) -> Result<Self::Buf>;
    /// `n` counter-based random values from `seed`, the same on every backend.
    fn rand(device: Device, n: usize, dt: DType, seed: u64, kind: RandKind) -> Result<Self::Buf>;
    /// `start + i·step` for `i < n`.
    fn arange(device: Device, n: usize, dt: DType, start: f64, step: f64) -> Result<Self::Buf>;
    /// A buffer holding `bytes`.
    fn upload(device: Device, bytes: &[u8]) -> Result<Self::Buf>;
    /// `len` bytes from byte `start`, on the host.
    fn read_bytes(x: &Self::Buf, start: usize, len: usize) -> Result<Vec<u8>>;
    /// The view `l` of `x`, contiguous, converted from `from` to `to`.
    fn cast(x: &Self::Buf, l: &Layout, from: DType, to: DType) -> Result<Self::Buf>;
    /// Writes the view `sl` of `src` into the view `dl` of `dst`.
    fn copy_into(dst: &mut Self::Buf, dl: &Layout, src: &Self::Buf, sl: &Layout, dt: DType) -> Result<()>;

    // Elementwise (equal shapes: broadcasting happened in the layouts).
    /// `op(x, y)` computed in `dt`, stored as `out`.
    #[allow(clippy::too_many_arguments)]
    fn binary(
        op: BinaryOp,
        x: &Self::Buf,
        xl: &Layout,
        y: &Self::Buf,
        yl: &Layout,
        dt: DType,
        out: DType,
    ) -> Result<Self::Buf>;
    /// `op(x)` in `dt`.
    fn unary(op: UnaryOp, x: &Self::Buf, l: &Layout, dt: DType) -> Result<Self::Buf>;
    /// `c ? x : y`.
    #[allow(clippy::too_many_arguments)]
    fn where_(
        c: &Self::Buf,
        cl: &Layout,
        x: &Self::Buf,
        xl: &Layout,
        y: &Self::Buf,
        yl: &Layout,
        dt: DType,
    ) -> Result<Self::Buf>;
    /// Mantissa (in `dt`) and exponent (int32).
    fn frexp(x: &Self::Buf, l: &Layout, dt: DType) -> Result<(Self::Buf, Self::Buf)>;

    // Indexing: `idx` is an integer tensor of dtype `idt`. The CPU range-checks it; CUDA
    // reads it on the device without a sync (see `ops/index.rs`).
    /// Elements of `x` where `idx` says (`index_select`, `gather`, `take`).
    #[allow(clippy::too_many_arguments)]
    fn gather(
        op: &'static str,
        how: Gather,
        x: &Self::Buf,
        xl: &Layout,
        idx: &Self::Buf,
        il: &Layout,
        idt: DType,
        dt: DType,
    ) -> Result<Self::Buf>;
    /// In place: `src` written (or added) into `x` where `idx` says.
    #[allow(clippy::too_many_arguments)]
    fn scatter(
        op: &'static str,
        x: &mut Self::Buf,
        xl: &Layout,
        how: Scatter,
        idx: &Self::Buf,
        il: &Layout,
        idt: DType,
        src: &Self::Buf,
        sl: &Layout,
        dt: DType,
    ) -> Result<()>;

    // Rows: `x` dense, `outer` rows of `r`.
    /// One `op` value per row, as `out`.
    fn reduce(
        op: ReduceOp,
        x: &Self::Buf,
        dt: DType,
        outer: usize,
        r: usize,
        out: DType,
    ) -> Result<Self::Buf>;
    /// (variance with `correction`, mean) per row.
    fn var_mean(
        x: &Self::Buf,
        dt: DType,
        outer: usize,
        r: usize,
        correction: f64,
    ) -> Result<(Self::Buf, Self::Buf)>;
    /// softmax (or log_softmax) of each row.
    fn softmax(x: &Self::Buf, dt: DType, outer: usize, r: usize, log: bool) -> Result<Self::Buf>;
    /// RMSNorm of each row, times `w` (`[r]`) if given.
    fn rms_norm(
        x: &Self::Buf,
        w: Option<&Self::Buf>,
        dt: DType,
        outer: usize,
        r: usize,
        eps: f64,
    ) -> Result<Self::Buf>;
    /// The `k` largest (or smallest) of each row, sorted, and their int64 indices.
    fn topk(
        x: &Self::Buf,
        dt: DType,
        outer: usize,
        r: usize,
        k: usize,
        largest: bool,
    ) -> Result<(Self::Buf, Self::Buf)>;
    /// MoE routing of each row: f32 weights and int64 experts of the top `k` of
    /// softmax (or sigmoid) scores, `bias` (f32 `[r]`) added for the choice only,
    /// renormalised with `norm_eps`.
    #[allow(clippy::too_many_arguments)]
    fn router_topk(
        x: &Self::Buf,
        dt: DType,
        bias: Option<&Self::Buf>,
        outer: usize,
        r: usize,
        k: usize,
        sigmoid: bool,
        norm_eps: Option<f64>,
    ) -> Result<(Self::Buf, Self::Buf)>;
    /// Mean squared error of `n` dense elements, reduced as `red`.
    fn mse(x: &Self::Buf, y: &Self::Buf, dt: DType, n: usize, red: Reduction) -> Result<Self::Buf>;
    /// int64 values counted into `nbins` bins (weighted by f32 / f64 `w`); values outside
    /// `0..nbins` are not counted.
    fn bincount(x: &Self::Buf, w: Option<(&Self::Buf, DType)>, n: usize, nbins: usize) -> Result<Self::Buf>;

    /// MoE slots grouped by expert (`Tensor::expert_groups`): for dense int64 experts of
    /// `n` slots, `k` per token, the token of each sorted row (int64 `[n]`), each slot's
    /// sorted row (int64 `[n]`) and each expert's end row (int32 `[num_experts]`).
    fn expert_groups(
        op: &'static str,
        idx: &Self::Buf,
        n: usize,
        k: usize,
        num_experts: usize,
    ) -> Result<(Self::Buf, Self::Buf, Self::Buf)>;

    // Products and sequence mixers.
    /// Batched `[.., M, K] @ [.., K, N]` of two views with equal batch dims.
    fn matmul(x: &Self::Buf, xl: &Layout, y: &Self::Buf, yl: &Layout, dt: DType) -> Result<Self::Buf>;
    /// `x` (`xl`, `[.., T, D]`; `[.., H, T, D]` with `norm`) turned by the dense tables
    /// `cos` / `sin` `[positions, r]` from `start`, each head row first RMS-normed if
    /// `norm` says so: a fresh contiguous buffer; with `cache`, of the query heads only (the
    /// turned keys and the values go to the cache). A fused norm or cache write, or a head
    /// dim past what the backend's kernel takes, is an error naming `op` (`ops/rotary.rs`
    /// composes those).
    #[allow(clippy::too_many_arguments)]
    fn rotary(
        op: &'static str,
        x: &Self::Buf,
        xl: &Layout,
        norm: Option<RotaryNorm<'_, Self>>,
        cache: Option<RotaryCache<'_, Self>>,
        tables: [&Self::Buf; 2],
        positions: usize,
        r: usize,
        start: RotaryStart<'_, Self>,
        dt: DType,
    ) -> Result<Self::Buf>;
    /// `torch._scaled_mm`: `(a · scale_a) @ (b · scale_b) (+ bias)` as `out` `[M, N]`.
    fn scaled_mm(p: ScaledMm<'_, Self>) -> Result<Self::Buf>;
    /// Causal depthwise convolution over `[b, t, c]` with `k` taps carried in `state`
    /// (`[b, c, k-1]`, updated in place).
    #[allow(clippy::too_many_arguments)]
    fn causal_conv(
        x: At<Self>,
        state: (&mut Self::Buf, usize),
        w: At<Self>,
        bias: Option<At<Self>>,
        dims: [usize; 4],
        silu: bool,
        dt: DType,
    ) -> Result<Self::Buf>;
    /// One decode token of a Gated DeltaNet layer (`ops/gated_delta.rs`): inputs
    /// `[qkv, b, a, z]`, parameters `[neg_a, dt_bias, norm]`, the recurrent state updated
    /// in place; returns `y`.
    fn gated_delta_step(
        ins: [At<Self>; 4],
        state: (&mut Self::Buf, usize),
        params: [At<Self>; 3],
        dims: [usize; 5],
        eps: f64,
        dt: DType,
    ) -> Result<Self::Buf>;
}

/// Runs a body against the backend that holds a storage (`on_backend!(storage, |B, x|
/// body)`, `x` its buffer) or serves a device (`on_backend!(device: d, |B| body)`), with
/// `B` naming that backend's [`Backend`] impl. Adding a backend adds an arm here.
macro_rules! on_backend {
    (device: $device:expr, |$B:ident| $body:expr) => {
        match $device {
            $crate::Device::Cpu => {
                type $B = $crate::cpu::Cpu;
                $body
            }
            $crate::Device::Cuda(_) => {
                type $B = $crate::cuda::Cuda;
                $body
            }
        }
    };
    ($storage:expr, |$B:ident, $x:pat_param| $body:expr) => {
        match $storage {
            $crate::storage::Storage::Cpu($x) => {
                type $B = $crate::cpu::Cpu;
                $body
            }
            $crate::storage::Storage::Cuda($x) => {
                type $B = $crate::cuda::Cuda;
                $body
            }
        }
    };
}
pub(crate) use on_backend;

/// `B`'s buffer in `s`: an error naming `op` if `s` is on another backend (callers check
/// devices first, so this is a guard, not a path).
pub(crate) fn buf<'a, B: Backend>(s: &'a Storage, op: &'static str) -> Result<&'a B::Buf> {
    B::of(s).ok_or_else(|| Error::invalid(op, "operands on different backends"))
}

/// Which implementation an op with a one-backend kernel takes: that kernel, or the
/// composed ops (with the reason, logged by [`Route::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// The dedicated kernel.
    Kernel,
    /// The composed path, and why the kernel declined.
    Composed(&'static str),
}

impl Route {
    /// The kernel unless `declined` gives a reason; a composed route is logged at debug
    /// level with `what` (the op and its shape), so fallbacks show under `RUST_LOG=debug`.
    pub(crate) fn of(what: std::fmt::Arguments<'_>, declined: Option<&'static str>) -> Route {
        match declined {
            None => Route::Kernel,
            Some(why) => {
                tracing::debug!("{what}: composed ({why})");
                Route::Composed(why)
            }
        }
    }
}
