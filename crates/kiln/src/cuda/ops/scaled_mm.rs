//! FP8 launchers (`kernels/scaled_mm.cu` and cuBLASLt). Which path serves which case:
//! - M ≤ 16, or K = 0: `fp8_gemv` (FP8 `mma.sync`, the weight streamed once with 16-byte
//!   loads; decode's case). A frozen weight (`Tensor::freeze`) gets its `_early` form,
//!   launched as a dependent that starts streaming while the kernel ahead finishes, where
//!   a row group has several warps.
//! - M > 16, compute capability 9.0, both operands e4m3, output rows a multiple of 16 bytes,
//!   and `Fp8Gemm::Own` chosen or (the default `Auto`) the row-wise recipe with
//!   M·N·K ≥ 2^38: kiln's own TMA + wgmma GEMM (`kernels/fp8_gemm.cu`; `fp8_gemm.rs` gives
//!   the measurements behind the rule).
//! - Other M > 16: cuBLASLt FP8 GEMM on Hopper tensor cores. Tensor-wise scales go in as
//!   `A/B_SCALE_POINTER`; row-wise as `OUTER_VEC_32F` scale vectors. Where cuBLASLt has no
//!   algorithm for the latter, the named slower path "row-wise epilogue" runs a unit-scale
//!   f32 GEMM and `scaled_mm_epilogue` applies scales, bias and the cast. Where it has no
//!   FP8 algorithm at all, the named slower path "decode kernel in 16-row chunks" runs.
//! - Operands that are not 16-byte aligned (offset views, odd leading dims) are copied to
//!   fresh contiguous buffers first; an output row count N that is not a multiple of 16 is
//!   computed with a padded leading dim and then copied out (cuBLASLt path only).

use super::{copy, dev_of, fp8_gemm, row_threads, rows_grid, SCALED_MM};
use crate::cuda::{dependent_launch, kernel_args, launch, CudaDevice, DeviceBuffer, Launch, PushKernelArg};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::Recipe;
use crate::{settings, DType};
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use cudarc::driver::LaunchConfig;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

/// The operands, checked by `ops/scaled_mm.rs`.
pub(crate) type ScaledMm<'a> = crate::backend::ScaledMm<'a, crate::cuda::Cuda>;

/// Largest M the decode kernel serves.
pub const GEMV_MAX_M: usize = 16;

fn need_fp8(dev: &CudaDevice, op: &'static str) -> Result<()> {
    let p = dev.props();
    if (p.cc_major, p.cc_minor) < (8, 9) {
        return Err(Error::invalid(
            op,
            format!(
                "needs FP8 tensor cores (compute capability 8.9+); {} is {}.{}",
                p.name, p.cc_major, p.cc_minor
            ),
        ));
    }
    Ok(())
}

fn fp8_name(dt: DType) -> &'static str {
    if dt == DType::F8E4M3 {
        "e4m3"
    } else {
        "e5m2"
    }
}

pub(super) fn out_name(dt: DType) -> &'static str {
    match dt {
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        _ => "f32",
    }
}

/// A K-contiguous operand as the kernels read it: rows of `ld` bytes from `ptr`, 16-byte
/// aligned. Keeps the aligned copy alive when one was needed.
pub(super) struct Rows {
    pub(super) ptr: u64,
    pub(super) ld: usize,
    _copy: Option<DeviceBuffer>,
}

/// `rows × k` bytes whose element (r, c) sits at `offset + r·row_stride + c` of `buf`
/// (`view` is that same matrix as a layout, for the copy when it is not aligned).
fn k_rows(buf: &DeviceBuffer, view: &Layout, row_stride: usize) -> Result<Rows> {
    let (rows, k) = (view.shape[0], view.shape[1]);
    let ld = if rows > 1 { row_stride } else { k };
    let ptr = buf.ptr() + view.offset as u64;
    if ptr.is_multiple_of(16) && ld.is_multiple_of(16) {
        return Ok(Rows { ptr, ld, _copy: None });
    }
    let c = copy::cast(buf, view, DType::U8, DType::U8)?;
    Ok(Rows { ptr: c.ptr(), ld: k, _copy: Some(c) })
}

