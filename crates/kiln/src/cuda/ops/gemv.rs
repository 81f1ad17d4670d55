//! Decode-time `linear`: 1–8 rows of x against a contiguous row-major weight [N, K], bias
//! fused (`kernels/gemv.cu`, whose header gives the floor), and `expert_linear`'s experts
//! kernel, the same GEMV with one weight per slot picked from stacked experts on the
//! device. Either can take a gate_up weight `[2·I, K]` as (gate, up) row pairs and store
//! SwiGLU's `silu(gate) · up` ([`Pairs`]). [`TABLE`] is the one place that picks a kernel
//! variant per shape.
//!
//! Tuning: `KILN_GEMV_VARIANT=b16_r2_u4_g1_w4` (or `force`) forces one variant on
//! every call; `kiln bench --suite linear` prints the variant each shape ran with, and with
//! `KILN_GEMV_SWEEP=1` times every [`candidates`] variant per shape. Edit [`TABLE`] from that.

use super::{copy, dev_of, suffix, GEMV};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::Result;
use crate::layout::Layout;
use crate::{settings, DType};

/// The most x rows (after flattening leading dims) a GEMV kernel serves; more go to cuBLAS.
pub const MAX_ROWS: usize = 8;

/// `GEMV_MAX_WARPS` of gemv.cu.
const MAX_WARPS: u8 = 16;

/// Compiled (load bytes, rows per warp, unroll) tiles: `KILN_GEMV_TILE(S)` lines of gemv.cu.
/// Each exists for 1, 2, 4 and 8 x rows; the 2-byte tile only for f16 / bf16.
pub const TILES: &[(u8, u8, u8)] =
    &[(16, 1, 4), (16, 1, 8), (16, 2, 4), (16, 4, 2), (8, 1, 4), (4, 1, 4), (2, 1, 4)];

/// One kernel variant, written `b{vec}_r{rows}_u{unroll}_g{split}_w{warps}` (e.g.
/// `b16_r1_u4_g8_w8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// Bytes per load (16; narrower only when K or a pointer is not 16-byte aligned).
    pub vec: u8,
    /// Output rows per warp (each x load serves them all).
    pub rows: u8,
    /// Loads in flight per thread and row.
    pub unroll: u8,
    /// Warps splitting K for one row group (split-K inside the block).
    pub split: u8,
    /// Warps per block: a multiple of `split`, at most 16.
    pub warps: u8,
}

impl Variant {
    /// The variant with these fields, unchecked (parsing one with `FromStr` checks that its
    /// tile is compiled and its warp layout valid).
    pub const fn new(vec: u8, rows: u8, unroll: u8, split: u8, warps: u8) -> Variant {
        Variant { vec, rows, unroll, split, warps }
    }

    /// Outputs one block computes (`pairs`: a (gate, up) pair of weight rows per output).
    fn rows_per_block(self, pairs: Pairs) -> usize {
        let per_warp = if pairs.0 { self.rows / 2 } else { self.rows };
        (self.warps / self.split) as usize * per_warp as usize
    }
}

/// Whether the weight is an MLP's gate_up `[2·I, K]` (gate rows, then up rows) whose
/// output is SwiGLU's `silu(gate) · up` `[…, I]`, each product rounded to the dtype first
/// as separate `linear` and `silu_mul` launches store them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pairs(pub bool);

/// The tile of `v` for `pairs`: a warp's rows must hold whole pairs, so an odd row count
/// becomes the 2-row tile (16-byte loads: [`pairs_decline`] asks for them).
fn pair_tile(v: Variant, pairs: Pairs) -> Variant {
    if pairs.0 && v.rows % 2 == 1 {
        Variant { vec: 16, rows: 2, unroll: 4, ..v }
    } else {
        v
    }
}

/// Why a gate_up weight of `rows` × K at `wp` cannot run as SwiGLU pairs (their tiles use
/// 16-byte loads only); `None`: it can.
pub fn pairs_decline(rows: usize, k: usize, wp: u64, dt: DType) -> Option<&'static str> {
    if !rows.is_multiple_of(2) {
        Some("an odd number of gate_up rows")
    } else if !wp.is_multiple_of(16) || !(k * dt.size()).is_multiple_of(16) {
        Some("gate_up rows not 16-byte aligned")
    } else {
        None
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b{}_r{}_u{}_g{}_w{}", self.vec, self.rows, self.unroll, self.split, self.warps)
    }
}

