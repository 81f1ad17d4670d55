//! Launcher of `kernels/fp8_gemm.cu`, kiln's own Hopper FP8 GEMM (TMA + wgmma, clusters of
//! two blocks sharing W rows, per-128-K promotion as cuBLASLt does without fast
//! accumulation, epilogue through the copy engine). By default ([`Fp8Gemm::Auto`]) it serves
//! the row-wise recipe on large products, where cuBLASLt offers a single algorithm. On the
//! H200 at 8192³ row-wise it was faster than cuBLASLt at 6d5145c (893.3 µs against 913.9)
//! and level with it since (b6bfe59, two runs: 890.0 against 885.4 and 894.0), while at
//! 4096³ it is slower (131–133 against 105–115) and tensor-wise it only matches cuBLASLt,
//! so cuBLASLt keeps those (`bench/results/2026-12-04-{6d5145c,b6bfe59}-fp8*.json`). At
//! 3674a56 (H200, three suite runs) it read 878–881 µs row-wise, where PyTorch's row-wise
//! read 887–898 and cuBLASLt's 977–1016 (`bench/results/2026-12-05-3674a56-h200/`).

use super::scaled_mm::{out_name, Rows, ScaledMm};
use super::FP8_GEMM;
use crate::cuda::{CudaDevice, DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};
use crate::ops::Recipe;
use crate::{settings, DType};
use cudarc::driver::sys::{
    self, CUfunction_attribute as FuncAttr, CUtensorMapDataType as Dt, CUtensorMapFloatOOBfill as Oob,
    CUtensorMapInterleave as Interleave, CUtensorMapL2promotion as L2, CUtensorMapSwizzle as Swizzle,
};
use std::sync::atomic::{AtomicU64, Ordering};

// Tile and pipeline of fp8_gemm.cu (FG_BM, FG_BN, FG_BK, FG_STAGES, FG_THREADS). The cluster
// size (FG_CLUSTER) is the kernel's own (`__cluster_dims__`): the launcher reads it back.
const BM: usize = 128;
const BN: usize = 192;
const BK: usize = 128;
const STAGES: usize = 4;
const THREADS: u32 = 384;
/// Each consumer warpgroup's output staging buffer (FG_OUT_BYTES): 64 rows of 384 bytes.
const OUT_STAGING: usize = 64 * 384;
/// The stages, two staging buffers, two warpgroups' column scales, the barriers and the
/// slack that aligns them to 1024 bytes.
const SMEM: usize = STAGES * (BM + BN) * BK + 2 * OUT_STAGING + 2 * BN * 4 + 1024 + 128;
/// Smallest M·N·K that `Auto` gives kiln's kernel (row-wise only): measured as fast as
/// cuBLASLt or faster at 8192³ = 2^39, slower at 4096³ = 2^36; the threshold sits between,
/// in log scale (shapes in between were not measured).
const AUTO_MIN_MNK: usize = 1 << 38;

/// Which FP8 GEMM serves `scaled_mm` for M > 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Gemm {
    /// kiln's kernel for the row-wise recipe on products of M·N·K ≥ 2^38 where it runs,
    /// cuBLASLt otherwise (the default; the module doc gives the measurements).
    Auto,
    /// cuBLASLt always.
    CublasLt,
    /// kiln's kernel wherever it runs (compute capability 9.0, e4m3 operands, K a multiple
    /// of 16, output rows a multiple of 16 bytes), cuBLASLt elsewhere.
    Own,
}

/// 0: not yet read from `KILN_FP8_GEMM`; then 1 + the choice.
/// The GEMM in use: [`settings::FP8_GEMM`] (`KILN_FP8_GEMM`: auto, own or cublaslt).
pub fn fp8_gemm_choice() -> Result<Fp8Gemm> {
    settings::FP8_GEMM.get()
}

static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// How many products kiln's FP8 GEMM has run in this process (tests and benchmarks check
/// which GEMM served them).
pub fn own_fp8_gemm_launches() -> u64 {
    LAUNCHES.load(Ordering::Relaxed)
}

/// Whether the kernel can run this product: wgmma is compute capability 9.0's (sm_90a) own,
/// both operands e4m3, the tensor copy engine wants 16-byte row pitches (operands and the
/// output it stores) and int32 sizes.
fn runs(dev: &CudaDevice, p: &ScaledMm<'_>, a: &Rows, w: &Rows, dims: (usize, usize, usize)) -> bool {
    let props = dev.props();
    let (m, n, k) = dims;
    (props.cc_major, props.cc_minor) == (9, 0)
        && props.max_shared_mem_per_block_optin as usize >= SMEM
        && p.a.2 == DType::F8E4M3
        && p.b.2 == DType::F8E4M3
        && k.is_multiple_of(16)
        && a.ld.is_multiple_of(16)
        && w.ld.is_multiple_of(16)
        && (n * p.out.size()).is_multiple_of(16)
        && [m, n, k].iter().all(|&v| v > 0 && v <= i32::MAX as usize)
}

/// Whether kiln's GEMM serves this product: chosen (or picked by `Auto`), and able to run it.
pub(super) fn serves(
    dev: &CudaDevice,
    p: &ScaledMm<'_>,
    a: &Rows,
    w: &Rows,
    dims: (usize, usize, usize),
) -> Result<bool> {
    Ok(chosen(fp8_gemm_choice()?, p.recipe, dims) && runs(dev, p, a, w, dims))
}