pub(crate) fn scaled_mm(p: ScaledMm<'_>) -> Result<DeviceBuffer> {
    let dev = dev_of(p.a.0)?;
    need_fp8(&dev, "scaled_mm")?;
    let (la, lb) = (p.a.1, p.b.1);
    let (m, k, n) = (la.shape[0], la.shape[1], lb.shape[1]);
    if m * n == 0 {
        return dev.alloc(0);
    }
    let a = k_rows(p.a.0, la, la.strides[0])?;
    // b [K, N] column-major is w [N, K] row-major: row n starts at n·strides[1].
    let w_view = Layout { shape: vec![n, k], strides: vec![lb.strides[1], lb.strides[0]], offset: lb.offset };
    let w = k_rows(p.b.0, &w_view, lb.strides[1])?;
    if m <= GEMV_MAX_M || k == 0 {
        return gemv(&dev, &p, &a, &w, m, n, k);
    }
    if fp8_gemm::serves(&dev, &p, &a, &w, (m, n, k))? {
        return fp8_gemm::fp8_gemm(&dev, &p, &a, &w, (m, n, k));
    }
    lt_scaled_mm(&dev, &p, &a, &w, m, n, k)
}

/// Bytes of a weight row one warp of `fp8_gemv` covers per step: 64·U, U = 8 / nt.
fn gemv_step(nt: usize) -> usize {
    64 * 8 / nt
}

/// Warps per block of `fp8_gemv` (`FP8_GEMV_WARPS`).
const GEMV_WARPS: usize = 4;
/// Blocks of `fp8_gemv` resident per SM, as its launch bound guarantees (`FP8_GEMV_MIN_BLOCKS`).
const GEMV_MIN_BLOCKS: usize = 4;

/// Blocks of `fp8_gemv` for n weight rows with kw warps per row group of 8·nt rows.
fn gemv_blocks(n: usize, nt: usize, kw: usize) -> usize {
    n.div_ceil(8 * nt * (GEMV_WARPS / kw))
}

/// Warps splitting each row group's K in `fp8_gemv` for n rows of k bytes, given the blocks
/// the GPU holds at once (`slots`): the most (a power of two up to 4, each warp with at least
/// one step of the row) that keep the grid to one wave. A second wave runs on a few SMs
/// while the rest idle, which costs more than the longer K loop of fewer warps. H200 lab,
/// 2026-12-03, M = 1, 4 blocks per SM: (N, K) = (4096, 4096) KW 4 (512 blocks) 6.7 µs;
/// (14336, 4096) KW 1 (448 blocks) 17.2 µs against KW 2 (896) 18.2; (4096, 14336) KW 4 17.5.
fn gemv_k_warps(n: usize, k: usize, nt: usize, slots: usize) -> usize {
    let steps = (k / gemv_step(nt)).max(1);
    [4, 2, 1].into_iter().find(|&kw| kw <= steps && gemv_blocks(n, nt, kw) <= slots).unwrap_or(1)
}

