//! Launchers of the row families: `reduce.cu`, `softmax.cu`, `norm.cu`. Inputs are
//! contiguous rows from offset 0 (ops/reduce.rs and ops/nn.rs arrange that).
//!
//! Also the means by which the blocks of one launch meet ([`sync_words`]), shared by the
//! reduction-family launchers: a long row split across blocks (softmax, var_mean), a
//! grid-wide sum (mse_loss), a histogram (bincount), top-k stages.

use super::{dev_of, row_threads, rows_grid, suffix, NORM, REDUCE, SOFTMAX};
use crate::cuda::{
    dependent_launch, kernel_args, launch, CudaDevice, DeviceBuffer, Launch, LaunchConfig, PushKernelArg,
};
use crate::error::Result;
use crate::ops::ReduceOp;
use crate::{settings, DType};
use std::sync::Mutex;

/// How the blocks of one launch that must meet (chunks of one row, a grid-wide sum) do it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockSync {
    /// One launch: a grid barrier (cooperative launch) or the last block to finish merges.
    OneLaunch,
    /// Two launches, the second merging what the first wrote. Used during a graph capture
    /// that begins before the stream has its sync words; settable to test that path.
    MultiLaunch,
}

/// Per (device, stream), zeroed once: u32 words `[grid barrier, last-block counter, poll
/// epoch, unused]`, then `POLL_SLOTS` softmax-poll slots of 16 bytes. The barrier and counter
/// are left as found by every kernel (see `grid_barrier` / `last_block` in common.cuh); the
/// epoch counts softmax_poll launches and tags their slots (softmax.cu). None is ever reset.
/// Kernels on one stream run in order, so one set per stream suffices; a captured graph
/// keeps the set of the stream it was captured on (as cuBLAS keeps its per-stream
/// workspace), so replay it there or while that stream is idle.
static SYNC_WORDS: Mutex<Vec<((usize, usize), DeviceBuffer)>> = Mutex::new(Vec::new());
/// Blocks a softmax_poll launch may have (its slots).
const POLL_SLOTS: usize = 1024;
const SYNC_BYTES: usize = 16 + 16 * POLL_SLOTS;

/// The current stream's sync words, or `None` when blocks must meet by a second launch:
/// [`BlockSync::MultiLaunch`], or the stream is being captured and has none yet (made
/// there, they would belong to the graph's private pool).
pub(crate) fn sync_words(dev: &CudaDevice) -> Result<Option<u64>> {
    if settings::BLOCK_SYNC.get()? == BlockSync::MultiLaunch {
        return Ok(None);
    }
    let stream = dev.stream();
    let key = (dev.ordinal(), stream.cu_stream() as usize);
    let mut words = SYNC_WORDS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, b)) = words.iter().find(|(k, _)| *k == key) {
        return Ok(Some(b.ptr()));
    }
    if stream.is_capturing()? {
        return Ok(None);
    }
    let b = dev.alloc_zeroed(SYNC_BYTES)?;
    let p = b.ptr();
    words.push((key, b));
    Ok(Some(p))
}

/// Blocks a cooperative launch of a `__launch_bounds__(512, 2)` kernel of 512 threads may
/// have: two per SM are always resident.
pub(crate) fn coop_blocks(dev: &CudaDevice) -> usize {
    2 * dev.props().sm_count.max(1) as usize
}

pub(crate) fn cfg(blocks: usize, threads: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (blocks.max(1) as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}

/// Bytes of the compute type of `dt` in the row kernels (f64 in double, the rest in f32).
fn acc_size(dt: DType) -> usize {
    if dt == DType::F64 {
        8
    } else {
        4
    }
}

/// Split of rows of `r` into chunks of at least `tile` elements, one block each, at most
/// `max_blocks` blocks in all: (chunks per row, chunk length). One chunk per row when rows
/// alone fill the GPU.
fn split_plan(outer: usize, r: usize, tile: usize, max_blocks: usize) -> (usize, usize) {
    let bpr = r.div_ceil(tile).min(max_blocks / outer.max(1)).max(1);
    // Chunks start on a multiple of 32 elements, so a warp's loads stay aligned.
    let chunk = r.div_ceil(bpr).next_multiple_of(32).max(32);
    (r.div_ceil(chunk).max(1), chunk)
}

/// The softmax kernel versions of `softmax.cu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SoftmaxPath {
    /// v1: a block per row, three passes.
    Rows,
    /// v2: a warp per row, the row in registers (rows of at most 1024 = `WARP_ROW_MAX`).
    Warp,
    /// v3: rows in chunks of a block each, merged (one block per row for medium rows).
    Split,
    /// v4: a row over a cluster of up to 16 blocks, in registers (sm_90+, f32/f16/bf16,
    /// rows of at most `CLUSTER_ROW_MAX`).
    Cluster,
    /// v5: rows over co-resident blocks that poll each other's (max, sum) slots, in
    /// registers (f32/f16/bf16; as many blocks as a cooperative launch may have).
    Poll,
}