impl std::str::FromStr for Variant {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Variant, String> {
        let bad = || format!("{s:?} is not a GEMV variant like b16_r2_u4_g1_w4");
        let mut it = s.trim().split('_');
        let mut field = |prefix: char| -> std::result::Result<u8, String> {
            it.next().and_then(|f| f.strip_prefix(prefix)).and_then(|v| v.parse().ok()).ok_or_else(bad)
        };
        let v = Variant::new(field('b')?, field('r')?, field('u')?, field('g')?, field('w')?);
        if it.next().is_some() {
            return Err(bad());
        }
        if !TILES.contains(&(v.vec, v.rows, v.unroll)) {
            return Err(format!(
                "{s}: no compiled tile b{}_r{}_u{} (tiles: {TILES:?})",
                v.vec, v.rows, v.unroll
            ));
        }
        if v.warps == 0 || v.warps > MAX_WARPS || v.split == 0 || !v.warps.is_multiple_of(v.split) {
            return Err(format!("{s}: warps must be 1..={MAX_WARPS} and a multiple of split"));
        }
        Ok(v)
    }
}

/// One row of the policy table: applies when x rows <= `max_rows`, N <= `max_n` and
/// K >= `min_k`.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// Largest number of x rows the rule applies to.
    pub max_rows: usize,
    /// Largest N (weight rows) the rule applies to.
    pub max_n: usize,
    /// Smallest K the rule applies to.
    pub min_k: usize,
    /// The variant chosen when the rule applies.
    pub variant: Variant,
}

const fn rule(max_rows: usize, max_n: usize, min_k: usize, variant: Variant) -> Rule {
    Rule { max_rows, max_n, min_k, variant }
}

/// THE policy table (all dtypes; first match wins; [`DEFAULT`] when none does). Starting
/// points from the design, for the lead to tune from `KILN_GEMV_SWEEP=1` bench output
/// (H200: 132 SMs, up to 64 resident warps each):
/// - tiny N (router 128×2048, in_proj_a/b 32×2048): one row per block, K split over 8–16
///   warps, so each thread has ~1 load and the call is one DRAM round trip;
/// - small N (KV projections, ≤ 1024): K split over 4 warps so ≥ 2000 warps stream;
/// - medium N (≤ 4096): K split in 2, 8 loads in flight per thread where K ≥ 4096 has 8
///   pieces per lane, else 4 (8 would re-read the row's last piece: the H100 sweep of
///   2026-12-07, Qwen3-30B-A3B q_proj 4096×2048: 10.0 → 7.6 µs); N ≤ 2048 with K ≥ 4096
///   (o_proj 2048×4096) splits K in 4 (8.1 → 7.5 µs);
/// - large N (MLP, lm_head): a warp per 2 rows streams whole rows.
///
/// More x rows favour more output rows per warp, which re-use each x load.
pub const TABLE: &[Rule] = &[
    rule(2, 64, 0, Variant::new(16, 1, 4, 16, 16)),
    rule(2, 256, 0, Variant::new(16, 1, 4, 8, 8)),
    rule(2, 1024, 0, Variant::new(16, 1, 4, 4, 8)),
    rule(2, 2048, 4096, Variant::new(16, 1, 4, 4, 4)),
    rule(2, 4096, 4096, Variant::new(16, 1, 8, 2, 8)),
    rule(2, 4096, 0, Variant::new(16, 1, 4, 2, 8)),
    rule(2, usize::MAX, 0, Variant::new(16, 2, 4, 1, 4)),
    rule(MAX_ROWS, 256, 0, Variant::new(16, 2, 4, 8, 8)),
    rule(MAX_ROWS, 1024, 0, Variant::new(16, 2, 4, 4, 8)),
];

/// When no rule of [`TABLE`] matches.
pub const DEFAULT: Variant = Variant::new(16, 4, 2, 1, 4);

/// The variant for `rows` × [N, K]: the forced one ([`settings::GEMV_VARIANT`]), else the first
/// matching [`TABLE`] rule. At launch a narrower load replaces a 16-byte one when alignment
/// demands it.
pub fn choose(rows: usize, n: usize, k: usize) -> Result<Variant> {
    if let Some(v) = settings::GEMV_VARIANT.get()? {
        return Ok(v);
    }
    let hit = TABLE.iter().find(|r| rows <= r.max_rows && n <= r.max_n && k >= r.min_k);
    Ok(hit.map_or(DEFAULT, |r| r.variant))
}