/// Whether `choice` asks for kiln's GEMM on this recipe and M·N·K.
fn chosen(choice: Fp8Gemm, recipe: Recipe, (m, n, k): (usize, usize, usize)) -> bool {
    match choice {
        Fp8Gemm::Own => true,
        Fp8Gemm::CublasLt => false,
        Fp8Gemm::Auto => recipe == Recipe::RowWise && m.saturating_mul(n).saturating_mul(k) >= AUTO_MIN_MNK,
    }
}

/// A 2-D tensor map over `rows` rows of `cols` elements of type `dt` (`size` bytes), `ld`
/// elements apart, moved in boxes of `box_rows` rows × 128 bytes with the 128-byte swizzle
/// the kernel's wgmma descriptors and staging buffers use.
fn tensor_map(
    ptr: u64,
    dt: Dt,
    size: usize,
    (rows, cols, ld): (usize, usize, usize),
    box_rows: usize,
) -> Result<sys::CUtensorMap> {
    let dims = [cols as u64, rows as u64];
    let strides = [(ld * size) as u64];
    let boxes = [(128 / size) as u32, box_rows as u32];
    let steps = [1u32, 1];
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: the arrays hold rank (2) dims, box sizes and element steps, rank − 1 strides;
    // the address is 16-byte aligned and the pitch a multiple of 16 (`runs`); the driver
    // writes the opaque map, which is plain data.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            dt,
            2,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            Interleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            Swizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            L2::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            Oob::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()
        .map_err(|e| Error::Cuda(format!("scaled_mm: encoding a tensor map: {e}")))?;
        Ok(map.assume_init())
    }
}

/// `out[M, N] = a · wᵀ · scales (+ bias)` on kiln's kernel, where [`serves`] said yes.
pub(super) fn fp8_gemm(
    dev: &CudaDevice,
    p: &ScaledMm<'_>,
    a: &Rows,
    w: &Rows,
    dims: (usize, usize, usize),
) -> Result<DeviceBuffer> {
    let (m, n, k) = dims;
    let f = dev.function(&FP8_GEMM, &format!("fp8_gemm_{}", out_name(p.out)))?;
    f.set_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, SMEM as i32)?;
    let cluster = f.get_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH)?.max(1) as usize;
    let u8 = Dt::CU_TENSOR_MAP_DATA_TYPE_UINT8;
    let ma = tensor_map(a.ptr, u8, 1, (m, k, a.ld), BM)?;
    let mw = tensor_map(w.ptr, u8, 1, (n, k, w.ld), BN / cluster)?;
    let out = dev.alloc(m * n * p.out.size())?;
    let odt = match p.out {
        DType::BF16 => Dt::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F16 => Dt::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        _ => Dt::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    };
    // Each consumer warpgroup stores 64 rows at a time.
    let mo = tensor_map(out.ptr(), odt, p.out.size(), (m, n, n), 64)?;
    // One cluster per `cluster` vertically adjacent tiles, no more clusters than fit at once
    // (the grid is persistent: a cluster that did not fit would start after the others).
    // A GPC's SMs need not split into whole clusters, so that can be fewer than SMs / cluster.
    let one = LaunchConfig {
        grid_dim: (cluster as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: SMEM as u32,
    };
    let fit = f.occupancy_max_active_clusters(one, dev.stream().raw())?.max(1) as usize;
    let tiles = m.div_ceil(cluster * BM) * n.div_ceil(BN);
    let cfg = LaunchConfig { grid_dim: ((cluster * tiles.min(fit)) as u32, 1, 1), ..one };
    // The cluster shape is compiled in, so the launch does not set one.
    let (sa, sb) = (p.scale_a.ptr(), p.scale_b.ptr());
    let bias = p.bias.map_or(0, |b| b.ptr());
    let (m32, n32, k32, rowwise) = (m as i32, n as i32, k as i32, (p.recipe == Recipe::RowWise) as i32);
    // SAFETY: the tensor maps cover m rows of `a` and n rows of `w`, K bytes each at their
    // pitches (the copy engine reads nothing outside them and zero-fills the rest of a
    // tile), and the m × n outputs of `out` (the copy engine clips partial tiles to them);
    // the kernel reads m or 1 scales at `sa`, n or 1 at `sb` and n bias values when
    // non-null. SMEM covers its stages, staging buffers and barriers, the grid is whole
    // clusters of the kernel's compiled shape, and it calls kiln_after_previous_kernel
    // before its first global access.
    unsafe { launch_after!(dev, f, cfg; ma, mw, mo, sa, sb, bias, m32, n32, k32, rowwise)? };
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{chosen, Fp8Gemm};
    use crate::ops::Recipe;

    #[test]
    fn auto_gives_large_rowwise_products_to_the_own_kernel() {
        let (row, tensor) = (Recipe::RowWise, Recipe::TensorWise);
        assert!(chosen(Fp8Gemm::Auto, row, (8192, 8192, 8192)));
        assert!(chosen(Fp8Gemm::Auto, row, (4096, 8192, 8192))); // 2^38 exactly
        assert!(!chosen(Fp8Gemm::Auto, row, (4096, 4096, 8192)));
        assert!(!chosen(Fp8Gemm::Auto, row, (4096, 4096, 4096)));
        assert!(!chosen(Fp8Gemm::Auto, tensor, (8192, 8192, 8192)));
        assert!(chosen(Fp8Gemm::Auto, row, (usize::MAX, 2, 2))); // saturates instead of overflowing
        assert!(chosen(Fp8Gemm::Own, tensor, (32, 32, 32)));
        assert!(!chosen(Fp8Gemm::CublasLt, row, (8192, 8192, 8192)));
    }
}
