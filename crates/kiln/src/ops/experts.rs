//! Mixture-of-experts helpers whose expert indices stay on the device.
//! - `expert_linear`: `F.linear` whose weight each (token, slot) takes from stacked experts
//!   — a layer at decode. On CUDA the experts kernel of `kernels/gemv.cu` streams only the
//!   chosen experts' weights, with no gathered copy and no host sync; shapes it declines
//!   (and the CPU) take reference paths with the same result.
//! - `expert_swiglu`: the same with gate_up experts, storing SwiGLU's `silu(gate) · up`
//!   (one launch on CUDA: each warp computes a gate row and its up row).
//! - `expert_linear_sum`: the rest of a decode step's experts — the down projection of
//!   each slot's expert and the router-weighted sum — as one launch on CUDA
//!   (`kernels/gemv.cu`); the CPU composes the same ops.
//! - `expert_groups`: the (token, slot) pairs grouped by expert — a prompt, whose experts
//!   then run as `grouped_mm`s. On CUDA a counting sort in `kernels/expert_groups.cu`, no
//!   host sync.

use super::index::{check_index_dtype, host_indices};
use crate::backend::{buf, on_backend, Backend, Route};
use crate::cuda::ops::gemv::Pairs;
use crate::cuda::Cuda;
use crate::error::{Error, Result};
use crate::{Device, Tensor};

/// A mixture-of-experts layer's (token, slot) pairs grouped by expert
/// ([`Tensor::expert_groups`]).
#[derive(Debug)]
pub struct ExpertGroups {
    /// int64 `[T·k]`: the token of each grouped row; expert 0's rows first, then expert 1's…
    pub rows: Tensor,
    /// int64 `[T·k]`: the grouped row of each (token, slot), row-major over `[T, k]`.
    pub slot_rows: Tensor,
    /// int32 `[E]`: cumulative group ends, `grouped_mm`'s `offs`.
    pub ends: Tensor,
}

/// How many of a token's `slots` slots read each row of x: `slots` for x `[T, K]` (every
/// slot of a token reads its row), 1 for `[T, k, K]` (a row per slot).
pub(super) fn slots_per_x_row(
    op: &'static str,
    xs: &[usize],
    t: usize,
    slots: usize,
    k: usize,
) -> Result<usize> {
    match xs {
        [xt, xk] if *xt == t && *xk == k => Ok(slots),
        [xt, xj, xk] if *xt == t && *xj == slots && *xk == k => Ok(1),
        _ => Err(Error::bad_shape(
            op,
            format!("x must be [T, K] or [T, k, K] = [{t}, {k}] or [{t}, {slots}, {k}], got {xs:?}"),
        )),
    }
}

impl Tensor {
    /// Groups the router's choices `self` (`[T, k]`, any integer dtype) by expert, for
    /// `num_experts` experts, so that a prompt's experts run as one `grouped_mm` each:
    /// `x.index_select(0, rows)` stacks the tokens in group order, `grouped_mm(…, ends)`
    /// runs every expert on its rows, and `index_select(0, slot_rows)` puts the outputs
    /// back in `[T·k]` order. Negative indices wrap once. On the CPU pairs keep their order
    /// within a group and an index still outside `[0, E)` is an error; on CUDA the order
    /// within a group is unspecified (grouped_mm's rows do not depend on it), no host sync
    /// is made, and such an index gets a row past the last end, which grouped_mm zeroes.
    pub fn expert_groups(&self, num_experts: usize) -> Result<ExpertGroups> {
        const OP: &str = "expert_groups";
        check_index_dtype(OP, self)?;
        let (t, k) = match *self.shape() {
            [t, k] => (t, k),
            _ => return Err(Error::bad_shape(OP, format!("experts must be [T, k], got {:?}", self.shape()))),
        };
        if num_experts == 0 || num_experts > i32::MAX as usize {
            return Err(Error::invalid(OP, format!("{num_experts} experts")));
        }
        let n = t * k;
        let idx = self.to_dtype(crate::DType::I64)?.dense()?;
        let [rows, slot_rows, ends] = on_backend!(&*idx.read(), |B, b| {
            let (rows, slot_rows, ends) = B::expert_groups(OP, b, n, k, num_experts)?;
            [rows, slot_rows, ends].map(B::wrap)
        });
        let wrap = |s, shape: &[usize], dt| Tensor::from_storage(s, shape, dt, self.device);
        Ok(ExpertGroups {
            rows: wrap(rows, &[n], crate::DType::I64),
            slot_rows: wrap(slot_rows, &[n], crate::DType::I64),
            ends: wrap(ends, &[num_experts], crate::DType::I32),
        })
    }