/// Variants a sweep times: every 16-byte tile with every (split, warps) layout.
pub fn candidates() -> Vec<Variant> {
    let layouts =
        [(1, 2), (1, 4), (2, 4), (4, 4), (1, 8), (2, 8), (4, 8), (8, 8), (4, 16), (8, 16), (16, 16)];
    TILES
        .iter()
        .filter(|t| t.0 == 16)
        .flat_map(|&(vec, rows, unroll)| {
            layouts.iter().map(move |&(split, warps)| Variant::new(vec, rows, unroll, split, warps))
        })
        .collect()
}

/// Why `rows` × [N, K] with weight layout `wl` goes to cuBLAS instead of a GEMV kernel
/// (`None`: it takes one).
pub fn declines(rows: usize, n: usize, k: usize, wl: &Layout, dt: DType) -> Option<&'static str> {
    if !matches!(dt, DType::F32 | DType::F16 | DType::BF16) {
        Some("dtype other than f32 / f16 / bf16")
    } else if rows == 0 || rows > MAX_ROWS {
        Some("x rows outside 1..=8")
    } else if n == 0 || k == 0 {
        Some("empty weight")
    } else if n > i32::MAX as usize || k > i32::MAX as usize {
        Some("N or K past i32")
    } else if wl.rank() != 2 || !wl.is_contiguous() {
        Some("weight is not a contiguous row-major [N, K]")
    } else {
        None
    }
}

/// Widest load (16, 8, 4 or 2 bytes, at least one element) that `ok` accepts.
fn widest(size: usize, ok: impl Fn(u64) -> bool) -> u8 {
    [16u8, 8, 4, 2].into_iter().find(|&v| v as usize >= size && ok(v as u64)).unwrap_or(size as u8)
}

/// The load width for a weight at `wp` with rows of K elements: the chosen tile, or the
/// narrow-load tile when alignment forbids its load width.
fn fit(chosen: Variant, wp: u64, k: usize, size: usize) -> Variant {
    let vec = widest(size, |v| wp.is_multiple_of(v) && ((k * size) as u64).is_multiple_of(v))
        .min(chosen.vec)
        .max(size as u8);
    if vec == chosen.vec {
        chosen
    } else {
        Variant { vec, rows: 1, unroll: 4, ..chosen }
    }
}