impl std::str::FromStr for SoftmaxPath {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "rows" => SoftmaxPath::Rows,
            "warp" => SoftmaxPath::Warp,
            "split" => SoftmaxPath::Split,
            "cluster" => SoftmaxPath::Cluster,
            "poll" => SoftmaxPath::Poll,
            _ => return Err(format!("{s:?} is not rows, warp, split, cluster or poll")),
        })
    }
}

/// Rows up to this long take the warp kernel.
const WARP_ROW_MAX: usize = 1024;
/// Most blocks per cluster (`CLUSTER_MAX` of softmax.cu), and the longest row
/// `softmax_cluster<V4>` holds: 16 blocks of 512 threads with 8 groups of four each.
const CLUSTER_MAX: usize = 16;
const CLUSTER_ROW_MAX: usize = CLUSTER_MAX * 512 * 4 * 8;
/// (blocks per cluster, threads, V4, chunk) of `softmax_cluster` for rows of `r <=
/// CLUSTER_ROW_MAX`: about 2048 elements a block, up to 16 blocks, then longer chunks
/// (H200 lab, 2026-12-03, µs: 4 x 32000 on 16 x 256 threads 3.9; 64 x 8192 on 4 x 256 4.9;
/// 32 x 128256 on 16 x 256 with 8 groups a thread 17.8, against 16 x 512 with 4 groups
/// 22.4).
fn cluster_plan(r: usize) -> (u32, u32, usize, usize) {
    let blocks = r.div_ceil(2048).clamp(2, CLUSTER_MAX);
    let chunk = r.div_ceil(blocks).next_multiple_of(32);
    let threads = if chunk <= 256 * 4 * 8 { 256 } else { 512 };
    let v4 = [1, 2, 4, 8].into_iter().find(|v| v * 4 * threads >= chunk).unwrap_or(8);
    (blocks as u32, threads as u32, v4, chunk)
}
/// By shape (H200 lab, 2026-12-03, µs, programmatic dependent launch off), rows of more
/// than 4096 take the cluster kernel for 3 to 64 rows of at most 32768 and for 8 to 64
/// longer rows (4 x 32000 3.9 against poll 5.0, 64 x 8192 4.9 against 5.8, 8 x 128256
/// 8.1 against 9.7), else the poll kernel where its grid fits (1 x 128256 4.3 against
/// cluster 6.3 and split 6.4; 4 x 128256 5.7 against 6.5). In the harness at ef855a0
/// (bench/results, as dependents): 1 x 128256 3.64, 64 x 8192 3.93, 32 x 128256 19.0.
fn poll_wins(r: usize) -> bool {
    r > 4096
}
fn cluster_wins(outer: usize, r: usize) -> bool {
    r > 4096 && outer <= 64 && (outer >= 8 || (outer >= 3 && r <= 32768))
}
/// `softmax_poll<V4>` shapes as (threads, V4, most blocks per row): chunks of 1024, 2048 and
/// 4096 elements. Rows take the first shape within its block limit whose grid is at most
/// one block per SM, else the fitting shape with the fewest blocks; a grid must fit one
/// cooperative launch (and the slots). A warp polls 32 slots, so the small chunk stops at
/// 32 blocks a row (H200 lab, 2026-12-03, µs: 1 x 32000 on 32 x 1024 3.4 against 16 x 2048
/// 4.0; 1 x 128256 on 63 x 2048 4.3 against 32 x 4096 4.8; 4 x 128256 on 4 x 32 x 4096 5.7
/// against 4 x 63 x 2048 6.4).
const POLL_SHAPES: [(u32, usize, usize); 3] = [(256, 1, 32), (256, 2, 128), (512, 2, 128)];