fn gemv(
    dev: &CudaDevice,
    p: &ScaledMm<'_>,
    a: &Rows,
    w: &Rows,
    m: usize,
    n: usize,
    k: usize,
) -> Result<DeviceBuffer> {
    if [m, n, k].iter().any(|&v| v > i32::MAX as usize) {
        return Err(Error::bad_shape("scaled_mm", format!("dims {m}×{k}×{n} exceed the kernel's int range")));
    }
    let out = dev.alloc(m * n * p.out.size())?;
    let nt = if m > 8 { 2 } else { 1 };
    let kw = gemv_k_warps(n, k, nt, GEMV_MIN_BLOCKS * dev.props().sm_count.max(1) as usize);
    // A frozen weight (not an aligned copy made just now) is streamed by the `_early` kernel,
    // launched to start while the kernel ahead finishes (kernels/scaled_mm.cu, fp8_gemv).
    // Grids with one warp per row group (KW 1) gained nothing from it in the lab (H200,
    // 2026-12-04: 1x4096x14336 17.2 µs both), so they keep the plain kernel.
    let early = p.b_frozen && w._copy.is_none() && kw > 1 && dependent_launch(dev)?;
    let name = format!(
        "fp8_gemv_{}_{}_{}_{nt}{}",
        fp8_name(p.a.2),
        fp8_name(p.b.2),
        out_name(p.out),
        if early { "_early" } else { "" }
    );
    let f = dev.function(&SCALED_MM, &name)?;
    let rowwise = (p.recipe == Recipe::RowWise) as i32;
    let (lda, ldw) = (a.ld as i64, w.ld as i64);
    let (sa, sb, bias, o) = (p.scale_a.ptr(), p.scale_b.ptr(), p.bias.map_or(0, |b| b.ptr()), out.ptr());
    let stream = dev.stream();
    let how = Launch { after_previous: early, ..Launch::default() };
    // Row chunks of 16 (several only for K = 0 and shapes cuBLASLt declines): offset a,
    // scale_a and out per chunk.
    for m0 in (0..m).step_by(GEMV_MAX_M) {
        let mc = (m - m0).min(GEMV_MAX_M) as i32;
        let ap = a.ptr + (m0 * a.ld) as u64;
        let sap = if rowwise == 1 { sa + (m0 * 4) as u64 } else { sa };
        let op_ = o + (m0 * n * p.out.size()) as u64;
        let (ni, ki) = (n as i32, k as i32);
        let cfg = LaunchConfig {
            grid_dim: (gemv_blocks(n, nt, kw) as u32, 1, 1),
            block_dim: (32 * GEMV_WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (kw32, wp) = (kw as i32, w.ptr);
        // SAFETY: the kernel reads mc rows of k bytes at `ap` (stride lda) and n rows at
        // `wp` (stride ldw), all 16-byte aligned (k_rows); mc or 1 scales at `sap`, n or 1
        // at `sb`, n bias values when `bias` is non-null; it writes mc·n values of `out`
        // from `op_`, inside the buffer allocated above. The `_early` kernel reads only the
        // weight before kiln_wait_previous_kernel, and is chosen only when that is frozen.
        unsafe {
            launch(
                &stream,
                &f,
                cfg,
                how,
                &mut kernel_args![ap, lda, wp, ldw, sap, sb, rowwise, bias, op_, mc, ni, ki, kw32],
            )?
        };
    }
    Ok(out)
}

// ---- cuBLASLt --------------------------------------------------------------------------------

fn lt_err(e: lt::CublasError) -> Error {
    Error::Cuda(format!("cuBLASLt: {e:?}"))
}

/// How the GEMM applies scales: none (unit), one scalar each, or outer vectors.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum ScaleMode {
    Unit,
    Scalar,
    OuterVec,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct AlgoKey {
    ordinal: usize,
    dims: [usize; 6], // m, n, k, lda, ldw, ldd
    types: [DType; 3],
    scales: ScaleMode,
    bias: bool,
    align: [u32; 3],
}

struct LtState {
    handle: sys::cublasLtHandle_t,
    /// Per-stream workspaces (`CUstream` as usize), so captured GEMMs allocate nothing.
    workspaces: HashMap<usize, DeviceBuffer>,
    /// Heuristic choice per problem; `None` when cuBLASLt has no algorithm for it.
    algos: HashMap<AlgoKey, Option<sys::cublasLtMatmulAlgo_t>>,
}

// SAFETY: a cuBLASLt handle may be used from any thread; kiln serialises all use of it (and
// of the workspaces) through the mutex around this state.
unsafe impl Send for LtState {}

const LT_WORKSPACE_BYTES: usize = 32 << 20;

/// A cuBLASLt descriptor destroyed on drop.
struct Owned<T: Copy>(T, unsafe fn(T) -> std::result::Result<(), lt::CublasError>);

impl<T: Copy> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: the descriptor was created by cuBLASLt and is destroyed exactly once, here.
        let _ = unsafe { (self.1)(self.0) };
    }
}

fn lt_type(dt: DType) -> sys::cudaDataType {
    match dt {
        DType::F8E4M3 => sys::cudaDataType::CUDA_R_8F_E4M3,
        DType::F8E5M2 => sys::cudaDataType::CUDA_R_8F_E5M2,
        DType::BF16 => sys::cudaDataType::CUDA_R_16BF,
        DType::F16 => sys::cudaDataType::CUDA_R_16F,
        _ => sys::cudaDataType::CUDA_R_32F,
    }
}

/// Alignment of a device pointer, capped at cuBLASLt's default assumption of 256 bytes.
fn align_of(ptr: u64) -> u32 {
    1 << ptr.trailing_zeros().min(8)
}