    /// `y[t, j] = weights[experts[t, j]] · x[t]` for `x` `[T, K]` (every slot of a token
    /// reads its row), or `· x[t, j]` for `x` `[T, k, K]` (a row per slot); `weights`
    /// `[E, N, K]` (F.linear's `[out, in]` per expert), `experts` `[T, k]` of any integer
    /// dtype → `[T, k, N]`. Negative indices wrap once; an index still outside `[0, E)` is
    /// an error on the CPU and a zero row on the GPU, as `index_select` treats it.
    pub fn expert_linear(&self, weights: &Tensor, experts: &Tensor) -> Result<Tensor> {
        self.experts_product("expert_linear", weights, experts, Pairs(false))
    }

    /// SwiGLU of the chosen gate_up experts: `silu(g) · u` where `g`, `u` are the first and
    /// last `I` outputs of [`Tensor::expert_linear`] against `gate_up` `[E, 2·I, K]` (gate
    /// rows, then up rows, per expert) → `[T, k, I]`. On CUDA one launch computes each gate
    /// row with its up row and stores the product as `silu_mul` would (same bits as the
    /// composed ops); elsewhere, and where the kernel declines, the composed ops.
    pub fn expert_swiglu(&self, gate_up: &Tensor, experts: &Tensor) -> Result<Tensor> {
        if gate_up.rank() == 3 && !gate_up.shape()[1].is_multiple_of(2) {
            return Err(Error::bad_shape(
                "expert_swiglu",
                format!("gate_up experts have {} rows: must be 2·I (gate, then up)", gate_up.shape()[1]),
            ));
        }
        self.experts_product("expert_swiglu", gate_up, experts, Pairs(true))
    }

    /// [`Tensor::expert_linear`], or with `pairs` [`Tensor::expert_swiglu`].
    fn experts_product(
        &self,
        op: &'static str,
        weights: &Tensor,
        experts: &Tensor,
        pairs: Pairs,
    ) -> Result<Tensor> {
        self.check_same_device(weights, op)?;
        self.check_same_device(experts, op)?;
        if self.dtype != weights.dtype {
            return Err(Error::DTypeMismatch { op, lhs: self.dtype, rhs: weights.dtype });
        }
        check_index_dtype(op, experts)?;
        let (xs, ws, es) = (self.shape(), weights.shape(), experts.shape());
        if ws.len() != 3 || es.len() != 2 {
            return Err(Error::bad_shape(
                op,
                format!("weights must be [E, N, K] and experts [T, k], got {ws:?} and {es:?}"),
            ));
        }
        let (e, n, k, t, slots) = (ws[0], ws[1], ws[2], es[0], es[1]);
        let per_row = slots_per_x_row(op, xs, t, slots, k)?;
        let n_out = if pairs.0 { n / 2 } else { n };
        if t * slots == 0 {
            return Tensor::zeros(&[t, slots, n_out], self.dtype, self.device);
        }
        if e == 0 {
            return Err(Error::IndexOutOfRange { op, index: 0, size: 0 });
        }
        if pairs.0 {
            let why = Cuda::of(&weights.read()).map_or(Some("not on CUDA"), |b| {
                let wp = b.ptr() + (weights.layout.offset * weights.dtype.size()) as u64;
                crate::cuda::ops::gemv::pairs_decline(n, k, wp, weights.dtype)
            });
            let what = format_args!("{op} {t}x{slots} of {ws:?} {}", self.dtype);
            if let Route::Composed(_) = Route::of(what, why) {
                let h = self.experts_product(op, weights, experts, Pairs(false))?;
                return h.narrow(-1, 0, n_out)?.silu_mul(&h.narrow(-1, n_out, n_out)?);
            }
        }
        if let Device::Cuda(_) = self.device {
            let why = crate::cuda::ops::gemv::experts_declines(t * slots, &weights.layout, self.dtype);
            if Route::of(format_args!("{op} {t}x{slots} of {ws:?} {}", self.dtype), why) == Route::Kernel {
                let (xg, wg, ig) = (self.read(), weights.read(), experts.read());
                let (x, w, i) = (buf::<Cuda>(&xg, op)?, buf::<Cuda>(&wg, op)?, buf::<Cuda>(&ig, op)?);
                let (xl, wl, il) = (&self.layout, &weights.layout, &experts.layout);
                let y = crate::cuda::ops::gemv::expert_linear(
                    x,
                    xl,
                    per_row,
                    w,
                    wl,
                    i,
                    il,
                    experts.dtype,
                    pairs,
                    self.dtype,
                )?;
                return Ok(Tensor::from_storage(Cuda::wrap(y), &[t, slots, n_out], self.dtype, self.device));
            }
            // Each slot's weight gathered, then one batched product: no host sync.
            let w = weights.index_select(0, &experts.reshape(&[t * slots])?)?;
            let x = self.reshape(&[t, slots / per_row, 1, k])?.expand(&[t, slots, 1, k])?;
            let h = x.matmul(&w.reshape(&[t, slots, n, k])?.transpose(-1, -2)?)?.reshape(&[t, slots, n])?;
            return if pairs.0 {
                h.narrow(-1, 0, n_out)?.silu_mul(&h.narrow(-1, n_out, n_out)?)
            } else {
                Ok(h)
            };
        }
        // CPU (pairs were composed above): the indices are host memory; each slot is one
        // linear on its expert's view.
        let idx = host_indices(op, experts, e)?;
        let x = self.reshape(&[t * slots / per_row, k])?;
        let rows = idx
            .iter()
            .enumerate()
            .map(|(s, &ex)| x.narrow(0, s / per_row, 1)?.linear(&weights.narrow(0, ex, 1)?.squeeze(0)?, None))
            .collect::<Result<Vec<_>>>()?;
        Tensor::cat(&rows, 0)?.reshape(&[t, slots, n])
    }
}