/// (threads, V4, blocks per row, chunk) of `softmax_poll` for `outer` rows of `r`, or `None`
/// when no grid fits what a cooperative launch (or the slots) allow.
fn poll_plan(dev: &CudaDevice, outer: usize, r: usize) -> Option<(u32, usize, usize, usize)> {
    let limit = coop_blocks(dev).min(POLL_SLOTS);
    let sms = dev.props().sm_count.max(1) as usize;
    let fits = POLL_SHAPES.iter().filter_map(|&(threads, v4, max_bpr)| {
        let chunk = threads as usize * 4 * v4;
        let bpr = r.div_ceil(chunk).max(1);
        (bpr <= max_bpr && outer * bpr <= limit).then_some((threads, v4, bpr, chunk))
    });
    let mut last = None;
    for p in fits {
        if outer * p.2 <= sms {
            return Some(p);
        }
        last = Some(p);
    }
    last
}
/// Threads and values per thread of `softmax_split` (`SPLIT_V`): its tile.
const SPLIT_THREADS: u32 = 512;
const SPLIT_TILE: usize = SPLIT_THREADS as usize * 4;

fn reduce_code(op: ReduceOp) -> i32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Prod => 1,
        ReduceOp::Mean => 2,
        ReduceOp::Max => 3,
        ReduceOp::Min => 4,
        ReduceOp::ArgMax => 5,
        ReduceOp::ArgMin => 6,
    }
}

pub(crate) fn reduce(
    op: ReduceOp,
    x: &DeviceBuffer,
    dt: DType,
    outer: usize,
    r: usize,
    out: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let o = dev.alloc(outer * out.size())?;
    if outer == 0 {
        return Ok(o);
    }
    let f = dev.function(&REDUCE, &format!("reduce_{}", suffix("reduce", dt)?))?;
    // The kernel writes int64 results (arg*, integer sum / prod) through `oi`.
    let (ot, oi) = if out == DType::I64 && !(dt == DType::I64 && matches!(op, ReduceOp::Max | ReduceOp::Min))
    {
        (0u64, o.ptr())
    } else {
        (o.ptr(), 0u64)
    };
    let (code, xp, outer64, r64) = (reduce_code(op), x.ptr(), outer as i64, r as i64);
    // SAFETY: `x` holds outer·r contiguous elements of `dt`; the kernel writes `outer`
    // values through exactly one of `ot` / `oi`, both pointing at `o`.
    unsafe { launch_after!(dev, f, rows_grid(outer, row_threads(r)); code, xp, ot, oi, outer64, r64)? };
    Ok(o)
}

/// Threads of `var_mean` blocks and their tile (`VM_V` = 4 values each).
const VM_THREADS: u32 = 256;
const VM_TILE: usize = VM_THREADS as usize * 4;

pub(crate) fn var_mean(
    x: &DeviceBuffer,
    dt: DType,
    outer: usize,
    r: usize,
    correction: f64,
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    let dev = dev_of(x)?;
    let (v, m) = (dev.alloc(outer * dt.size())?, dev.alloc(outer * dt.size())?);
    if outer == 0 {
        return Ok((v, m));
    }
    let f = dev.function(&REDUCE, &format!("var_mean_{}", suffix("var_mean", dt)?))?;
    let (bpr, chunk) = split_plan(outer, r, VM_TILE, coop_blocks(&dev));
    let part = dev.alloc(if bpr > 1 { outer * bpr * 2 * acc_size(dt) } else { 0 })?;
    let words = if bpr > 1 { sync_words(&dev)? } else { None };
    // One launch (phase 2): one chunk per row, or the last block merges via the counter
    // word. Else phase 0 writes chunk states and phase 1 merges them, a warp per row.
    let launches: &[(i32, usize)] = match (bpr, words) {
        (1, _) | (_, Some(_)) => &[(2, outer * bpr)],
        _ => &[(0, outer * bpr), (1, outer.div_ceil(VM_THREADS as usize / 32))],
    };
    let counter = words.map_or(0, |w| w + 4);
    let (xp, vp, mp, pp) = (x.ptr(), v.ptr(), m.ptr(), part.ptr());
    let (outer64, r64, bpr64, chunk64) = (outer as i64, r as i64, bpr as i64, chunk as i64);
    for &(phase, blocks) in launches {
        // SAFETY: reads outer·r elements; writes `outer` to each output and, when bpr > 1,
        // 2·outer·bpr compute-type values to `part`; `counter` is this stream's sync word.
        unsafe {
            launch!(dev.stream(), f, cfg(blocks.min(1 << 20), VM_THREADS); xp, vp, mp, outer64, r64, bpr64, chunk64, correction, phase, pp, counter)?
        };
    }
    Ok((v, m))
}