/// One FP8 GEMM: `d[m, n]` (leading dim `ldd`, dtype `dt`) = scales · (a · wᵀ) + bias.
/// Column-major, this is dᵀ (n × m) = op(w) · aᵀ with w as cuBLAS's "A" (transposed, K
/// contiguous) and a as "B": both K-major, the layout Hopper's FP8 kernels need. So A's
/// scale is scale_b and B's is scale_a. Returns `Ok(false)` when no algorithm exists.
#[allow(clippy::too_many_arguments)]
fn lt_gemm(
    dev: &CudaDevice,
    p: &ScaledMm<'_>,
    a: &Rows,
    w: &Rows,
    (m, n, k): (usize, usize, usize),
    scales: ScaleMode,
    bias: Option<u64>,
    (d, ldd, dt): (u64, usize, DType),
) -> Result<bool> {
    use sys::cublasLtMatmulDescAttributes_t as A;
    static STATE: OnceLock<Mutex<HashMap<usize, LtState>>> = OnceLock::new();
    let mut states = STATE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    dev.context().bind_to_thread()?;
    let st = match states.entry(dev.ordinal()) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            let handle = crate::cuda::availability::quiet_catch("no libcublasLt", lt::create_handle)
                .map_err(Error::CudaUnavailable)?
                .map_err(lt_err)?;
            e.insert(LtState { handle, workspaces: HashMap::new(), algos: HashMap::new() })
        }
    };
    let stream = dev.stream();
    let skey = stream.cu_stream() as usize;
    let ws = match st.workspaces.entry(skey) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            // A workspace allocated inside a capture would belong to that graph's private pool.
            if stream.is_capturing()? {
                return Err(Error::Cuda(
                    "scaled_mm: run one M > 16 product on this stream before capturing a graph (cuBLASLt workspace)"
                        .into(),
                ));
            }
            e.insert(dev.alloc(LT_WORKSPACE_BYTES)?)
        }
    };
    let (ws_ptr, ws_len) = (ws.ptr(), ws.len());

    let desc = Owned(
        lt::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, sys::cudaDataType::CUDA_R_32F)
            .map_err(lt_err)?,
        lt::destroy_matmul_desc,
    );
    let set = |attr: A, v: *const c_void, size: usize| {
        // SAFETY: `desc` is live; `v` points at `size` bytes of the attribute's type.
        unsafe { lt::set_matmul_desc_attribute(desc.0, attr, v, size) }.map_err(lt_err)
    };
    let (op_t, op_n) = (1i32, 0i32); // CUBLAS_OP_T, CUBLAS_OP_N
    set(A::CUBLASLT_MATMUL_DESC_TRANSA, &op_t as *const i32 as _, 4)?;
    set(A::CUBLASLT_MATMUL_DESC_TRANSB, &op_n as *const i32 as _, 4)?;
    let (sa_ptr, sb_ptr) = (p.scale_a.ptr(), p.scale_b.ptr());
    if scales != ScaleMode::Unit {
        set(A::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb_ptr as *const u64 as _, 8)?;
        set(A::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa_ptr as *const u64 as _, 8)?;
    }
    if scales == ScaleMode::OuterVec {
        let mode = sys::cublasLtMatmulMatrixScale_t::CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F as i32;
        set(A::CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode as *const i32 as _, 4)?;
        set(A::CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode as *const i32 as _, 4)?;
    }
    if let Some(bp) = bias {
        let epi = sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS as u32;
        let bt = lt_type(dt) as i32;
        set(A::CUBLASLT_MATMUL_DESC_EPILOGUE, &epi as *const u32 as _, 4)?;
        set(A::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp as *const u64 as _, 8)?;
        set(A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt as *const i32 as _, 4)?;
    }
    let layout =
        |t: DType, rows: usize, cols: usize, ld: usize| -> Result<Owned<sys::cublasLtMatrixLayout_t>> {
            Ok(Owned(
                lt::create_matrix_layout(lt_type(t), rows as u64, cols as u64, ld as i64).map_err(lt_err)?,
                lt::destroy_matrix_layout,
            ))
        };
    let la = layout(p.b.2, k, n, w.ld)?;
    let lb = layout(p.a.2, k, m, a.ld)?;
    let ld_ = layout(dt, n, m, ldd)?;

    let key = AlgoKey {
        ordinal: dev.ordinal(),
        dims: [m, n, k, a.ld, w.ld, ldd],
        types: [p.a.2, p.b.2, dt],
        scales,
        bias: bias.is_some(),
        align: [align_of(w.ptr), align_of(a.ptr), align_of(d)],
    };
    let (alpha, beta) = (1f32, 0f32);
    let run = |handle: sys::cublasLtHandle_t, algo: &sys::cublasLtMatmulAlgo_t| -> Result<()> {
        // SAFETY: the layouts describe the live buffers: w (k × n, ld w.ld) and a (k × m, ld
        // a.ld) of float8, d (n × m, ld ldd) of `dt`; scale and bias pointers hold what the
        // modes need (ops checked the shapes); alpha / beta are host f32s read at enqueue; the
        // workspace belongs to this stream and outlives the call; the handle is used under
        // the mutex.
        unsafe {
            lt::matmul(
                handle,
                desc.0,
                &alpha as *const f32 as _,
                &beta as *const f32 as _,
                w.ptr as *const c_void,
                la.0,
                a.ptr as *const c_void,
                lb.0,
                d as *const c_void,
                ld_.0,
                d as *mut c_void,
                ld_.0,
                algo,
                ws_ptr as *mut c_void,
                ws_len,
                stream.cu_stream() as _,
            )
        }
        .map_err(lt_err)
    };
    let algo = match st.algos.get(&key) {
        Some(Some(a)) => *a,
        Some(None) => return Ok(false),
        None => {
            let pref = Owned(lt::create_matmul_pref().map_err(lt_err)?, lt::destroy_matmul_pref);
            use sys::cublasLtMatmulPreferenceAttributes_t as P;
            let setp = |attr: P, v: u64, size: usize| {
                // SAFETY: `pref` is live; the value is `size` bytes of the attribute's type
                // (u64 for the workspace limit, u32 for alignments; little-endian).
                unsafe { lt::set_matmul_pref_attribute(pref.0, attr, &v as *const u64 as _, size) }
                    .map_err(lt_err)
            };
            setp(P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, LT_WORKSPACE_BYTES as u64, 8)?;
            setp(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align[0] as u64, 4)?;
            setp(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align[1] as u64, 4)?;
            setp(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align[2] as u64, 4)?;
            setp(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align[2] as u64, 4)?;
            // SAFETY: every descriptor is live and describes the buffers of this call.
            let cands = unsafe { heuristic(st.handle, desc.0, la.0, lb.0, ld_.0, pref.0)? };
            let worth_tuning = cands.len() > 1 && 2.0 * (m * n * k) as f64 >= LT_TUNE_FLOPS;
            if worth_tuning && !stream.is_capturing()? {
                let label = format!("{m}x{k}x{n} {scales:?}");
                let best = fastest(dev, &label, &cands, |algo| run(st.handle, algo))?;
                st.algos.insert(key, Some(best));
                best
            } else {
                // The heuristic's first choice; inside a capture it is not kept, so that a
                // later call outside one still tunes.
                let first = cands.first().copied();
                if !worth_tuning {
                    st.algos.insert(key, first);
                }
                match first {
                    Some(a) => a,
                    None => return Ok(false),
                }
            }
        }
    };
    run(st.handle, &algo)?;
    Ok(true)
}

