//! `expert_linear`: `F.linear` whose weight each (token, slot) takes from stacked experts
//! by an index that stays on the device — a mixture-of-experts layer at decode. On CUDA
//! the experts kernel of `kernels/gemv.cu` streams only the chosen experts' weights, with
//! no gathered copy and no host sync; shapes it declines (and the CPU) take reference
//! paths with the same result.

use super::index::{check_index_dtype, host_indices};
use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::{Device, Tensor};

impl Tensor {
    /// `y[t, j] = weights[experts[t, j]] · x[t]` for `x` `[T, K]` (every slot of a token
    /// reads its row), or `· x[t, j]` for `x` `[T, k, K]` (a row per slot); `weights`
    /// `[E, N, K]` (F.linear's `[out, in]` per expert), `experts` `[T, k]` of any integer
    /// dtype → `[T, k, N]`. Negative indices wrap once; an index still outside `[0, E)` is
    /// an error on the CPU and a zero row on the GPU, as `index_select` treats it.
    pub fn expert_linear(&self, weights: &Tensor, experts: &Tensor) -> Result<Tensor> {
        const OP: &str = "expert_linear";
        self.check_same_device(weights, OP)?;
        self.check_same_device(experts, OP)?;
        if self.dtype != weights.dtype {
            return Err(Error::DTypeMismatch { op: OP, lhs: self.dtype, rhs: weights.dtype });
        }
        check_index_dtype(OP, experts)?;
        let (xs, ws, es) = (self.shape(), weights.shape(), experts.shape());
        if ws.len() != 3 || es.len() != 2 {
            return Err(Error::bad_shape(
                OP,
                format!("weights must be [E, N, K] and experts [T, k], got {ws:?} and {es:?}"),
            ));
        }
        let (e, n, k, t, slots) = (ws[0], ws[1], ws[2], es[0], es[1]);
        let per_row = match xs {
            [xt, xk] if *xt == t && *xk == k => slots,
            [xt, xj, xk] if *xt == t && *xj == slots && *xk == k => 1,
            _ => {
                return Err(Error::bad_shape(
                    OP,
                    format!("x must be [T, K] or [T, k, K] = [{t}, {k}] or [{t}, {slots}, {k}] for experts {es:?} and weights {ws:?}, got {xs:?}"),
                ))
            }
        };
        if t * slots == 0 {
            return Tensor::zeros(&[t, slots, n], self.dtype, self.device);
        }
        if e == 0 {
            return Err(Error::IndexOutOfRange { op: OP, index: 0, size: 0 });
        }
        if let Device::Cuda(_) = self.device {
            let why = crate::cuda::ops::gemv::experts_declines(t * slots, &weights.layout, self.dtype);
            let Some(why) = why else {
                let buf = match (&*self.read(), &*weights.read(), &*experts.read()) {
                    (Storage::Cuda(x), Storage::Cuda(w), Storage::Cuda(i)) => {
                        crate::cuda::ops::gemv::expert_linear(
                            x,
                            &self.layout,
                            per_row,
                            w,
                            &weights.layout,
                            i,
                            &experts.layout,
                            experts.dtype,
                            self.dtype,
                        )?
                    }
                    _ => unreachable!("devices checked above"),
                };
                return Ok(Tensor::from_storage(Storage::Cuda(buf), &[t, slots, n], self.dtype, self.device));
            };
            tracing::debug!("{OP} {t}x{slots} of {ws:?} {}: composed path ({why})", self.dtype);
            // Each slot's weight gathered, then one batched product: no host sync.
            let w = weights.index_select(0, &experts.reshape(&[t * slots])?)?;
            let x = self.reshape(&[t, slots / per_row, 1, k])?.expand(&[t, slots, 1, k])?;
            return x.matmul(&w.reshape(&[t, slots, n, k])?.transpose(-1, -2)?)?.reshape(&[t, slots, n]);
        }
        // CPU: the indices are host memory; each slot is one linear on its expert's view.
        let idx = host_indices(OP, experts, e)?;
        let x = self.reshape(&[t * slots / per_row, k])?;
        let rows = idx
            .iter()
            .enumerate()
            .map(|(s, &ex)| x.narrow(0, s / per_row, 1)?.linear(&weights.narrow(0, ex, 1)?.squeeze(0)?, None))
            .collect::<Result<Vec<_>>>()?;
        Tensor::cat(&rows, 0)?.reshape(&[t, slots, n])
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