/// The path for `outer` rows of `r` of `dt`: forced ([`settings::SOFTMAX_PATH`]), or by
/// shape. A forced `Warp` still takes `Split` for rows longer than 1024, a forced `Cluster`
/// or `Poll` where it does not apply.
fn softmax_path(dev: &CudaDevice, dt: DType, outer: usize, r: usize) -> Result<SoftmaxPath> {
    use SoftmaxPath::*;
    let cluster_ok = dev.props().cc_major >= 9 && dt != DType::F64 && r <= CLUSTER_ROW_MAX;
    let poll_ok = dt != DType::F64 && poll_plan(dev, outer, r).is_some();
    Ok(match settings::SOFTMAX_PATH.get()? {
        Some(Rows) => Rows,
        None | Some(Warp) if r <= WARP_ROW_MAX => Warp,
        None if cluster_ok && cluster_wins(outer, r) => Cluster,
        None if poll_ok && poll_wins(r) => Poll,
        Some(Cluster) if cluster_ok => Cluster,
        Some(Poll) if poll_ok => Poll,
        _ => Split,
    })
}

pub(crate) fn softmax(
    x: &DeviceBuffer,
    dt: DType,
    outer: usize,
    r: usize,
    log: bool,
) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let o = dev.alloc(outer * r * dt.size())?;
    if outer * r == 0 {
        return Ok(o);
    }
    let sfx = suffix("softmax", dt)?;
    let (xp, op_, outer64, r64, lg) = (x.ptr(), o.ptr(), outer as i64, r as i64, log as i32);
    match softmax_path(&dev, dt, outer, r)? {
        SoftmaxPath::Rows => {
            let f = dev.function(&SOFTMAX, &format!("softmax_{sfx}"))?;
            // SAFETY: reads and writes outer·r contiguous elements.
            unsafe { launch!(dev.stream(), f, rows_grid(outer, row_threads(r)); xp, op_, outer64, r64, lg)? };
        }
        SoftmaxPath::Warp => {
            let v4 = [1, 2, 8].into_iter().find(|v| 128 * v >= r).unwrap_or(8);
            let f = dev.function(&SOFTMAX, &format!("softmax_warp{v4}_{sfx}"))?;
            // Eight rows (warps) per block; the kernel loops when rows outnumber warps.
            // SAFETY: reads and writes outer·r contiguous elements (vector accesses only where
            // aligned, softmax.cu: whole4), r <= 128·v4.
            unsafe {
                launch!(dev.stream(), f, cfg(outer.div_ceil(8).min(1 << 20), 256); xp, op_, outer64, r64, lg)?
            };
        }
        SoftmaxPath::Cluster => {
            let (blocks, threads, v4, chunk) = cluster_plan(r);
            let f = dev.function(&SOFTMAX, &format!("softmax_cluster{v4}_{sfx}"))?;
            let chunk64 = chunk as i64;
            let how = Launch {
                cluster: Some(blocks),
                after_previous: dependent_launch(&dev)?,
                ..Launch::default()
            };
            // SAFETY: reads and writes outer·r contiguous elements (vector accesses only where
            // aligned); a cluster of `blocks` per row, chunk <= threads·4·v4 (cluster_plan); the
            // kernel calls kiln_after_previous_kernel before touching memory.
            unsafe {
                launch(
                    &dev.stream(),
                    &f,
                    cfg(outer * blocks as usize, threads),
                    how,
                    &mut kernel_args![xp, op_, r64, chunk64, lg],
                )?
            };
        }
        SoftmaxPath::Poll if sync_words(&dev)?.is_some() => {
            let (threads, v4, bpr, chunk) = poll_plan(&dev, outer, r).expect("softmax_path checked the plan");
            let f = dev.function(&SOFTMAX, &format!("softmax_poll{v4}_{sfx}"))?;
            let sync = sync_words(&dev)?.unwrap_or(0);
            let (bpr64, chunk64) = (bpr as i64, chunk as i64);
            let how =
                Launch { cooperative: true, after_previous: dependent_launch(&dev)?, ..Launch::default() };
            // SAFETY: reads and writes outer·r contiguous elements (vector accesses only where
            // aligned, softmax.cu: whole4); `sync` is this stream's sync area, whose POLL_SLOTS
            // slots cover the outer·bpr blocks (poll_plan); the cooperative launch makes those
            // blocks (<= coop_blocks, <= 512 threads) all resident, which the polling needs; the
            // kernel calls kiln_after_previous_kernel before touching memory.
            unsafe {
                launch(
                    &dev.stream(),
                    &f,
                    cfg(outer * bpr, threads),
                    how,
                    &mut kernel_args![xp, op_, r64, bpr64, chunk64, lg, sync],
                )?
            };
        }
        SoftmaxPath::Split | SoftmaxPath::Poll => {
            let f = dev.function(&SOFTMAX, &format!("softmax_split_{sfx}"))?;
            let (bpr, chunk) = split_plan(outer, r, SPLIT_TILE, coop_blocks(&dev));
            let part = dev.alloc(if bpr > 1 { outer * bpr * 2 * acc_size(dt) } else { 0 })?;
            let words = if bpr > 1 { sync_words(&dev)? } else { None };
            let (bpr64, chunk64, pp, bar) = (bpr as i64, chunk as i64, part.ptr(), words.unwrap_or(0));
            // Phase 2 in one launch (cooperative when chunks meet at the grid barrier), or
            // phase 0 then 1 when they meet through a second launch.
            let phases: &[i32] = if bpr > 1 && words.is_none() { &[0, 1] } else { &[2] };
            for &phase in phases {
                let blocks = (outer * bpr).min(1 << 20);
                let stream = dev.stream();
                let mut b = stream.raw().launch_builder(&f);
                b.arg(&xp).arg(&op_).arg(&outer64).arg(&r64).arg(&bpr64).arg(&chunk64).arg(&lg).arg(&phase);
                b.arg(&pp).arg(&bar);
                // SAFETY: reads and writes outer·r contiguous elements; `part` holds 2·outer·bpr
                // compute-type values when bpr > 1; `bar` is this stream's barrier word. With
                // bpr > 1 the grid is outer·bpr <= coop_blocks blocks of 512 threads, all resident.
                unsafe {
                    if bpr > 1 && phase == 2 {
                        b.launch_cooperative(cfg(blocks, SPLIT_THREADS))?;
                    } else {
                        b.launch(cfg(blocks, SPLIT_THREADS)).map_err(launch_error!())?;
                    }
                }
            }
        }
    }
    Ok(o)
}