/// Candidates asked of cuBLASLt's heuristic for a problem worth timing them.
const LT_CANDIDATES: usize = 8;
/// Products of at least this many FLOPs time the heuristic's candidates once, on first use
/// outside a capture, and keep the fastest; its first choice is not always that (H200,
/// 2026-12-03, single calls: 4096³ tensor-wise #0 141.4 µs, #5 139.7).
const LT_TUNE_FLOPS: f64 = 1e11;

/// The heuristic's algorithms for a problem, best guess first (none: no algorithm).
///
/// # Safety
/// Every descriptor is live.
unsafe fn heuristic(
    handle: sys::cublasLtHandle_t,
    desc: sys::cublasLtMatmulDesc_t,
    la: sys::cublasLtMatrixLayout_t,
    lb: sys::cublasLtMatrixLayout_t,
    ld: sys::cublasLtMatrixLayout_t,
    pref: sys::cublasLtMatmulPreference_t,
) -> Result<Vec<sys::cublasLtMatmulAlgo_t>> {
    // SAFETY: an array of plain C structs, which cuBLASLt fills up to `count`.
    let mut res: [sys::cublasLtMatmulHeuristicResult_t; LT_CANDIDATES] = unsafe { std::mem::zeroed() };
    let mut count = 0i32;
    // SAFETY: the descriptors are live (caller); `res` holds LT_CANDIDATES results.
    let status = unsafe {
        sys::cublasLtMatmulAlgoGetHeuristic(
            handle,
            desc,
            la,
            lb,
            ld,
            ld,
            pref,
            LT_CANDIDATES as i32,
            res.as_mut_ptr(),
            &mut count,
        )
    };
    match status {
        sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS => {}
        sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED => return Ok(vec![]),
        e => return Err(lt_err(lt::CublasError(e))),
    }
    let ok =
        res[..count.max(0) as usize].iter().filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
    Ok(ok.map(|r| r.algo).collect())
}