/// `x` `[..., K]` (any layout) · `w` `[N, K]`ᵀ (+ `bias` `[N]`, any stride) → `[rows, N]`, where
/// [`declines`] said yes; with `pairs` (and [`pairs_decline`] saying yes, no bias) SwiGLU
/// of the gate_up weight `[N, K]` → `[rows, N / 2]`.
pub fn linear(
    x: &DeviceBuffer,
    xl: &Layout,
    w: &DeviceBuffer,
    wl: &Layout,
    bias: Option<(&DeviceBuffer, &Layout)>,
    pairs: Pairs,
    dt: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(w)?;
    let (n, k, size) = (wl.shape[0], wl.shape[1], dt.size());
    let n_out = if pairs.0 { n / 2 } else { n };
    let rows = xl.numel() / k;
    let out = dev.alloc(rows * n_out * size)?;
    let wp = w.ptr() + (wl.offset * size) as u64;
    let v = pair_tile(fit(choose(rows, n, k)?, wp, k, size), pairs);
    let (x_copy, xp, xs) = copy::aligned_rows(x, xl, k, dt, v.vec as u64)?;
    let kind = if pairs.0 { "gemv_pairs" } else { "gemv" };
    let name = format!(
        "{kind}_{}_b{}_r{}_u{}_m{}",
        suffix("linear", dt)?,
        v.vec,
        v.rows,
        v.unroll,
        rows.next_power_of_two()
    );
    let f = dev.function(&GEMV, &name)?;
    let (bp, bs) =
        bias.map_or((0u64, 0i64), |(b, l)| (b.ptr() + (l.offset * size) as u64, l.strides[0] as i64));
    let (op, m, n32, k32, g) = (out.ptr(), rows as i32, n_out as i32, k as i32, v.split as i32);
    let cfg = LaunchConfig {
        grid_dim: (n_out.div_ceil(v.rows_per_block(pairs)) as u32, 1, 1),
        block_dim: (32 * v.warps as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: x holds `rows` rows of K elements `xs` apart from `xp` (the view's storage or
    // its contiguous copy, alive until the launch is enqueued and stream-ordered before the
    // copy's release); w holds N·K contiguous elements from `wp` (with pairs, the kernel's
    // N is N / 2 and it reads gate row n and up row N / 2 + n); bias, when `bp` != 0, holds
    // N elements `bs` apart; `out` holds rows·n_out. `vec` divides the byte addresses of
    // every row start and K·size, pair tiles have an even row count, and `warps` is a
    // multiple of `split` at most GEMV_MAX_WARPS.
    unsafe { launch_after!(dev, f, cfg; xp, xs, wp, bp, bs, op, m, n32, k32, g)? };
    drop(x_copy);
    Ok(out)
}

/// The gate_up experts' variant (`kiln bench --suite experts` with `KILN_GEMV_SWEEP=1`, H100,
/// 2026-12-07): one (gate, up) pair per block of 4 warps splitting K — Qwen3-30B-A3B 18.3 →
/// 17.8 µs, Qwen3.6-35B-A3B 14.8 → 12.8, LFM2-8B-A1B 22.0 → 20.4 against the table's choice.
pub const EXPERT_PAIRS: Variant = Variant::new(16, 2, 4, 4, 4);

/// The most expert slots one launch serves (the grid's y extent).
pub const MAX_SLOTS: usize = 65535;

/// Why `slots` expert products against stacked weights `wl` [E, N, K] take the composed
/// path (index_select + matmul) instead of the experts kernel (`None`: the kernel).
pub fn experts_declines(slots: usize, wl: &Layout, dt: DType) -> Option<&'static str> {
    if !matches!(dt, DType::F32 | DType::F16 | DType::BF16) {
        Some("dtype other than f32 / f16 / bf16")
    } else if slots == 0 || slots > MAX_SLOTS {
        Some("expert slots outside 1..=65535")
    } else if wl.rank() != 3 || !wl.is_contiguous() {
        Some("weights are not a contiguous [E, N, K]")
    } else if wl.shape.iter().any(|&d| d == 0 || d > i32::MAX as usize) {
        Some("an empty weight, or E, N or K past i32")
    } else {
        None
    }
}

/// Slot s of `experts` (any integer dtype and layout, `slots` of them) multiplies x row
/// s / `per_row` (x [rows, K], any layout) by expert `experts[s]` of `w` [E, N, K] →
/// [slots, N], where [`experts_declines`] said yes; with `pairs` ([`pairs_decline`] saying
/// yes) SwiGLU of the gate_up experts → [slots, N / 2]. The variant: for pairs
/// [`EXPERT_PAIRS`], else the one [`choose`] gives a single row against all slots' rows
/// (slots · N), the work one launch streams; [`settings::GEMV_VARIANT`] overrides both.
#[allow(clippy::too_many_arguments)]
pub fn expert_linear(
    x: &DeviceBuffer,
    xl: &Layout,
    per_row: usize,
    w: &DeviceBuffer,
    wl: &Layout,
    experts: &DeviceBuffer,
    el: &Layout,
    edt: DType,
    pairs: Pairs,
    dt: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(w)?;
    let (e, n, k, size) = (wl.shape[0], wl.shape[1], wl.shape[2], dt.size());
    let n_out = if pairs.0 { n / 2 } else { n };
    let slots = el.numel();
    let out = dev.alloc(slots * n_out * size)?;
    let wp = w.ptr() + (wl.offset * size) as u64;
    let chosen = match settings::GEMV_VARIANT.get()? {
        None if pairs.0 => EXPERT_PAIRS,
        _ => choose(1, slots * n, k)?,
    };
    let v = pair_tile(fit(chosen, wp, k, size), pairs);
    let (x_copy, xp, xs) = copy::aligned_rows(x, xl, k, dt, v.vec as u64)?;
    let (idx_copy, ip) = super::index::i64_indices(experts, el, edt)?;
    let kind = if pairs.0 { "gemv_experts_pairs" } else { "gemv_experts" };
    let f = dev
        .function(&GEMV, &format!("{kind}_{}_b{}_r{}_u{}", suffix("linear", dt)?, v.vec, v.rows, v.unroll))?;
    let (op, pr, e32, n32, k32, g) =
        (out.ptr(), per_row as i32, e as i32, n_out as i32, k as i32, v.split as i32);
    let cfg = LaunchConfig {
        grid_dim: (n_out.div_ceil(v.rows_per_block(pairs)) as u32, slots as u32, 1),
        block_dim: (32 * v.warps as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: x holds slots / per_row rows of K elements `xs` apart from `xp` (view or
    // contiguous copy, alive until the launch is enqueued); `ip` points at `slots`
    // contiguous int64; w holds E·N·K contiguous elements from `wp` and the kernel reads
    // expert e only for e in [0, E) after one wrap (with pairs its N is N / 2, each expert
    // 2·(N / 2) rows); `out` holds slots·n_out. Alignment and warps as in `linear`.
    unsafe { launch_after!(dev, f, cfg; xp, xs, pr, wp, ip, e32, op, n32, k32, g)? };
    drop((x_copy, idx_copy));
    Ok(out)
}

/// Why the fused down projection + routed sum ([`expert_linear_sum`]) of `tokens` tokens
/// with `k` slots each against stacked down weights `wl` [E, N, I] takes the composed path
/// (`None`: the kernel).
pub fn experts_sum_declines(tokens: usize, k: usize, wl: &Layout, dt: DType) -> Option<&'static str> {
    if tokens > MAX_SLOTS {
        Some("more than 65535 tokens")
    } else if k > i32::MAX as usize {
        Some("k past i32")
    } else {
        experts_declines(tokens * k, wl, dt)
    }
}

/// `out[t] = Σ_j weights[t, j] · w[experts[t, j]] · x[t, j]` of `x` [T, k, I] (any layout),
/// stacked `w` [E, N, I], `experts` [T, k] (any integer dtype and layout) and `weights`
/// (T·k contiguous f32 from element `w_off` of `weights`) → [T, N], where
/// [`experts_sum_declines`] said yes: MoE decode's down projection and weighted sum in one
/// launch. The G warps of a row group split the k slots (at most 4 warps per group; as many
/// groups as fit in 8 warps a block), two rows per warp, unless [`settings::GEMV_VARIANT`]
/// forces a variant. (The experts suite's sweep, H100, 2026-12-07: 4 warps a group beat one
/// warp per slot on all three MoE shapes — Qwen3-30B-A3B 11.3 → 10.0 µs, Qwen3.6-35B-A3B
/// 8.7 → 7.5.)
#[allow(clippy::too_many_arguments)]
pub fn expert_linear_sum(
    x: &DeviceBuffer,
    xl: &Layout,
    w: &DeviceBuffer,
    wl: &Layout,
    experts: &DeviceBuffer,
    el: &Layout,
    edt: DType,
    weights: &DeviceBuffer,
    w_off: usize,
    dt: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(w)?;
    let (e, n, i, size) = (wl.shape[0], wl.shape[1], wl.shape[2], dt.size());
    let (t, k) = (el.shape[0], el.shape[1]);
    let out = dev.alloc(t * n * size)?;
    let wp = w.ptr() + (wl.offset * size) as u64;
    let split = k.clamp(1, 4) as u8;
    let v = settings::GEMV_VARIANT.get()?.unwrap_or(Variant::new(16, 2, 4, split, 8 / split * split));
    let v = fit(v, wp, i, size);
    let (x_copy, xp, xs) = copy::aligned_rows(x, xl, i, dt, v.vec as u64)?;
    let (idx_copy, ip) = super::index::i64_indices(experts, el, edt)?;
    let f = dev.function(
        &GEMV,
        &format!("gemv_experts_sum_{}_b{}_r{}_u{}", suffix("linear", dt)?, v.vec, v.rows, v.unroll),
    )?;
    let (op, wtp) = (out.ptr(), weights.ptr() + (w_off * 4) as u64);
    let (k32, e32, n32, i32_, g) = (k as i32, e as i32, n as i32, i as i32, v.split as i32);
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(v.rows_per_block(Pairs(false))) as u32, t as u32, 1),
        block_dim: (32 * v.warps as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: x holds T·k rows of I elements `xs` apart from `xp` (view or contiguous copy,
    // alive until the launch is enqueued); `ip` points at T·k contiguous int64 and `wtp` at
    // T·k f32; w holds E·N·I contiguous elements from `wp`, read only for an expert in
    // [0, E) after one wrap; `out` holds T·N. `vec` divides every row start and I·size
    // (fit), `warps` is a multiple of `split` at most GEMV_MAX_WARPS, and T ≤ 65535
    // (experts_sum_declines).
    unsafe { launch_after!(dev, f, cfg; xp, xs, wp, ip, wtp, k32, e32, op, n32, i32_, g)? };
    drop((x_copy, idx_copy));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_names_round_trip_and_reject_bad_ones() {
        let v: Variant = "b16_r2_u4_g1_w4".parse().unwrap();
        assert_eq!(v, Variant::new(16, 2, 4, 1, 4));
        assert_eq!(v.to_string(), "b16_r2_u4_g1_w4");
        for bad in
            ["", "b16_r2_u4_g1", "b16_r3_u4_g1_w4", "b16_r1_u4_g3_w4", "b16_r1_u4_g1_w32", "x16_r1_u4_g1_w4"]
        {
            assert!(bad.parse::<Variant>().is_err(), "{bad}");
        }
        for v in candidates() {
            assert_eq!(v.to_string().parse::<Variant>(), Ok(v));
        }
    }

    #[test]
    fn table_rules_are_valid_variants() {
        for r in TABLE {
            assert_eq!(r.variant.to_string().parse::<Variant>(), Ok(r.variant));
        }
        assert_eq!(DEFAULT.to_string().parse::<Variant>(), Ok(DEFAULT));
    }

    #[test]
    fn tiles_are_compiled() {
        for &(vec, rows, unroll) in TILES {
            let line = format!("KILN_GEMV_TILE(S, T, {vec}, {rows}, {unroll})");
            let narrow = format!("KILN_GEMV_TILE(bf16, kbf, {vec}, {rows}, {unroll})");
            // Tiles of whole (gate, up) pairs also compile the SwiGLU kernels (pair_tile).
            let pairs = format!("KILN_GEMV_PAIR_TILE(S, T, {vec}, {rows}, {unroll})");
            assert_eq!(GEMV.src.contains(&pairs), vec == 16 && rows % 2 == 0, "{pairs}");
            assert!(
                GEMV.src.contains(&line) || GEMV.src.contains(&narrow) || GEMV.src.contains(&pairs),
                "{line}"
            );
        }
        assert_eq!(pair_tile(Variant::new(16, 1, 8, 2, 8), Pairs(true)), Variant::new(16, 2, 4, 2, 8));
        assert_eq!(pair_tile(Variant::new(16, 4, 2, 1, 4), Pairs(true)), Variant::new(16, 4, 2, 1, 4));
    }

    #[test]
    fn x_views_as_rows() {
        let l = |shape: &[usize], strides: &[usize], offset| Layout {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
        };
        assert_eq!(copy::rows_of(&l(&[5], &[1], 3), 5), Some((3, 5)));
        assert_eq!(copy::rows_of(&l(&[2, 3, 5], &[15, 5, 1], 0), 5), Some((0, 5)));
        assert_eq!(copy::rows_of(&l(&[4, 5], &[16, 1], 2), 5), Some((2, 16)));
        assert_eq!(copy::rows_of(&l(&[4, 5], &[1, 4], 0), 5), None);
        assert_eq!(copy::rows_of(&l(&[2, 3, 5], &[5, 10, 1], 0), 5), None);
        assert_eq!(widest(2, |v| 4096 % v == 0), 16);
        assert_eq!(widest(2, |v| 4098 % v == 0), 2);
        assert_eq!(widest(4, |v| 4100 % v == 0), 4);
    }

    #[test]
    fn routing() {
        let w = Layout::contiguous(&[128, 2048]);
        assert_eq!(declines(1, 128, 2048, &w, DType::BF16), None);
        assert!(declines(9, 128, 2048, &w, DType::BF16).is_some());
        assert!(declines(1, 128, 2048, &w, DType::F64).is_some());
        let t = Layout { shape: vec![128, 2048], strides: vec![1, 128], offset: 0 };
        assert!(declines(1, 128, 2048, &t, DType::F32).is_some());
        let _auto = settings::GEMV_VARIANT.scoped(None);
        assert_eq!(choose(1, 128, 2048).unwrap(), Variant::new(16, 1, 4, 8, 8));
        // K of 4096 keeps 8 loads per lane in flight; shorter rows take 4.
        assert_eq!(choose(1, 4096, 4096).unwrap(), Variant::new(16, 1, 8, 2, 8));
        assert_eq!(choose(1, 4096, 2048).unwrap(), Variant::new(16, 1, 4, 2, 8));
        assert_eq!(choose(1, 2048, 4096).unwrap(), Variant::new(16, 1, 4, 4, 4));
        assert_eq!(EXPERT_PAIRS.to_string().parse::<Variant>(), Ok(EXPERT_PAIRS));
    }
}