pub(crate) fn rms_norm(
    x: &DeviceBuffer,
    w: Option<&DeviceBuffer>,
    dt: DType,
    outer: usize,
    r: usize,
    eps: f64,
) -> Result<DeviceBuffer> {
    rms_norm_launch(x, None, w, dt, outer, r, eps).map(|(y, _)| y)
}

/// `(rms_norm(x + res), x + res)` in one launch (`Tensor::add_rms_norm`).
pub fn add_rms_norm(
    x: &DeviceBuffer,
    res: &DeviceBuffer,
    w: Option<&DeviceBuffer>,
    dt: DType,
    outer: usize,
    r: usize,
    eps: f64,
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    let (y, sum) = rms_norm_launch(x, Some(res), w, dt, outer, r, eps)?;
    Ok((y, sum.expect("a sum buffer is made with a residual")))
}

fn rms_norm_launch(
    x: &DeviceBuffer,
    res: Option<&DeviceBuffer>,
    w: Option<&DeviceBuffer>,
    dt: DType,
    outer: usize,
    r: usize,
    eps: f64,
) -> Result<(DeviceBuffer, Option<DeviceBuffer>)> {
    let dev = dev_of(x)?;
    let o = dev.alloc(outer * r * dt.size())?;
    let sum = res.map(|_| dev.alloc(outer * r * dt.size())).transpose()?;
    if outer * r == 0 {
        return Ok((o, sum));
    }
    let f = dev.function(&NORM, &format!("rms_norm_{}", suffix("rms_norm", dt)?))?;
    let (xp, wp, op_, outer64, r64) = (x.ptr(), w.map_or(0, |w| w.ptr()), o.ptr(), outer as i64, r as i64);
    let (rp, sp) = (res.map_or(0, |b| b.ptr()), sum.as_ref().map_or(0, |b| b.ptr()));
    // SAFETY: reads outer·r elements of x (and of res when `rp` is non-null, then writing as
    // many to `sp`) and r weights when `wp` is non-null; writes outer·r to `o`.
    unsafe {
        launch_after!(dev, f, rows_grid(outer, row_threads(r)); xp, rp, sp, wp, op_, outer64, r64, eps)?
    };
    Ok((o, sum))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_plan_covers_every_row_length() {
        for r in (4097..=CLUSTER_ROW_MAX).step_by(997).chain([CLUSTER_ROW_MAX, 32000, 128256, 262144]) {
            let (blocks, threads, v4, chunk) = cluster_plan(r);
            assert!((2..=CLUSTER_MAX as u32).contains(&blocks), "r {r}: {blocks} blocks");
            assert!(chunk <= threads as usize * 4 * v4, "r {r}: chunk {chunk} over {threads} x {v4} groups");
            assert!(blocks as usize * chunk >= r && chunk % 32 == 0, "r {r}");
            assert!((blocks as usize - 1) * chunk < r, "r {r}: an empty block");
        }
    }
}