/// The fastest of `cands` by CUDA-event timing of `run` (a warm-up round, then the best of
/// 3, interleaved so clock drift treats all alike); a candidate that fails to launch is skipped.
fn fastest(
    dev: &CudaDevice,
    label: &str,
    cands: &[sys::cublasLtMatmulAlgo_t],
    run: impl Fn(&sys::cublasLtMatmulAlgo_t) -> Result<()>,
) -> Result<sys::cublasLtMatmulAlgo_t> {
    let stream = dev.stream();
    let (e0, e1) = (dev.new_event(true)?, dev.new_event(true)?);
    let mut best = vec![f32::INFINITY; cands.len()];
    for round in 0..4 {
        for (i, algo) in cands.iter().enumerate() {
            e0.record(&stream)?;
            if run(algo).is_err() {
                continue;
            }
            e1.record(&stream)?;
            e1.synchronize()?;
            if round > 0 {
                best[i] = best[i].min(e0.elapsed_ms(&e1)?); // round 0 warms up
            }
        }
    }
    let i = (0..cands.len()).min_by(|&x, &y| best[x].total_cmp(&best[y])).unwrap_or(0);
    let record = LtTuning { problem: label.to_string(), candidates_ms: best, picked: i };
    TUNINGS.lock().unwrap_or_else(|e| e.into_inner()).push(record);
    Ok(cands[i])
}

/// One timing of cuBLASLt's candidates ([`cublaslt_tunings`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct LtTuning {
    /// `{M}x{K}x{N} {scale mode}`.
    pub problem: String,
    /// Best time of each candidate, in the heuristic's order (infinite: failed to launch).
    pub candidates_ms: Vec<f32>,
    /// The one kept.
    pub picked: usize,
}

static TUNINGS: Mutex<Vec<LtTuning>> = Mutex::new(Vec::new());