impl Tensor {
    /// A mixture-of-experts block's output after its SwiGLU activations `self` `[T, k, I]`
    /// (one row per slot, [`Tensor::expert_swiglu`]): `y[t] = Σ_j weights[t, j] ·
    /// down[experts[t, j]] · self[t, j]`, with `down` `[E, N, I]` stacked experts
    /// (F.linear's `[out, in]`), `experts` `[T, k]` of any integer dtype and `weights`
    /// `[T, k]` of a float dtype (the router's) → `[T, N]` in `self`'s dtype. The weighted
    /// sum runs in f32 and is rounded once. Indices follow [`Tensor::expert_linear`]
    /// (negative wraps once; still outside `[0, E)`: an error on the CPU, nothing added on
    /// the GPU). On CUDA one launch (no host sync); elsewhere, and for shapes the kernel
    /// declines, the composed `expert_linear` → weighted sum.
    pub fn expert_linear_sum(&self, down: &Tensor, experts: &Tensor, weights: &Tensor) -> Result<Tensor> {
        const OP: &str = "expert_linear_sum";
        for t in [down, experts, weights] {
            self.check_same_device(t, OP)?;
        }
        if self.dtype != down.dtype {
            return Err(Error::DTypeMismatch { op: OP, lhs: self.dtype, rhs: down.dtype });
        }
        check_index_dtype(OP, experts)?;
        if !weights.dtype.is_float() {
            return Err(Error::DTypeNotSupported {
                op: OP,
                got: weights.dtype,
                expected: "a floating dtype",
            });
        }
        let (xs, ds, es) = (self.shape(), down.shape(), experts.shape());
        let shapes_fit = matches!((xs, ds, es), ([xt, xk, xi], [_, _, i], [et, ek])
            if xt == et && xk == ek && xi == i);
        if !shapes_fit || weights.shape() != es {
            return Err(Error::bad_shape(
                OP,
                format!(
                    "needs x [T, k, I], down [E, N, I], experts and weights [T, k]; got x {xs:?}, down {ds:?}, experts {es:?}, weights {:?}",
                    weights.shape()
                ),
            ));
        }
        let (t, k, n) = (es[0], es[1], ds[1]);
        if t * k == 0 {
            return Tensor::zeros(&[t, n], self.dtype, self.device);
        }
        if ds[0] == 0 {
            return Err(Error::IndexOutOfRange { op: OP, index: 0, size: 0 });
        }
        let weights = weights.to_dtype(crate::DType::F32)?.dense()?;
        if let Device::Cuda(_) = self.device {
            let why = crate::cuda::ops::gemv::experts_sum_declines(t, k, &down.layout, self.dtype);
            if Route::of(format_args!("{OP} {t}x{k} of {ds:?} {}", self.dtype), why) == Route::Kernel {
                let g = [self.read(), down.read(), experts.read(), weights.read()];
                let [x, w, e, r] = g.each_ref().map(|g| buf::<Cuda>(g, OP));
                let y = crate::cuda::ops::gemv::expert_linear_sum(
                    x?,
                    &self.layout,
                    w?,
                    &down.layout,
                    e?,
                    &experts.layout,
                    experts.dtype,
                    r?,
                    weights.layout.offset,
                    self.dtype,
                )?;
                return Ok(Tensor::from_storage(Cuda::wrap(y), &[t, n], self.dtype, self.device));
            }
        }
        let y = self.expert_linear(down, experts)?;
        let f32 = crate::DType::F32;
        weights.unsqueeze(1)?.matmul(&y.to_dtype(f32)?)?.reshape(&[t, n])?.to_dtype(self.dtype)
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    fn randn(shape: &[usize], seed: u64) -> Tensor {
        Tensor::randn(shape, seed, DType::F32, Device::Cpu).unwrap()
    }

    /// Every slot against its expert in f64, for both x forms and a negative index.
    #[test]
    fn matches_per_slot_products() {
        let (e, n, k) = (5, 7, 9);
        let w = randn(&[e, n, k], 1);
        let experts = Tensor::from_vec(vec![3i64, 0, -1, 3, 2, 1], &[3, 2], Device::Cpu).unwrap();
        let wv = w.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        let chosen = [3usize, 0, 4, 3, 2, 1];
        for per_slot in [false, true] {
            let x = if per_slot { randn(&[3, 2, k], 2) } else { randn(&[3, k], 3) };
            let xv = x.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
            let y = x.expert_linear(&w, &experts).unwrap();
            assert_eq!(y.shape(), [3, 2, n]);
            let yv = y.to_vec::<f32>().unwrap();
            for (s, &ex) in chosen.iter().enumerate() {
                let row = if per_slot { s } else { s / 2 };
                for o in 0..n {
                    let want: f64 = (0..k).map(|i| wv[(ex * n + o) * k + i] * xv[row * k + i]).sum();
                    let got = yv[s * n + o] as f64;
                    assert!(
                        (got - want).abs() < 1e-5 * (1.0 + want.abs()),
                        "slot {s} out {o}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// expert_swiglu then expert_linear_sum equal SwiGLU, the down projection and the
    /// weighted sum in f64; a negative index wraps, and bad shapes are refused.
    #[test]
    fn expert_swiglu_and_sum_are_their_parts() {
        let (e, n, i, h, t, k) = (5, 7, 6, 4, 3, 2);
        let (gate_up, down) = (randn(&[e, 2 * i, h], 4), randn(&[e, n, i], 1));
        let x = randn(&[t, h], 2);
        let experts = Tensor::from_vec(vec![3i64, 0, -1, 3, 2, 1], &[t, k], Device::Cpu).unwrap();
        let weights = randn(&[t, k], 3);
        let act = x.expert_swiglu(&gate_up, &experts).unwrap();
        assert_eq!(act.shape(), [t, k, i]);
        let y = act.expert_linear_sum(&down, &experts, &weights).unwrap();
        assert_eq!(y.shape(), [t, n]);
        let f = |v: &Tensor| v.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        let (gv, dv, xv, wv, av, yv) = (f(&gate_up), f(&down), f(&x), f(&weights), f(&act), f(&y));
        let chosen = [3usize, 0, 4, 3, 2, 1];
        let close = |got: f64, want: f64, what: &str| {
            assert!((got - want).abs() < 1e-5 * (1.0 + want.abs()), "{what}: {got} vs {want}")
        };
        for tok in 0..t {
            for j in 0..k {
                let (s, ex) = (tok * k + j, chosen[tok * k + j]);
                let dot = |row: usize| {
                    (0..h).map(|c| gv[(ex * 2 * i + row) * h + c] * xv[tok * h + c]).sum::<f64>()
                };
                for c in 0..i {
                    let (g, u) = (dot(c), dot(i + c));
                    close(av[s * i + c], g / (1.0 + (-g).exp()) * u, &format!("slot {s} act {c}"));
                }
            }
            for o in 0..n {
                let want: f64 = (0..k)
                    .map(|j| {
                        let (s, ex) = (tok * k + j, chosen[tok * k + j]);
                        wv[s] * (0..i).map(|c| dv[(ex * n + o) * i + c] * av[s * i + c]).sum::<f64>()
                    })
                    .sum();
                close(yv[tok * n + o], want, &format!("token {tok} out {o}"));
            }
        }
        let msg = |r: crate::Result<Tensor>| r.unwrap_err().to_string();
        assert!(msg(x.expert_swiglu(&gate_up.narrow(1, 0, 2 * i - 1).unwrap(), &experts)).contains("2·I"));
        assert!(
            msg(randn(&[t, k, i + 1], 2).expert_linear_sum(&down, &experts, &weights)).contains("[T, k, I]")
        );
        assert!(msg(act.expert_linear_sum(&down, &experts, &randn(&[t, k + 1], 3))).contains("weights"));
        let far = Tensor::from_vec(vec![0i64, 5, 0, 0, 0, 0], &[t, k], Device::Cpu).unwrap();
        assert!(msg(act.expert_linear_sum(&down, &far, &weights)).contains("out of range"));
    }

    /// Groups in expert order, pairs in order within a group, and the round trip
    /// `slot_rows` ∘ `rows` gives back each pair's token; bad input is refused.
    #[test]
    fn expert_groups_sort_pairs_by_expert() {
        let experts = Tensor::from_vec(vec![2i32, 0, -1, 2, 0, 3], &[3, 2], Device::Cpu).unwrap();
        let g = experts.expert_groups(4).unwrap();
        assert_eq!(g.ends.to_vec::<i32>().unwrap(), [2, 2, 4, 6]);
        assert_eq!(g.rows.to_vec::<i64>().unwrap(), [0, 2, 0, 1, 1, 2]);
        assert_eq!(g.slot_rows.to_vec::<i64>().unwrap(), [2, 0, 4, 3, 1, 5]);
        let msg = |r: crate::Result<super::ExpertGroups>| r.unwrap_err().to_string();
        assert!(msg(experts.expert_groups(3)).contains("out of range"));
        assert!(msg(experts.reshape(&[6]).unwrap().expert_groups(4)).contains("[T, k]"));
        assert!(msg(experts.to_dtype(DType::F32).unwrap().expert_groups(4)).contains("integer"));
        assert!(experts.expert_groups(0).is_err());
    }

    #[test]
    fn refuses_bad_input_with_reasons() {
        let w = randn(&[4, 3, 8], 1);
        let idx = Tensor::from_vec(vec![0i64, 1], &[1, 2], Device::Cpu).unwrap();
        let msg = |r: crate::Result<Tensor>| r.unwrap_err().to_string();
        assert!(msg(randn(&[1, 7], 2).expert_linear(&w, &idx)).contains("x must be [T, K] or [T, k, K]"));
        assert!(msg(randn(&[2, 8], 2).expert_linear(&w, &idx)).contains("x must be"));
        assert!(msg(randn(&[1, 8], 2).expert_linear(&w.narrow(0, 0, 1).unwrap().squeeze(0).unwrap(), &idx))
            .contains("weights must be [E, N, K]"));
        let fidx = Tensor::from_vec(vec![0f32, 1.0], &[1, 2], Device::Cpu).unwrap();
        assert!(msg(randn(&[1, 8], 2).expert_linear(&w, &fidx)).contains("integer"));
        let far = Tensor::from_vec(vec![0i64, 4], &[1, 2], Device::Cpu).unwrap();
        assert!(msg(randn(&[1, 8], 2).expert_linear(&w, &far)).contains("out of range"));
        let half = randn(&[1, 8], 2).to_dtype(DType::BF16).unwrap();
        assert!(half.expert_linear(&w, &idx).is_err());
        let none = Tensor::zeros(&[0, 2], DType::I64, Device::Cpu).unwrap();
        assert_eq!(randn(&[0, 8], 2).expert_linear(&w, &none).unwrap().shape(), [0, 2, 3]);
    }
}
