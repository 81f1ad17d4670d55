//! Choosing the next token on the device: repetition penalty, temperature, top-k,
//! top-p, then a draw (Gumbel-max: `argmax(logits/T + Gumbel noise)` samples from
//! `softmax(logits/T)` with the noise generated where the logits are). The result is an
//! int64 `[1]` tensor on the device; only its 8 bytes are read back by the caller.

use kiln::{DType, Device, Result, Tensor};

/// Candidates top-p looks at when top-k is off (the cumulative sum is one small
/// matmul over them, so the whole vocabulary is not sorted).
pub const TOP_P_CANDIDATES: usize = 1024;

/// How the next token is chosen: repetition penalty, temperature, top-k and top-p, each
/// with a value that turns it off ([`SamplingParams::greedy`] turns them all off).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f64,
    /// 0 = off.
    pub top_k: usize,
    /// 1 = off. Applied over the top-k candidates (or the top `TOP_P_CANDIDATES`).
    pub top_p: f64,
    /// 1 = off. Logits of tokens already in the prompt or output are divided by it
    /// (multiplied when negative), as in transformers.
    pub repetition_penalty: f64,
    /// Seed of the random draws (the same seed gives the same tokens).
    pub seed: u64,
}

impl SamplingParams {
    /// Greedy decoding: the most likely token every step.
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0, repetition_penalty: 1.0, seed: 0 }
    }
}

/// Chooses each next token on the device as [`SamplingParams`] say, keeping the token
/// history the repetition penalty needs.
pub struct Sampler {
    params: SamplingParams,
    /// Token ids seen so far (prompt and output), int64 on the device.
    history: Tensor,
    seen: usize,
    step: u64,
    /// `[k, k]` strictly-upper-triangular ones: `probs @ tri` = mass before each candidate.
    tri: Option<Tensor>,
}

impl Sampler {
    /// A sampler for sequences of up to `capacity` tokens.
    pub fn new(params: SamplingParams, capacity: usize, device: Device) -> Result<Self> {
        if params.temperature < 0.0
            || !(params.top_p > 0.0 && params.top_p <= 1.0)
            || params.repetition_penalty <= 0.0
        {
            return Err(kiln::Error::invalid(
                "sampling",
                format!(
                    "temperature {} must be ≥ 0, top_p {} in (0, 1], repetition_penalty {} > 0",
                    params.temperature, params.top_p, params.repetition_penalty
                ),
            ));
        }
        let history = Tensor::zeros(&[capacity.max(1)], DType::I64, device)?;
        Ok(Sampler { params, history, seen: 0, step: 0, tri: None })
    }

    /// Whether a pick is the argmax of the logits alone (no draw, no penalty): such a step
    /// depends on nothing the host holds and can be captured in a CUDA graph.
    pub fn is_greedy(&self) -> bool {
        self.params.temperature == 0.0 && self.params.repetition_penalty == 1.0
    }

    /// Records token ids (int64, any shape, on the device) for the repetition penalty.
    pub fn observe(&mut self, ids: &Tensor) -> Result<()> {
        if self.params.repetition_penalty != 1.0 {
            let n = ids.numel();
            self.history.narrow(0, self.seen, n)?.copy_(&ids.reshape(&[n])?)?;
            self.seen += n;
        }
        Ok(())
    }

    /// The next token, int64 `[1]` on the device, from the logits of one position (any
    /// shape holding `V` values). Also records it for the repetition penalty.
    pub fn sample(&mut self, logits: &Tensor) -> Result<Tensor> {
        let p = self.params.clone();
        let v = logits.numel();
        let mut l = logits.reshape(&[v])?.to_dtype(DType::F32)?;
        if p.repetition_penalty != 1.0 && self.seen > 0 {
            let ids = self.history.narrow(0, 0, self.seen)?;
            let g = l.gather(0, &ids)?;
            let penalised = Tensor::where_cond(
                &g.gt_scalar(0.0)?,
                &g.div_scalar(p.repetition_penalty)?,
                &g.mul_scalar(p.repetition_penalty)?,
            )?;
            l = l.copy()?;
            l.put_(&ids, &penalised, false)?;
        }
        let token = if p.temperature == 0.0 { l.argmax(None, false)?.reshape(&[1])? } else { self.draw(&l)? };
        self.observe(&token)?;
        self.step += 1;
        Ok(token)
    }