/// Every timing of cuBLASLt candidates this process made, oldest first (benchmarks report it).
pub fn cublaslt_tunings() -> Vec<LtTuning> {
    TUNINGS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Named slower path "decode kernel in 16-row chunks", for shapes cuBLASLt has no FP8
/// algorithm for (seen on Hopper with N not a multiple of 16): right, never an error.
fn chunked_gemv(
    dev: &CudaDevice,
    p: &ScaledMm<'_>,
    a: &Rows,
    w: &Rows,
    m: usize,
    n: usize,
    k: usize,
) -> Result<DeviceBuffer> {
    tracing::info!(
        "scaled_mm {m}x{k}x{n}: cuBLASLt has no FP8 algorithm; using the decode kernel in 16-row chunks"
    );
    gemv(dev, p, a, w, m, n, k)
}

fn lt_scaled_mm(
    dev: &CudaDevice,
    p: &ScaledMm<'_>,
    a: &Rows,
    w: &Rows,
    m: usize,
    n: usize,
    k: usize,
) -> Result<DeviceBuffer> {
    let too_big = [m, n, k].iter().any(|&v| v > i32::MAX as usize);
    if too_big {
        return Err(Error::bad_shape("scaled_mm", format!("dims {m}×{k}×{n} exceed cuBLASLt's int range")));
    }
    let ldd = n.next_multiple_of(16);
    let rowwise = p.recipe == Recipe::RowWise;
    // Tests and benchmarks measure both paths ([`settings::FP8_FORCE_EPILOGUE`]).
    if !(rowwise && settings::FP8_FORCE_EPILOGUE.get()?) {
        let mode = if rowwise { ScaleMode::OuterVec } else { ScaleMode::Scalar };
        let d = dev.alloc(m * ldd * p.out.size())?;
        if lt_gemm(dev, p, a, w, (m, n, k), mode, p.bias.map(|b| b.ptr()), (d.ptr(), ldd, p.out))? {
            if ldd == n {
                return Ok(d);
            }
            let view = Layout { shape: vec![m, n], strides: vec![ldd, 1], offset: 0 };
            return copy::cast(&d, &view, p.out, p.out);
        }
        if !rowwise {
            return chunked_gemv(dev, p, a, w, m, n, k);
        }
        tracing::info!(
            "scaled_mm {m}x{k}x{n}: cuBLASLt has no outer-vector scaling here; using the row-wise epilogue"
        );
    }
    // Named slower path "row-wise epilogue".
    let d = dev.alloc(m * ldd * 4)?;
    if !lt_gemm(dev, p, a, w, (m, n, k), ScaleMode::Unit, None, (d.ptr(), ldd, DType::F32))? {
        return chunked_gemv(dev, p, a, w, m, n, k);
    }
    let out = dev.alloc(m * n * p.out.size())?;
    let f = dev.function(&SCALED_MM, &format!("scaled_mm_epilogue_{}", out_name(p.out)))?;
    let (dp, ld64, sa, sb) = (d.ptr(), ldd as i64, p.scale_a.ptr(), p.scale_b.ptr());
    let (bias, op_, m64, n64) = (p.bias.map_or(0, |b| b.ptr()), out.ptr(), m as i64, n as i64);
    // SAFETY: reads m rows of n f32s at stride ldd from `d`, m and n scales, n bias values
    // when non-null; writes m·n values of `out`.
    unsafe { launch!(dev.stream(), f, super::grid(dev, m * n); dp, ld64, sa, sb, bias, op_, m64, n64)? };
    Ok(out)
}

/// Per-row FP8 quantisation of a dense `[rows, k]` f32 / bf16 / f16 buffer: (e4m3 values,
/// `rows` f32 scales).
pub fn quantize_rows(
    x: &DeviceBuffer,
    dt: DType,
    rows: usize,
    k: usize,
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    let dev = dev_of(x)?;
    need_fp8(&dev, "fp8::quantize")?;
    let (q, s) = (dev.alloc(rows * k)?, dev.alloc(rows * 4)?);
    if rows * k == 0 {
        return Ok((q, s));
    }
    let f = dev.function(&SCALED_MM, &format!("quantize_rows_{}", out_name(dt)))?;
    let (xp, qp, sp, r64, k64) = (x.ptr(), q.ptr(), s.ptr(), rows as i64, k as i64);
    // SAFETY: reads rows·k contiguous elements of `dt`, writes rows·k bytes and rows f32s.
    unsafe { launch!(dev.stream(), f, rows_grid(rows, row_threads(k)); xp, qp, sp, r64, k64)? };
    Ok((q, s))
}

#[cfg(test)]
mod tests {
    use super::gemv_k_warps;

    #[test]
    fn k_split_keeps_the_grid_to_one_wave() {
        let slots = 132 * 4; // an H200 at 4 blocks per SM
        assert_eq!(gemv_k_warps(4096, 4096, 1, slots), 4); // 512 blocks
        assert_eq!(gemv_k_warps(14336, 4096, 1, slots), 1); // 448 blocks; KW 2 would be 896
        assert_eq!(gemv_k_warps(14336, 4096, 2, slots), 2); // M > 8: 448 blocks
        assert_eq!(gemv_k_warps(4096, 1024, 1, slots), 2); // two 512-byte steps per row
        assert_eq!(gemv_k_warps(4096, 16, 1, slots), 1); // K below one step
        assert_eq!(gemv_k_warps(1 << 20, 4096, 1, slots), 1); // many waves whatever KW is
    }
}