    fn draw(&mut self, l: &Tensor) -> Result<Tensor> {
        let p = self.params.clone();
        let v = l.numel();
        let l = l.div_scalar(p.temperature)?;
        let k = match (p.top_k, p.top_p < 1.0) {
            (0, false) => v,
            (0, true) => v.min(TOP_P_CANDIDATES),
            (k, _) => k.min(v),
        };
        let (mut vals, idx) = if k < v || p.top_p < 1.0 {
            let (vals, idx) = l.topk(k, 0, true)?;
            (vals, Some(idx))
        } else {
            (l, None)
        };
        if p.top_p < 1.0 {
            // Keep the most probable candidates until their mass reaches top_p (the
            // first always stays).
            let tri = match &self.tri {
                Some(t) if t.shape()[0] == k => t.clone(),
                _ => {
                    let ones: Vec<f32> = (0..k * k).map(|x| if x / k < x % k { 1.0 } else { 0.0 }).collect();
                    let t = Tensor::from_vec(ones, &[k, k], vals.device())?;
                    self.tri = Some(t.clone());
                    t
                }
            };
            let before = vals.softmax(0)?.matmul(&tri)?;
            let neg_inf = Tensor::scalar(f64::NEG_INFINITY, DType::F32, vals.device())?;
            vals = Tensor::where_cond(&before.lt_scalar(p.top_p)?, &vals, &neg_inf)?;
        }
        let seed = p.seed ^ self.step.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let u = Tensor::rand(&[vals.numel()], seed, DType::F32, vals.device())?;
        let gumbel = u.log()?.neg()?.log()?.neg()?;
        let choice = vals.add(&gumbel)?.argmax(None, false)?.reshape(&[1])?;
        match idx {
            Some(idx) => idx.gather(0, &choice),
            None => Ok(choice),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Tensor {
        Tensor::from_vec(vec![1.0f32, 3.0, -2.0, 2.9, 0.5, -1.0], &[1, 6], Device::Cpu).unwrap()
    }

    fn draws(params: SamplingParams, n: usize) -> Vec<i64> {
        let mut s = Sampler::new(params, n + 1, Device::Cpu).unwrap();
        (0..n).map(|_| s.sample(&logits()).unwrap().to_vec::<i64>().unwrap()[0]).collect()
    }

    #[test]
    fn greedy_and_top_k_1_pick_the_argmax() {
        assert_eq!(draws(SamplingParams::greedy(), 3), vec![1, 1, 1]);
        let p = SamplingParams { temperature: 1.5, top_k: 1, seed: 4, ..SamplingParams::greedy() };
        assert_eq!(draws(p, 5), vec![1; 5]);
    }

    #[test]
    fn sampling_follows_the_distribution_and_the_seed() {
        let p = SamplingParams { temperature: 1.0, seed: 11, ..SamplingParams::greedy() };
        let a = draws(p.clone(), 400);
        assert_eq!(a, draws(p.clone(), 400), "same seed, same draws");
        assert_ne!(a, draws(SamplingParams { seed: 12, ..p.clone() }, 400));
        // softmax of the logits: token 1 has p ≈ 0.45, token 3 ≈ 0.41, token 2 ≈ 0.003.
        let count = |t| a.iter().filter(|&&x| x == t).count();
        assert!(
            (140..220).contains(&count(1)) && (125..205).contains(&count(3)),
            "{}, {}",
            count(1),
            count(3)
        );
        // top-k 2 leaves only tokens 1 and 3; top-p 0.5 only those two as well.
        let k2 = draws(SamplingParams { top_k: 2, ..p.clone() }, 200);
        assert!(k2.iter().all(|&t| t == 1 || t == 3) && k2.contains(&3));
        let p5 = draws(SamplingParams { top_p: 0.5, ..p }, 200);
        assert!(p5.iter().all(|&t| t == 1 || t == 3) && p5.contains(&3), "{p5:?}");
    }

    #[test]
    fn repetition_penalty_moves_away_from_seen_tokens() {
        let p = SamplingParams { repetition_penalty: 2.0, ..SamplingParams::greedy() };
        // 3.0 → 1.5 after the first pick, so 2.9 (token 3) wins, then 1.45 vs 1.5 → token 1.
        assert_eq!(draws(p, 3), vec![1, 3, 1]);
    }
}
